"""A rate run's dataset fitted to the server before anything runs (`fit_dataset`).

The entries are taken in a seeded shuffle (`dataset.dataset_order`, `--seed`), as many as
the run's rate cells can send (their largest rate over the window, with room for Poisson's
spread; a cell that sends more takes them again from the first), and each is counted by the
server: its prompt as the request's prompt is counted (`probe.prompt_counter`), a ShareGPT
answer as generated tokens (`probe.answer_counter`); where the server cannot count, by
words. Then they are read against the per-sequence limit like a trace's lines
(`trace.fit_trace`, `--over-context skip|send`).
"""

from __future__ import annotations

import math

from llmload.core.dataset import Dataset, DatasetError, dataset_order, load_dataset
from llmload.core.scenario import Scenario
from llmload.core.trace import TraceError, TraceFit, TraceRequest, fit_trace
from llmload.io.probe import ServerInfo, answer_counter, prompt_counter

POISSON_ROOM = 1.25
"""A Poisson cell's arrivals over its window may exceed rate × window: entries counted for this much more."""
EXTRA_ENTRIES = 16


def entries_needed(sc: Scenario) -> int:
    """How many entries the run's rate cells can send (the largest rate over the window)."""
    room = POISSON_ROOM if sc.arrivals == "poisson" else 1.0
    return math.ceil(max(sc.rates) * sc.duration_s * room) + EXTRA_ENTRIES


def fit_dataset(sc: Scenario, info: ServerInfo, api_key: str | None) -> tuple[Dataset, TraceFit]:
    """(the dataset, its entries taken as requests fitted to the server); DatasetError (one
    line) when none can be sent."""
    dataset = load_dataset(sc.dataset or "")
    order = dataset_order(len(dataset.entries), sc.seed)[:entries_needed(sc)]
    count_prompt = prompt_counter(info, sc.endpoint, api_key)
    count_answer = answer_counter(info, api_key)

    def counted(counter, text: str) -> int:
        n = counter(text) if counter is not None else None
        return n if n is not None and n > 0 else max(len(text.split()), 1)
    requests = []
    for i in order:
        entry = dataset.entries[i]
        output = entry.output_tokens or counted(count_answer, entry.answer or "")
        requests.append(TraceRequest(line=i + 1, t_s=0.0, input_tokens=counted(count_prompt, entry.prompt),
                                     output_tokens=output, prompt=entry.prompt))
    try:
        return dataset, fit_trace(tuple(requests), info.max_model_len, sc.over_context)
    except TraceError as exc:
        raise DatasetError(str(exc).replace("the trace's", f"the {dataset.label}'s")) from None
