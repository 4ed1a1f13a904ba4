"""`llmload trace stats FILE`: what a request trace holds, before it is replayed
(`llmload.core.traffic.tracestats`, docs/workloads.md)."""

from __future__ import annotations

import json

import click

from llmload.commands.common import Refused, echo


@click.group()
def trace() -> None:
    """Request traces (Mooncake or plain JSONL, as `llmload run --workload replay` takes them)."""


@trace.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--kv-tokens", metavar="K", help="Also the hit ratio with an LRU cache of K tokens "
              "(e.g. the server's KV pool: 32K, 1.5M).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the text.")
@click.option("--sample", help="As `llmload run`: every K-th request (e.g. 4) or a seeded fraction (0.25).")
@click.option("--length-scale", help="As `llmload run`: prompt and output lengths times X (sharing kept).")
@click.option("--max-prompt-tokens", help="As `llmload run`: prompts cut to N tokens.")
def stats(file: str, kv_tokens: str | None, as_json: bool, sample: str | None, length_scale: str | None,
          max_prompt_tokens: str | None) -> None:
    """Requests, span, mean and peak rates, prompt and output length percentiles, requests at
    one timestamp, and the ideal prefix-cache hit ratio from the Mooncake hash_ids, of the
    trace as `llmload run --workload replay` with the same options would send it."""
    from llmload.core.scenario import Scenario, ScenarioError
    from llmload.core.traffic.trace import TraceError
    from llmload.core.traffic.tracestats import stats_lines, trace_stats
    from llmload.core.traffic.traceshape import scenario_trace
    from llmload.core.units import parse_tokens
    try:
        kv = parse_tokens(kv_tokens) if kv_tokens is not None else None
    except ValueError as exc:
        raise click.UsageError(f"--kv-tokens: {exc}") from None
    if kv is not None and kv < 1:
        raise click.UsageError(f"--kv-tokens {kv_tokens} must be at least 1 token")
    shape = {k: v for k, v in (("sample", sample), ("length_scale", length_scale),
                               ("max_prompt_tokens", max_prompt_tokens)) if v is not None}
    try:
        scenario = Scenario(workload="replay", trace=file, **shape)
    except ScenarioError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        requests = scenario_trace(scenario)
    except TraceError as exc:
        raise Refused(str(exc)) from None
    result = trace_stats(requests, kv_tokens=kv)
    if as_json:
        echo(json.dumps({"trace": file, **result.to_dict()}, indent=2))
        return
    echo(f"Trace: {file}")
    for line in stats_lines(result):
        echo(line)
