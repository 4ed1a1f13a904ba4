"""`llmload trace stats FILE`: what a request trace holds, before it is replayed
(`llmload.core.tracestats`, docs/workloads.md)."""

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
def stats(file: str, kv_tokens: str | None, as_json: bool) -> None:
    """Requests, span, mean and peak rates, prompt and output length percentiles, requests at
    one timestamp, and the ideal prefix-cache hit ratio from the Mooncake hash_ids."""
    from llmload.core.trace import TraceError, load_trace
    from llmload.core.tracestats import stats_lines, trace_stats
    from llmload.core.units import parse_tokens
    try:
        kv = parse_tokens(kv_tokens) if kv_tokens is not None else None
    except ValueError as exc:
        raise click.UsageError(f"--kv-tokens: {exc}") from None
    if kv is not None and kv < 1:
        raise click.UsageError(f"--kv-tokens {kv_tokens} must be at least 1 token")
    try:
        requests = load_trace(file)
    except TraceError as exc:
        raise Refused(str(exc)) from None
    result = trace_stats(requests, kv_tokens=kv)
    if as_json:
        echo(json.dumps({"trace": file, **result.to_dict()}, indent=2))
        return
    echo(f"Trace: {file}")
    for line in stats_lines(result):
        echo(line)
