"""Datasets of real prompts for `llmload run --workload rate --dataset SPEC`, read and checked.

SPEC is one of
- `sharegpt:PATH`: the ShareGPT JSON layout, a list of
  `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}`:
  an entry is a conversation's first human turn (the prompt) and the gpt turn after it (the
  answer: its length in the server's tokens is the request's output length); its later
  human/gpt pairs, while they follow one another, are a chat session's next turns. A
  conversation without a human turn and its answer is dropped (counted).
- `jsonl:PATH`: one `{"prompt": TEXT, "output_tokens": N}` per line (blank lines skipped).
- `hf:NAME[:SPLIT]`: a Hugging Face dataset through the `datasets` package (the optional
  `hf` extra: `pip install 'llmload[hf]'`): NAME a directory written by `save_to_disk`, or a
  name on the Hub (downloaded by `datasets`); SPLIT default "train". Its rows are read as
  the ShareGPT layout (a `conversations` column) or the JSONL one (`prompt` and
  `output_tokens` columns).
An entry may carry images (sent with `--dataset-images`, chat): a JSONL row's `images` (a
list) or `image`; a ShareGPT conversation's `image` or `images` (LLaVA's layout: its
`<image>` marks are taken out of the text, the images go as parts after it); a Hugging Face
row's `images` or `image` column (a path, or an Image feature's bytes, sent as a data URL).
A reference is an image file (relative to the dataset's folder; it must exist) or a data
URL (`images.image_reference`); a web URL is refused (llmload fetches nothing).
A dataset that cannot be read, or that holds no usable entry, is a `DatasetError` (one line:
what, and where: FILE:LINE or FILE entry N). Pure but for `load_dataset`'s one read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
from dataclasses import dataclass
from typing import Any, Iterable

from llmload.core.traffic.images import ImageError, encoded_url, image_reference

DATASET_KINDS = ("sharegpt", "jsonl", "hf")
MAX_DATASET_ENTRIES = 1_000_000


class DatasetError(ValueError):
    """A dataset that cannot be used; the message is one line."""


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """One prompt of a dataset."""

    where: str
    """FILE:LINE or FILE entry N (1-based), for messages."""
    prompt: str
    output_tokens: int | None = None
    """The output length asked (JSONL); None: the answer's length, counted by the server."""
    answer: str | None = None
    """The recorded answer (ShareGPT), whose length in the server's tokens is the output length."""
    turns: tuple[tuple[str, str], ...] = ()
    """A conversation's (human turn, gpt answer) pairs in order, the first being prompt and
    answer (ShareGPT; a chat session's turns); () for a JSONL entry."""
    images: tuple[str, ...] = ()
    """Its images (absolute file paths or data URLs, `images.image_reference`), sent after
    the prompt's text with --dataset-images."""


@dataclass(frozen=True, slots=True)
class Dataset:
    label: str
    """How the results name it: "sharegpt:FILE", "jsonl:FILE", "hf:NAME"."""
    entries: tuple[DatasetEntry, ...]
    dropped: int = 0
    """Conversations without a prompt and an answer (ShareGPT), not entries."""


def parse_dataset_spec(spec: str) -> tuple[str, str, str | None]:
    """(kind, path or name, split) of a SPEC (the module docstring); ValueError (one line)."""
    kind, sep, rest = str(spec).partition(":")
    if not sep or kind not in DATASET_KINDS or not rest:
        raise ValueError(f"{spec!r}: give sharegpt:PATH, jsonl:PATH or hf:NAME[:SPLIT]")
    if kind != "hf":
        return kind, rest, None
    name, _, split = rest.partition(":")
    return kind, name, split or "train"


def dataset_label(spec: str) -> str:
    """How results name a dataset: its kind and file (or directory, or Hub) name."""
    kind, source, _ = parse_dataset_spec(spec)
    return f"{kind}:{os.path.basename(os.path.normpath(source))}"


def _pair(turns: list, i: int) -> tuple[str, str] | None:
    """(human text, gpt text) of turns i and i + 1, where they are that, else None."""
    turn, nxt = turns[i], turns[i + 1]
    if (isinstance(turn, dict) and isinstance(nxt, dict) and turn.get("from") == "human"
            and nxt.get("from") == "gpt" and isinstance(turn.get("value"), str)
            and isinstance(nxt.get("value"), str) and turn["value"].strip() and nxt["value"].strip()):
        return turn["value"], nxt["value"]
    return None


def _turns(conversation: Any) -> tuple[tuple[str, str], ...]:
    """The (human turn, the gpt answer after it) pairs of a conversation, from its first such
    pair while they follow one another; () where it has none."""
    turns = conversation.get("conversations") if isinstance(conversation, dict) else None
    if not isinstance(turns, list):
        return ()
    start = next((i for i in range(len(turns) - 1) if _pair(turns, i)), None)
    if start is None:
        return ()
    pairs = []
    for i in range(start, len(turns) - 1, 2):
        pair = _pair(turns, i)
        if pair is None:
            break
        pairs.append(pair)
    return tuple(pairs)


IMAGE_MARK = re.compile(r"<image>\n?")
"""LLaVA's mark of where an image goes in a turn's text (the image is sent as a part instead)."""


def _images(row: Any, where: str, base: str) -> tuple[str, ...]:
    """A row's images (`images`, a list, or `image`), checked (`images.image_reference`)."""
    if not isinstance(row, dict):
        return ()
    value = row.get("images", row.get("image"))
    if value is None:
        return ()
    values = [value] if not isinstance(value, list) else value
    out = []
    for v in values:
        if isinstance(v, dict) and isinstance(v.get("bytes"), (bytes, bytearray)):  # an HF Image feature, undecoded
            v = encoded_url(bytes(v["bytes"]))
        elif isinstance(v, dict) and isinstance(v.get("path"), str):
            v = v["path"]
        if not isinstance(v, str) or not v:
            raise DatasetError(f"{where}: an image is a file path or a data: URL, got {type(v).__name__}")
        try:
            out.append(image_reference(v, base, where))
        except ImageError as exc:
            raise DatasetError(str(exc)) from None
    return tuple(out)


def sharegpt_entries(conversations: Iterable[Any], name: str, base: str = "") -> tuple[list[DatasetEntry], int]:
    """The entries of ShareGPT conversations, and how many were dropped; `base`: the folder
    an image's path is relative to."""
    entries, dropped = [], 0
    for n, conversation in enumerate(conversations, 1):
        pairs = _turns(conversation)
        if not pairs:
            dropped += 1
            continue
        where = f"{name} entry {n}"
        images = _images(conversation, where, base)
        prompt = IMAGE_MARK.sub("", pairs[0][0]).strip() or pairs[0][0] if images else pairs[0][0]
        entries.append(DatasetEntry(where=where, prompt=prompt, answer=pairs[0][1], turns=pairs, images=images))
    return entries, dropped


def jsonl_entry(row: Any, where: str, base: str = "") -> DatasetEntry:
    """One {"prompt", "output_tokens"[, "images"]} row; DatasetError naming `where`."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: not a JSON object")
    prompt, out = row.get("prompt"), row.get("output_tokens")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DatasetError(f"{where}: no prompt (a non-empty string)")
    if isinstance(out, bool) or not isinstance(out, int) or out < 1:
        raise DatasetError(f"{where}: output_tokens must be an integer of at least 1, got {out!r}")
    return DatasetEntry(where=where, prompt=prompt, output_tokens=out, images=_images(row, where, base))


def _read_sharegpt(path: str) -> Dataset:
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, list):
        raise DatasetError(f"{path}: a ShareGPT file is a JSON list of conversations")
    entries, dropped = sharegpt_entries(doc, name, os.path.dirname(os.path.abspath(path)))
    return Dataset(label=dataset_label(f"sharegpt:{path}"), entries=tuple(entries), dropped=dropped)


def _read_jsonl(path: str) -> Dataset:
    entries = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    raise DatasetError(f"{path}:{n}: not JSON") from None
                entries.append(jsonl_entry(row, f"{path}:{n}", os.path.dirname(os.path.abspath(path))))
                if len(entries) > MAX_DATASET_ENTRIES:
                    raise DatasetError(f"{path}: more than {MAX_DATASET_ENTRIES:,} entries")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    return Dataset(label=dataset_label(f"jsonl:{path}"), entries=tuple(entries))


def _read_hf(name: str, split: str) -> Dataset:
    try:
        import datasets  # the optional `hf` extra
    except ImportError:
        raise DatasetError("hf: datasets need the `datasets` package: pip install 'llmload[hf]'") from None
    try:
        if os.path.isdir(name):
            data = datasets.load_from_disk(name)
            if isinstance(data, datasets.DatasetDict):
                if split not in data:
                    raise DatasetError(f"hf:{name}: no split {split!r} (it has {', '.join(data)})")
                data = data[split]
        else:
            data = datasets.load_dataset(name, split=split)
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the package raises, said in one line
        raise DatasetError(f"hf:{name}: cannot load it: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    label = dataset_label(f"hf:{name}")
    columns = set(data.column_names)
    for column in {"image", "images"} & columns:  # an Image feature: its bytes, not decoded pictures
        feature = data.features[column]
        if isinstance(feature, datasets.Image):
            data = data.cast_column(column, datasets.Image(decode=False))
        elif isinstance(getattr(feature, "feature", None), datasets.Image):
            data = data.cast_column(column, datasets.Sequence(datasets.Image(decode=False)))
        elif isinstance(feature, list) and feature and isinstance(feature[0], datasets.Image):
            data = data.cast_column(column, [datasets.Image(decode=False)])
    base = name if os.path.isdir(name) else ""
    if "conversations" in columns:
        entries, dropped = sharegpt_entries(iter(data), label, base)
        return Dataset(label=label, entries=tuple(entries), dropped=dropped)
    if {"prompt", "output_tokens"} <= columns:
        return Dataset(label=label, entries=tuple(jsonl_entry(row, f"{label} row {n}", base)
                                                  for n, row in enumerate(data, 1)))
    raise DatasetError(f"hf:{name}: no `conversations` column, nor `prompt` and `output_tokens` "
                       f"(it has {', '.join(sorted(columns))})")


def load_dataset(spec: str) -> Dataset:
    """The dataset SPEC names, read and checked (`DatasetError` if it cannot be used); read
    once while its file stays the same (a run checks it first, then fits it to the server)."""
    try:
        kind, source, split = parse_dataset_spec(spec)
    except ValueError as exc:
        raise DatasetError(f"--dataset {exc}") from None
    try:
        st = os.stat(source)
        stamp: tuple = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = ()
    return _load(spec, kind, source, split, stamp)


@functools.lru_cache(maxsize=2)
def _load(spec: str, kind: str, source: str, split: str | None, stamp: tuple) -> Dataset:
    dataset = (_read_sharegpt(source) if kind == "sharegpt" else _read_jsonl(source) if kind == "jsonl"
               else _read_hf(source, split or "train"))
    if not dataset.entries:
        dropped = f" ({dataset.dropped:,} conversation(s) without a human turn and a gpt answer)" if dataset.dropped else ""
        raise DatasetError(f"{spec}: no usable entry{dropped}")
    return dataset


def dataset_order(n: int, seed: int) -> list[int]:
    """The entries' order: a shuffle of range(n) seeded by `seed` (the same every run)."""
    order = list(range(n))
    random.Random(int.from_bytes(hashlib.sha256(f"dataset/{seed}".encode()).digest()[:8], "big")).shuffle(order)
    return order
