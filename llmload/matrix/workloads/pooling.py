"""The run of a pooling model (`--endpoint embeddings` or `rerank`): input length ×
concurrency, each cell a closed loop of N users whose every request carries inputs of its
own (`llmload.loadgen.pooling`), over the scenario's window; its plan is
`llmload.core.capacity.poolplan`, its figures `llmload.core.figures.pooling`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llmload.core.capacity.poolplan import plan_pooling
from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.capacity.protocols import inputs_per_request as protocol_inputs
from llmload.core.model.cell import CellResult
from llmload.core.scenario import Scenario
from llmload.core.units import format_tokens
from llmload.io.endpointcheck import pooling_batch_tokens, rerank_pair_tokens
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


def fit(sc: Scenario, info: ServerInfo, api_key: str | None, echo: Callable[[str], None],
        read: tuple) -> dict[str, Any]:
    """What the plan needs of the server beyond its limits: rerank's pair, what the query and
    the server's separators add to each document (the plan judges the pair), and where the
    engine pools an input within one batch (llama.cpp), that batch, learned by sending the
    longest input once."""
    out: dict[str, Any] = {}
    if sc.endpoint == "rerank":
        out["pair_tokens"] = tokens = rerank_pair_tokens(info, api_key)
        echo(f"Rerank: each document's pair adds {tokens:,} tokens (the query and the server's separators), "
             "by the server's count" if tokens is not None else
             "Rerank: the server did not say what a pair adds to its document: the plan judges the document alone")
    longest = max(sc.contexts)
    if info.caps.pooling_batch and longest and (info.max_model_len is None or longest <= info.max_model_len):
        from llmload.io.probe import build_prompts
        text = build_prompts(info, endpoint=sc.endpoint, api_key=api_key, prompt_tokens=[longest]).prompt(
            "llmload-batch-probe", longest)
        out["batch_tokens"] = batch = pooling_batch_tokens(info, api_key, sc.endpoint, text)
        if batch is not None:
            echo(f"Pooling: {info.engine} pools an input within one batch of {batch:,} tokens, by its answer to "
                 f"an input of {longest:,} (llama.cpp: -ub; start it with -b and -ub at least the longest input)")
    return out


def plan(sc: Scenario, info: ServerInfo, limits: dict, *, pair_tokens: int | None = None,
         batch_tokens: int | None = None, **inputs):
    return plan_pooling(contexts=list(sc.contexts), concurrency=list(sc.concurrency),
                        max_model_len=limits["max_model_len"], max_sequences=limits["max_sequences"],
                        inputs_per_request=inputs_per_request(sc), pair_tokens=pair_tokens or 0,
                        batch_tokens=batch_tokens)


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
                check=check, fit=fit,
                message=lambda ctx, planned, spec, pacers: replace(spec, inputs=inputs_per_request(ctx.scenario)))
