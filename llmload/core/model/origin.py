"""Where a run ran, and the run as it leaves the machine without it.

A run's own results.json keeps everything (`--resume` and `report --recompute` read it
whole): the server's address, the files it read by their paths, the launch command as
given. What leaves the machine (`llmload publish` into a store or to a hub, a hub's
submission, `llmload export`) goes through `without_origin` unless the user asks for the
origin (`--with-origin`). It is pure, over the results document (a dict, as results.json
holds it), and one rule for every field:

- **The server's address** (`config.host`, `server.base_url`: ADDRESS_FIELDS) is left out
  (None), and wherever the document's text quotes it (its URL, host:port or host name:
  a reason, a note) it reads `the server`.
- **Paths of the machine** are kept by their last part: the files a run read (a dataset's
  file, a trace, a simulator profile given by its path: FILE_FIELDS, whole values, relative
  paths too; a dataset's by `parse_dataset_spec`) and every absolute path (`/...`, `~/...`) in the fields that name the server's
  command and model (COMMAND_FIELDS: the launch command, the served model when the server
  names it by its path). Each such path is replaced by its last part wherever the document's
  text holds it, so a plan's reason that quotes a dataset's path says its file name.

A Hugging Face name (`org/model`, `hf:org/data`) is not a path of the machine and stays.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from llmload.core.traffic.dataset import parse_dataset_spec

ADDRESS_FIELDS = (("config", "host"), ("server", "base_url"))
"""The server's address: left out."""
FILE_FIELDS = (("config", "trace"), ("config", "sim_profile"), ("sim_profile",), ("server", "sim_profile"),
               ("config", "image_dir"))
"""Files and folders a run read, by path: kept by their last part (and `config.dataset`'s, KIND:PATH)."""
COMMAND_FIELDS = (("launch_command",), ("config", "launch_command"), ("config", "model"), ("server", "model"),
                  ("server", "models"), ("server", "model_root"))
"""Text naming the server's command and model: its absolute paths kept by their last part."""
SERVER_WORDS = "the server"
"""What the text says where it quoted the server's address."""

_ABSOLUTE = re.compile(r"(?<![^\s=\"'])~?/[^\s'\"=,;()<>]+")
"""An absolute path as a word of a command line: at its start, after a space, `=` or a quote."""


def _at(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _last_part(path: str) -> str:
    return os.path.basename(os.path.normpath(path)) or path


def _file(path: str) -> dict[str, str]:
    """{the path as written: its last part}, or {} where it is its last part (a name)."""
    return {path: _last_part(path)} if _last_part(path) != path else {}


def _dataset(spec: str) -> dict[str, str]:
    """`_file` of a dataset's file (KIND:PATH); a Hugging Face dataset's name is no path."""
    try:
        kind, source, _ = parse_dataset_spec(spec)
    except ValueError:
        return {}
    return {} if kind == "hf" else _file(source)


def _address(url: str) -> dict[str, str]:
    """{the URL, its host:port and its host name: SERVER_WORDS}."""
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        host, netloc = parts.hostname, parts.netloc
    except ValueError:
        return {url: SERVER_WORDS}
    found = {url: SERVER_WORDS, url.rstrip("/"): SERVER_WORDS}
    for text in (netloc, netloc.rpartition("@")[2], host):
        if text:
            found[text] = SERVER_WORDS
    return found


def origin_of(doc: dict[str, Any]) -> dict[str, str]:
    """What of the machine a results document holds: {text as it appears: what replaces it}."""
    found: dict[str, str] = {}
    for path in ADDRESS_FIELDS:
        for text in _strings(_at(doc, path)):
            found.update(_address(text))
    for path in FILE_FIELDS:
        for text in _strings(_at(doc, path)):
            found.update(_file(text))
    for text in _strings(_at(doc, ("config", "dataset"))):
        found.update(_dataset(text))
    for path in COMMAND_FIELDS:
        for text in _strings(_at(doc, path)):
            found.update({p: _last_part(p) for p in _ABSOLUTE.findall(text) if _last_part(p) != p})
    return {k: v for k, v in found.items() if k}


def _rewrite(value: Any, replace: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return replace(value)
    if isinstance(value, dict):
        return {k: _rewrite(v, replace) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, replace) for v in value]
    return value


def origin_replacer(doc: dict[str, Any]) -> Callable[[str], str] | None:
    """A function that rewrites a text of the run as it leaves the machine (another file of
    it: an exported request's error); None where the document holds no origin."""
    found = origin_of(doc)
    return _replacer(found) if found else None


def without_origin(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as it leaves the machine (the module docstring); `doc` is left as it is."""
    out = _rewrite(doc, origin_replacer(doc) or (lambda s: s))
    for *where, key in ADDRESS_FIELDS:
        holder = _at(out, tuple(where)) if where else out
        if isinstance(holder, dict) and key in holder:
            holder[key] = None
    return out


def _replacer(found: dict[str, str]) -> Callable[[str], str]:
    """Each text of `found` replaced, the longest first (a URL before its host name); a host
    name only where it stands alone (not inside a longer word)."""
    pattern = re.compile("|".join(
        rf"(?<![\w.-]){re.escape(k)}(?![\w-])" if re.fullmatch(r"[\w.-]+", k) else re.escape(k)
        for k in sorted(found, key=len, reverse=True)))
    return lambda text: pattern.sub(lambda m: found[m.group(0)], text)
