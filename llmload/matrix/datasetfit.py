"""A dataset fitted to the server before anything runs: a rate run's prompts
(`fit_dataset`), a sessions run's conversations (`fit_conversations`).

The entries are taken in a seeded shuffle (`dataset.dataset_order`, `--seed`), as many as
the run's rate cells can send (their largest rate over the window, with room for Poisson's
spread; a cell that sends more takes them again from the first), and each is counted by the
server: its prompt as the request's prompt is counted (`probe.prompt_counter`), a ShareGPT
answer as generated tokens (`probe.answer_counter`); where the server cannot count, by
words. With --dataset-images, an entry with images is counted by a chat request carrying
them (its usage.prompt_tokens, `imageprobe.chat_prompt_tokens`): what its images cost is the
server's business, and no tokenizer endpoint counts them on every engine. Then they are read against the per-sequence limit like a trace's lines
(`trace.fit_trace`, `--over-context skip|send`).
"""

from __future__ import annotations

import math

from llmload.core.traffic.dataset import Dataset, DatasetError, dataset_order, load_dataset
from llmload.core.traffic.images import reference_url
from llmload.io.endpointcheck import EndpointRefused
from llmload.io.imageprobe import chat_prompt_tokens
from llmload.core.scenario import Scenario
from llmload.core.traffic.trace import TraceError, TraceFit, TraceRequest, fit_trace
from llmload.io.probe import ServerInfo, answer_counter, prompt_counter
from llmload.loadgen.sessions import TEMPLATE_ROOM

POISSON_ROOM = 1.25
"""A Poisson cell's arrivals over its window may exceed rate × window: entries counted for this much more."""
EXTRA_ENTRIES = 16


def entries_needed(sc: Scenario) -> int:
    """How many entries the run's rate cells can send (the largest rate over the window)."""
    room = POISSON_ROOM if sc.arrivals == "poisson" else 1.0
    return math.ceil(max(sc.rates) * sc.duration_s * room) + EXTRA_ENTRIES


def fit_dataset(sc: Scenario, info: ServerInfo, api_key: str | None) -> tuple[Dataset, TraceFit, tuple[str, ...]]:
    """(the dataset, its entries taken as requests fitted to the server, what the server
    said of each entry whose images it refused, left out); DatasetError (one line) when none
    can be sent."""
    dataset = load_dataset(sc.dataset or "")
    order = dataset_order(len(dataset.entries), sc.seed)[:entries_needed(sc)]
    count_prompt = prompt_counter(info, sc.endpoint, api_key)
    count_answer = answer_counter(info, api_key)

    requests, refused = [], []
    for i in order:
        entry = dataset.entries[i]
        images = entry.images if sc.dataset_images else ()
        try:
            tokens = (chat_prompt_tokens(info, api_key, entry.prompt, [reference_url(r) for r in images]) if images
                      else _count(count_prompt, entry.prompt))
        except EndpointRefused as exc:  # this entry's images (too many tokens, an image it cannot read)
            refused.append(f"{entry.where}: {str(exc)[:200]}")
            continue
        except OSError as exc:  # its image file went away since the dataset was read
            raise DatasetError(f"{entry.where}: cannot read its image: {exc.strerror or exc}") from None
        output = entry.output_tokens or _count(count_answer, entry.answer or "")
        requests.append(TraceRequest(line=i + 1, t_s=0.0, input_tokens=tokens, output_tokens=output,
                                     prompt=entry.prompt, images=images))
    if not requests and refused:
        raise DatasetError(f"the server refused every entry's images ({refused[0]})")
    try:
        return (dataset, fit_trace(tuple(requests), info.max_model_len, sc.over_context,
                                   whose=f"the {dataset.label}'s"), tuple(refused))
    except TraceError as exc:
        raise DatasetError(str(exc)) from None


MAX_CONVERSATIONS = 256
"""The most conversations a sessions run takes from a dataset (its users pick among them)."""


def fit_conversations(sc: Scenario, info: ServerInfo, api_key: str | None) -> tuple[Dataset, tuple, int]:
    """(the dataset, its conversations for a sessions run, how many were left out because
    their first turn cannot fit): up to MAX_CONVERSATIONS in the seeded order, each cut to
    `--turns` turns of (user message, its tokens, the answer's tokens), counted by the server
    as messages and generated tokens; DatasetError (one line) when none can be held."""
    dataset = load_dataset(sc.dataset or "")
    talks = [e.turns for e in dataset.entries if e.turns]
    if not talks:
        raise DatasetError(f"{dataset.label}: no conversations (a JSONL dataset holds single prompts; "
                           "sessions need sharegpt or a Hugging Face dataset of conversations)")
    count = answer_counter(info, api_key)
    limit, system = info.max_model_len, max(sc.system_prompt_tokens)
    kept, over = [], 0
    for i in dataset_order(len(talks), sc.seed)[:MAX_CONVERSATIONS]:
        turns = tuple((human, _count(count, human), _count(count, answer)) for human, answer in talks[i][:sc.turns])
        first = turns[0]
        if limit is not None and system + first[1] + first[2] + TEMPLATE_ROOM > limit:
            over += 1
            continue
        kept.append(turns)
    if not kept:
        raise DatasetError(f"none of {dataset.label}'s first turns fits the server's context ({limit:,} tokens "
                           f"with the system prompt of {system:,})")
    return dataset, tuple(kept), over


def _count(counter, text: str) -> int:
    """The server's count of a text (`counter`), or its words where it cannot count."""
    n = counter(text) if counter is not None else None
    return n if n is not None and n > 0 else max(len(text.split()), 1)
