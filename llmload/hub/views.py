"""What the hub's pages and API answer, built from the store's read API (`llmload.hub.store`):
plain dictionaries for the JSON routes and small helpers for the templates. Every row of a
run carries its page's URL (`url`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from llmload.hub.limits import HIDDEN
from llmload.core.capacity.protocols import POOLING_ENDPOINTS
from llmload.hub.pricing import Pricing
from llmload.hub.store import HardwareEntry, LeaderRow, ModelEntry, PoolingRow, RunSummary
from llmload.output import formats as fmt

RATE_FIGURES = (("Achieved rate", None), ("TTFT p50", "ttft_ms"), ("TTFT p90", "ttft_p90_ms"),
                ("TTFT p99", "ttft_p99_ms"), ("TBT p50", "tbt_ms"), ("TBT p90", "tbt_p90_ms"),
                ("TBT p99", "tbt_p99_ms"), ("e2e p50", "e2e_ms"), ("e2e p90", "e2e_p90_ms"), ("e2e p99", "e2e_p99_ms"))
"""The calculator's rate figures: (header, the cell's field; None: the achieved rate)."""


TIER_WORDS = {"here": "published here", "pending": "submitted, pending approval", "approved": "submitted, approved"}
"""A run's tier (`llmload.hub.schema.TIERS`) as the pages and `tier_text` say it."""


def shown(value: Any) -> Any:
    """What a template prints (Jinja's `finalize`, before autoescaping): a text's control,
    invisible and direction-changing characters as visible `<U+202E>`, so that no name can
    look like another or turn the text after it around (a submission holding one is
    refused; a run published into the store by its operator is shown so)."""
    if type(value) is str and HIDDEN.search(value):
        return HIDDEN.sub(lambda m: f"<U+{ord(m.group(0)):04X}>", value)
    return value


def run_url(run_id: str) -> str:
    return f"/runs/{run_id}"


def tier_text(tier: str) -> str:
    """"published here", "submitted, pending approval" or "submitted, approved"."""
    return TIER_WORDS.get(tier, tier)


def link(path: str, **params: Any) -> str:
    """`path?k=v&...` with the parameters that are not None, URL-encoded."""
    given = {k: v for k, v in params.items() if v is not None}
    return f"{path}?{urlencode(given)}" if given else path


def run_dict(run: RunSummary, pricing: Pricing | None = None) -> dict[str, Any]:
    """A run's row of /api/runs: the run, its tier in words, its URLs and, given, what its
    cost per token is priced at (`price_per_hour`, `priced_by`: run, hub or null, `price_text`)."""
    return {**asdict(run), "tier_text": tier_text(run.tier), "url": run_url(run.id),
            "api_url": f"/api{run_url(run.id)}", **(pricing.to_dict() if pricing is not None else {})}


def _board_run(row: LeaderRow | PoolingRow) -> dict[str, Any]:
    """What every leaderboard row says of its run: its rank, the run (its tier, launch
    command, the runs on its hardware), its context and ranked concurrency."""
    run = row.run
    return {"rank": row.rank, "tied": row.tied, "id": run.id, "url": run_url(run.id),
            "model": run.model, "model_root": run.model_root,
            "hardware": run.hardware, "hardware_url": hardware_url(run.hardware), "gpu": run.gpu,
            "engine": run.engine, "engine_version": run.engine_version, "provenance": run.provenance,
            "status": run.status, "tier": run.tier, "tier_text": tier_text(run.tier), "submitter": run.submitter,
            "launch_command": row.launch_command, "started_at": run.started_at,
            "context_tokens": row.context_tokens, "concurrency": row.concurrency}


def leader_dict(row: LeaderRow, rank: str = "tok_s") -> dict[str, Any]:
    """A token leaderboard row: its rank (shared with the run above where `tied`: their
    intervals overlap; ranked by cost, null for a run without a price), the run, its figures
    at the ranked concurrency with total tok/s's interval, its pricing and cost per 1M output
    tokens there, and every cell (each with its cost)."""
    return {**_board_run(row), "rank": row.rank or None,
            "ranked_by": "usd_per_1m_output_tokens" if rank == "cost" else "total_tok_s",
            "total_tok_s": row.total_tok_s, "total_tok_s_ci_low": row.total_tok_s_ci_low,
            "total_tok_s_ci_high": row.total_tok_s_ci_high, "repeats": row.repeats,
            "per_request_tok_s": row.per_request_tok_s, "ttft_ms": row.ttft_ms, "images": row.images,
            "usd_per_1m_output_tokens": row.usd_per_1m_output_tokens, **row.pricing.to_dict(),
            "cells": [asdict(cell) for cell in row.cells]}


def pooling_dict(row: PoolingRow) -> dict[str, Any]:
    """An embeddings or rerank leaderboard row: its rank (never tied), the run, its endpoint,
    its figures at the ranked concurrency (`context_tokens`: the input length) and every cell."""
    cell = row.cell
    return {**_board_run(row), "ranked_by": "inputs_per_s", "endpoint": row.endpoint,
            "inputs_per_s": cell.inputs_per_s, "input_tok_s": cell.input_tok_s, "requests_per_s": cell.requests_per_s,
            "latency_ms": cell.latency_ms, "latency_p99_ms": cell.latency_p99_ms,
            "inputs_per_request": cell.inputs_per_request, "cells": [asdict(c) for c in row.cells]}


def other_boards(kind: str, endpoint: str | None, endpoints: list[str], images: int = 0,
                 image_counts: list[int] = ()) -> list[tuple[str, str | None, int | None]]:
    """The other boards of the same model and context, as (what it ranks, its endpoint
    parameter, its images parameter; None: the token board's, text only): the embeddings and
    rerank boards of the endpoints measured there, the token board of each other image count
    measured there (where one is above 0), and from one of those, the token board where runs
    measured tokens."""
    pooled = [e for e in endpoints if e in POOLING_ENDPOINTS and not (kind == "pooling" and e == endpoint)]
    out: list[tuple[str, str | None, int | None]] = [(f"{e} runs by inputs/s", e, None) for e in pooled]
    if kind != "pooling" and any(image_counts):
        token_endpoint = endpoint if endpoint not in POOLING_ENDPOINTS else None
        out.extend((images_text(k), token_endpoint, k or None) for k in image_counts if k != images)
    if kind == "pooling" and any(e not in POOLING_ENDPOINTS for e in endpoints):
        out.append(("token generation runs by total tok/s", None, None))
    return out


def images_text(images: int) -> str:
    """A token board's image count in words: "text-only runs", "runs with 2 images per request"."""
    if not images:
        return "text-only runs by total tok/s"
    return f"runs with {images} image{'' if images == 1 else 's'} per request by total tok/s"


def hardware_url(hardware: str | None) -> str | None:
    """/runs on that hardware (None: none named)."""
    return link("/runs", hardware=hardware) if hardware else None


def concurrencies(board: list[LeaderRow]) -> list[int]:
    """Every concurrency some row of the board measured, lowest first (the table's columns)."""
    return sorted({cell.concurrency for row in board for cell in row.cells})


def cell_at(row: LeaderRow, concurrency: int):
    return next((cell for cell in row.cells if cell.concurrency == concurrency), None)


def model_dict(entry: ModelEntry, contexts: list[int]) -> dict[str, Any]:
    name = entry.model or entry.model_root
    return {**asdict(entry), "contexts": contexts, "runs_url": link("/runs", model=name),
            "leaderboards": [link("/leaderboard", model=name, context=c) for c in contexts]}


def hardware_dict(entry: HardwareEntry) -> dict[str, Any]:
    return {**asdict(entry), "runs_url": link("/runs", hardware=entry.hardware)}


def rate_figures(cell) -> list[tuple[str, str]]:
    """A rate cell's figures as the calculator shows them: (header, text), a latency that is
    a lower bound (an unfinished request) as "> value"."""
    out = []
    for header, name in RATE_FIGURES:
        if name is None:
            out.append((header, fmt.fmt_rps(cell.traffic.achieved_rate_rps)))
        elif name.startswith("tbt"):
            out.append((header, fmt.fmt_tbt_ms(getattr(cell, name))))
        else:
            out.append((header, fmt.cell_ms(cell, name)))
    return out


def request_counts(cell) -> str:
    """"39 scheduled: 2 completed, 37 unfinished"."""
    return fmt.request_counts_text(cell) or fmt.MISSING


def rate_slo_rows(calc) -> list[tuple[str, ...]]:
    """The SLO prediction's cells, lowest rate first: rate, what added it (the ladder or the
    bisection), achieved rate, TTFT p99, TBT p99, the verdict."""
    from llmload.core.figures.slo import judge_cell
    rows = []
    for cell in sorted(calc.slo_cells, key=lambda c: c.traffic.rate_rps or 0.0):
        verdict = judge_cell(cell, calc.slo)
        said = ("meets" if verdict.meets else "cannot be judged" if verdict.meets is None
                else f"fails ({', '.join(verdict.failed)})")
        rows.append((fmt.fmt_rps(cell.traffic.rate_rps), "bisection" if cell.slo.slo_search else "ladder",
                     fmt.fmt_rps(cell.traffic.achieved_rate_rps), fmt.cell_ms(cell, "ttft_p99_ms"),
                     fmt.fmt_tbt_ms(cell.tbt_p99_ms), said))
    return rows


def pages(number: int, total: int, size: int, args) -> dict[str, Any]:
    """A list's page `number` of `total` items, `size` a page: what it shows and the links to
    the pages before and after (the other parameters kept)."""
    from urllib.parse import urlencode
    last = max((total + size - 1) // size, 1)

    def link(n: int) -> str:
        return "?" + urlencode({**{k: v for k, v in args.items() if k != "page"}, "page": n})
    return {"number": number, "last": last, "first_item": min((number - 1) * size + 1, total),
            "last_item": min(number * size, total), "previous": link(number - 1) if number > 1 else None,
            "next": link(number + 1) if number < last else None}
