"""What every part of a matrix run shares: the run's context and the two ways it stops.

`RunContext` carries the scenario, the probed server, the echo function, the API key, the
run id and the power monitor; `RunError` ends the run with a one-line message;
`WorkerLost` ends a cell whose worker process died or went silent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

from llmload.core.scenario import Scenario
from llmload.io.probe import ServerInfo


class RunError(Exception):
    """The run cannot go on; the message is one line for the user."""


class PlanRefused(RunError):
    """The scenario cannot run on this server at all (a session that exceeds the context at
    its first turn): bad input, refused before any load (exit status 2)."""


class WorkerLost(Exception):
    """A worker process died or went silent during a cell; its records are lost."""


@dataclass
class RunContext:
    scenario: Scenario
    info: ServerInfo
    echo: Callable[[str], None]
    api_key: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    power: object | None = None
    """A `hardware.PowerMonitor` when energy is measured (llmload.core.figures.energy), else None."""
    idle_power_w: float | None = None
    trace: tuple = ()
    """Replay: the trace's requests to send (`llmload.core.traffic.trace.TraceRequest`), read before
    the run and fitted to the server's context (`trace_fit`)."""
    dataset: tuple = ()
    """Rate with --dataset: its entries to send, in order (`llmload.core.traffic.trace.TraceRequest`s
    with the prompt text and the server's counts), fitted to the server's context
    (`dataset_fit`)."""
    conversations: tuple = ()
    """Sessions with --dataset: the conversations to hold, each (user message, its tokens, the
    answer's tokens) per turn (`llmload.matrix.datasetfit.fit_conversations`)."""
    image_tokens: Mapping[int, int] = field(default_factory=dict)
    """With --images: the tokens K images add to a chat prompt, by the server's count
    (`llmload.io.imageprobe`), for each K of the run; a prompt's text is its context less them."""
    pair_tokens: int | None = None
    """Rerank: the tokens the query and the server's separators add to each document, by the
    server's count (`endpointcheck.rerank_pair_tokens`); None where it could not say."""
    batch_tokens: int | None = None
    """A pooling run on an engine that pools an input within one batch (llama.cpp): that
    batch's tokens, by its answer to the longest input (`endpointcheck.pooling_batch_tokens`)."""
    dataset_fit: object | None = None
    """Rate with --dataset: the `llmload.core.traffic.trace.TraceFit` the entries above come from."""
    trace_fit: object | None = None
    """Replay: the `llmload.core.traffic.trace.TraceFit` the requests above come from."""


def plan_inputs(ctx: RunContext) -> dict:
    """What the run fitted to the server that its workload's plan takes (`Runner.plan`)."""
    return dict(trace=ctx.trace, dataset=ctx.dataset, conversations=ctx.conversations,
                image_tokens=ctx.image_tokens, pair_tokens=ctx.pair_tokens, batch_tokens=ctx.batch_tokens)


def text_tokens(ctx: RunContext, prompt_tokens: int, images: int = 0) -> int:
    """The text's part of a prompt of `prompt_tokens` with `images` images: all of it, or
    what the images leave."""
    tokens = ctx.image_tokens.get(images, 0) if images else 0
    return max(prompt_tokens - tokens, 1) if tokens else prompt_tokens
