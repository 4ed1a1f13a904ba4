"""The leaderboards' queries, read through a store's `rows` (`llmload.hub.store.Store`, which
keeps their answers): the token board (`token_board`: decode cells ranked by total tok/s,
runs whose intervals overlap tied, `ranked_with_ties`), the embeddings and rerank board
(`pooling_board`: pooling cells, `schema.pooling_cells`, ranked by inputs/s; no interval,
so no tie), what a board can be filtered by (`board_choices`) and the contexts each model
has a board at (`board_contexts`). A board's context is a decode cell's context, or a
pooling cell's input length.

The token board ranks the cells of one image count (`cells.images`, the images each request
carried, their tokens in the context): 0 by default, so a run of `--images 0,2` is ranked by
its text-only cells beside text runs, and a vision board (`images=K`) ranks the cells whose
requests carried K images, among themselves.

Which board a leaderboard shows is the routes' (`llmload.hub.boardroutes`): the pooling
board on the embeddings or rerank endpoint, the token board on any other.

Each token board row carries its run's pricing (`llmload.hub.pricing.price_of`: the run's own
price, else the hub operator's for its hardware) and each cell's cost per 1M output tokens.
Ranked by cost (`rank="cost"`, `cost_ranked`): the priced runs cheapest first, at the same
cell as by tok/s (at one price, the most tok/s is the cheapest N), tied where their cost
intervals (the price over total tok/s's interval) overlap; then the runs without a price, by
total tok/s, unranked (rank 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import sqlalchemy as sa

from llmload.hub import schema
from llmload.hub.pricing import Pricing, output_cost, price_of
from llmload.hub.rows import LeaderCell, LeaderRow, PoolingCell, PoolingRow, RunSummary

Rows = Callable[[Any], list[Any]]
"""A store's `rows`: the rows of a query, in one transaction."""

SUMMARY_COLUMNS = [schema.runs.c[f.name] for f in fields(RunSummary)]
ENDPOINT = schema.runs.c.results_json[("config", "endpoint")].as_string()
"""A run's endpoint (its results' config.endpoint: completions, chat, ..., embeddings, rerank)."""
LAUNCH = schema.runs.c.results_json["launch_command"].as_string().label("launch")
RUN_PRICE = schema.runs.c.results_json[("config", "price_per_hour")].label("run_price")
"""A run's own price per hour as its document holds it (JSON: a number, or anything a
document may hold there: read by `pricing.own_price`, never cast by the database)."""
RANKS = ("tok_s", "cost")
"""What the token board ranks by: total tok/s (the default), or cost per 1M output tokens."""


def summary(row: Any) -> RunSummary:
    return RunSummary(**{f.name: getattr(row, f.name) for f in fields(RunSummary)})


def listed():
    """Runs that lists, leaderboards and counts show: not pending approval."""
    return schema.runs.c.tier != "pending"


def model_is(model: str):
    return sa.or_(schema.runs.c.model == model, schema.runs.c.model_root == model)


def _on_board():
    """A cell some board ranks: a decode cell with a total tok/s, a pooling cell with inputs/s
    (the query outer-joined to `pooling_cells`)."""
    c, p = schema.cells.c, schema.pooling_cells.c
    return sa.or_(sa.and_(c.phase == "decode", c.total_tok_s.is_not(None)),
                  sa.and_(c.phase == "pooling", p.inputs_per_s.is_not(None)))


def _with_pooling(query, *, outer: bool):
    c, p = schema.cells.c, schema.pooling_cells.c
    on = sa.and_(p.run_id == c.run_id, p.idx == c.idx)
    return query.outerjoin(schema.pooling_cells, on) if outer else query.join(schema.pooling_cells, on)


def _filtered(query, hardware: str | None, engine_version: str | None, endpoint: str | None):
    r = schema.runs.c
    for column, value in ((r.hardware, hardware), (r.engine_version, engine_version), (ENDPOINT, endpoint)):
        if value is not None:
            query = query.where(column == value)
    return query


def token_board(rows: Rows, model: str, context: int, concurrency: int | None, hardware: str | None,
                engine_version: str | None, endpoint: str | None, images: int = 0,
                prices: dict[str, float] | None = None, rank: str = "tok_s") -> list[LeaderRow]:
    """`Store.leaderboard`'s answer: one row per run that measured a total tok/s at decode
    context `context` with `images` images per request (at `concurrency` when given), best
    first by `rank` (RANKS); `prices`: the hub operator's by hardware name."""
    c, r = schema.cells.c, schema.runs.c
    query = (sa.select(*SUMMARY_COLUMNS, LAUNCH, RUN_PRICE, c.concurrency, c.status.label("cell_status"),
                       c.total_tok_s, c.per_request_tok_s, c.ttft_ms, c.ttft_p99_ms, c.tbt_ms, c.total_tok_s_ci_low,
                       c.total_tok_s_ci_high, c.repeats)
             .join(schema.cells, c.run_id == r.id)
             .where(model_is(model), listed(), c.phase == "decode", c.context_tokens == context,
                    c.images == images, c.total_tok_s.is_not(None))
             .order_by(r.id, c.concurrency))
    by_run: dict[str, tuple[RunSummary, str | None, list[LeaderCell], Pricing]] = {}
    for row in rows(_filtered(query, hardware, engine_version, endpoint)):
        if row.id not in by_run:
            by_run[row.id] = (summary(row), row.launch, [], price_of(row.run_price, row.hardware, prices or {}))
        price = by_run[row.id][3].price_per_hour
        by_run[row.id][2].append(LeaderCell(
            concurrency=row.concurrency, status=row.cell_status, total_tok_s=row.total_tok_s,
            per_request_tok_s=row.per_request_tok_s, ttft_ms=row.ttft_ms, ttft_p99_ms=row.ttft_p99_ms,
            tbt_ms=row.tbt_ms, total_tok_s_ci_low=row.total_tok_s_ci_low, total_tok_s_ci_high=row.total_tok_s_ci_high,
            repeats=row.repeats, usd_per_1m_output_tokens=output_cost(price, row.total_tok_s)))
    board = []
    for run, launch, run_cells, pricing in by_run.values():
        ranked = [x for x in run_cells if concurrency is None or x.concurrency == concurrency]
        if not ranked:
            continue
        top = max(ranked, key=lambda x: x.total_tok_s)
        board.append(LeaderRow(run=run, context_tokens=context, concurrency=top.concurrency,
                               total_tok_s=top.total_tok_s, per_request_tok_s=top.per_request_tok_s,
                               ttft_ms=top.ttft_ms, cells=tuple(run_cells), launch_command=launch,
                               total_tok_s_ci_low=top.total_tok_s_ci_low,
                               total_tok_s_ci_high=top.total_tok_s_ci_high, repeats=top.repeats,
                               images=images, pricing=pricing, usd_per_1m_output_tokens=top.usd_per_1m_output_tokens))
    board.sort(key=lambda row: (-row.total_tok_s, row.run.id))
    return cost_ranked(board) if rank == "cost" else ranked_with_ties(board)


def pooling_board(rows: Rows, model: str, context: int, concurrency: int | None, hardware: str | None,
                  engine_version: str | None, endpoint: str | None) -> list[PoolingRow]:
    """`Store.pooling_leaderboard`'s answer: one row per run that measured inputs/s at input
    length `context` (at `concurrency` when given; on `endpoint`, embeddings or rerank, when
    given, else on either), the most inputs/s first; each run's rank its place."""
    c, r, p = schema.cells.c, schema.runs.c, schema.pooling_cells.c
    query = (sa.select(*SUMMARY_COLUMNS, LAUNCH, ENDPOINT.label("endpoint"), c.concurrency,
                       c.status.label("cell_status"), p.inputs_per_s, p.input_tok_s, p.requests_per_s,
                       p.latency_ms, p.latency_p99_ms, p.inputs_per_request)
             .join(schema.cells, c.run_id == r.id))
    query = (_with_pooling(query, outer=False)
             .where(model_is(model), listed(), c.phase == "pooling", c.context_tokens == context,
                    p.inputs_per_s.is_not(None))
             .order_by(r.id, c.concurrency))
    by_run: dict[str, tuple[Any, list[PoolingCell]]] = {}
    for row in rows(_filtered(query, hardware, engine_version, endpoint)):
        entry = by_run.setdefault(row.id, (row, []))
        entry[1].append(PoolingCell(concurrency=row.concurrency, status=row.cell_status,
                                    inputs_per_s=row.inputs_per_s, input_tok_s=row.input_tok_s,
                                    requests_per_s=row.requests_per_s, latency_ms=row.latency_ms,
                                    latency_p99_ms=row.latency_p99_ms, inputs_per_request=row.inputs_per_request))
    board = []
    for first, run_cells in by_run.values():
        ranked = [x for x in run_cells if concurrency is None or x.concurrency == concurrency]
        if ranked:
            top = max(ranked, key=lambda x: x.inputs_per_s)
            board.append(PoolingRow(run=summary(first), endpoint=first.endpoint, context_tokens=context,
                                    concurrency=top.concurrency, cell=top, cells=tuple(run_cells),
                                    launch_command=first.launch))
    board.sort(key=lambda row: (-row.inputs_per_s, row.run.id))
    return [replace(row, rank=i + 1) for i, row in enumerate(board)]


def _ranked(board: list[LeaderRow], overlaps: Callable[[LeaderRow, LeaderRow], bool]) -> list[LeaderRow]:
    """The board (best first) with each row's rank, a row that `overlaps` the row above tied with it."""
    out: list[LeaderRow] = []
    for i, row in enumerate(board):
        above = out[-1] if out else None
        tied = above is not None and overlaps(row, above)
        out.append(replace(row, rank=above.rank if tied else i + 1, tied=tied))
    return out


def ranked_with_ties(board: list[LeaderRow]) -> list[LeaderRow]:
    """The board (best first) with each row's rank: a row whose total tok/s interval overlaps
    the interval of the row above it is tied with it (the same rank) — their difference is
    within the noise; a row without an interval is never tied."""
    return _ranked(board, lambda row, above: None not in (row.total_tok_s_ci_low, row.total_tok_s_ci_high,
                                                           above.total_tok_s_ci_low, above.total_tok_s_ci_high)
                   and row.total_tok_s_ci_high >= above.total_tok_s_ci_low)


def _cost_interval(row: LeaderRow) -> tuple[float | None, float | None]:
    """The row's cost interval: its price over total tok/s's interval (high tok/s, low cost)."""
    price = row.pricing.price_per_hour
    return output_cost(price, row.total_tok_s_ci_high), output_cost(price, row.total_tok_s_ci_low)


def cost_ranked(board: list[LeaderRow]) -> list[LeaderRow]:
    """The board ranked by cost per 1M output tokens (module docstring): the priced rows
    cheapest first, a row whose cost interval overlaps the row's above tied with it; then the
    rows without a price (rank 0), in `board`'s order."""
    priced = sorted((row for row in board if row.usd_per_1m_output_tokens is not None),
                    key=lambda row: (row.usd_per_1m_output_tokens, row.run.id))

    def overlaps(row: LeaderRow, above: LeaderRow) -> bool:
        low, _high = _cost_interval(row)
        _above_low, above_high = _cost_interval(above)
        return low is not None and above_high is not None and low <= above_high
    unpriced = [replace(row, rank=0, tied=False) for row in board if row.usd_per_1m_output_tokens is None]
    return _ranked(priced, overlaps) + unpriced


def board_choices(rows: Rows, model: str, context: int
                  ) -> tuple[list[str], list[tuple[str, list[str]]], list[str], list[int]]:
    """`Store.leaderboard_choices`: the hardware names, each engine version with its engines,
    the endpoints and the image counts (images per request, 0: none) of the runs of `model`
    on a board at `context` (either board); sorted."""
    c, r = schema.cells.c, schema.runs.c
    query = _with_pooling(sa.select(r.hardware, r.engine, r.engine_version, ENDPOINT.label("endpoint"),
                                    c.images).distinct()
                          .join(schema.cells, c.run_id == r.id), outer=True)
    found = rows(query.where(model_is(model), listed(), c.context_tokens == context, _on_board()))
    versions: dict[str, set[str]] = {}
    for row in found:
        if row.engine_version is not None:
            versions.setdefault(row.engine_version, set()).update([row.engine] if row.engine else [])
    return (sorted({row.hardware for row in found if row.hardware is not None}),
            [(version, sorted(engines)) for version, engines in sorted(versions.items())],
            sorted({row.endpoint for row in found if row.endpoint is not None}),
            sorted({row.images for row in found}))


def board_contexts(rows: Rows) -> dict[tuple[str | None, str | None], list[int]]:
    """`Store.contexts_by_model`: for each (served name, model root), the contexts some board
    ranks its runs at (decode contexts, pooling input lengths), lowest first."""
    c, r = schema.cells.c, schema.runs.c
    query = _with_pooling(sa.select(r.model, r.model_root, c.context_tokens).distinct()
                          .join(schema.cells, c.run_id == r.id), outer=True)
    out: dict[tuple[str | None, str | None], set[int]] = {}
    for row in rows(query.where(listed(), _on_board())):
        out.setdefault((row.model, row.model_root), set()).add(row.context_tokens)
    return {key: sorted(found) for key, found in out.items()}
