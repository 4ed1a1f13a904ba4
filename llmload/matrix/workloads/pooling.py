"""The run of a pooling model (`--endpoint embeddings` or `rerank`): input length ×
concurrency, each cell a closed loop of N users whose every request carries inputs of its
own (`llmload.loadgen.pooling`), over the scenario's window; its plan is
`llmload.core.capacity.poolplan`, its figures `llmload.core.figures.pooling`.
"""

from __future__ import annotations

from dataclasses import replace

from llmload.core.capacity.poolplan import plan_pooling
from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.capacity.protocols import inputs_per_request as protocol_inputs
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario
from llmload.core.units import format_tokens
from llmload.io.probe import ServerInfo
from llmload.matrix.workloads.part import Runner

def inputs_per_request(sc: Scenario) -> int:
    """Inputs a request of the scenario carries: --batch-size (embeddings), --documents (rerank)."""
    return protocol_inputs(sc.endpoint, batch_size=sc.batch_size, documents=sc.documents)


def check(sc: Scenario) -> Scenario:
    """A pooling endpoint's matrix; the options of the streaming endpoints are refused."""
    if not PROTOCOLS[sc.endpoint].pooling:
        raise ValueError(f"--workload pooling is for --endpoint embeddings or rerank, not {sc.endpoint}")
    if sc.batch_size is not None and sc.endpoint != "embeddings":
        raise ValueError("--batch-size is for --endpoint embeddings (rerank's inputs per request are --documents)")
    if sc.documents is not None and sc.endpoint != "rerank":
        raise ValueError("--documents is for --endpoint rerank (embeddings' inputs per request are --batch-size)")
    if sc.repeat > 1 or sc.until_ci is not None:
        raise ValueError(f"--repeat and --until-ci are for the endpoints that stream: the intervals of "
                         f"--endpoint {sc.endpoint}'s figures are not built")
    return replace(sc, workload="pooling")


def plan(sc: Scenario, info: ServerInfo, limits: dict, **inputs):
    return plan_pooling(contexts=list(sc.contexts), concurrency=list(sc.concurrency),
                        max_model_len=limits["max_model_len"], max_sequences=limits["max_sequences"],
                        inputs_per_request=inputs_per_request(sc))


def summary(c: CellResult) -> str:
    p = c.pooling
    if p.requests_per_s is None:
        return f"{c.status}: {c.reason or ''}"
    tok = f", {p.input_tok_s:,.0f} input tok/s" if p.input_tok_s is not None else ""
    return (f"{c.status}: {p.requests_per_s:,.1f} req/s, {p.inputs_per_s:,.1f} inputs/s{tok}, latency p50/p99 "
            f"{p.latency_ms:,.1f}/{p.latency_p99_ms:,.1f} ms" + (f" — {c.reason}" if c.reason else ""))


def title(c: CellResult) -> str:
    return f"{format_tokens(c.context_tokens)} × {c.concurrency}"


RUNNER = Runner(name="pooling", plan=plan, search=lambda sc, cells, measure, max_cells: None, summary=summary,
                check=check,
                message=lambda ctx, planned, spec, pacers: replace(spec, inputs=inputs_per_request(ctx.scenario)))
