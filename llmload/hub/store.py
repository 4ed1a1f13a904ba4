"""The store's API: open one (`open_store`), read it (`Store.runs`, `run`, `summary`,
`leaderboard`, `models`, `hardware`, `contexts`); publishing is `llmload.hub.publish`'s.

    with open_store("sqlite:////home/me/hub.sqlite") as store:
        for row in store.leaderboard("bench", 16384):
            print(row.run.id, row.run.hardware, row.concurrency, row.total_tok_s)

Everything returned is a frozen dataclass (`llmload.hub.rows`) or a `Results`, read in one transaction per
call; the store's URL is kept masked (`Store.label`). What is stored is in
`llmload.hub.schema`; the URL forms and migrations in `llmload.hub.database`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import fields, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from llmload.core.model.document import ResultsError, results_from_dict
from llmload.core.model.results import Results
from llmload.hub import schema
from llmload.hub.database import SQLITE_BUSY_S, StoreError, connect, default_url, first_line, masked, migrate
from llmload.hub.rows import HardwareEntry, LeaderCell, LeaderRow, ModelEntry, RunFilter, RunSummary

__all__ = ["HardwareEntry", "LeaderCell", "LeaderRow", "ModelEntry", "RunFilter", "RunSummary", "Store", "open_store"]
LISTS_KEPT = 256
"""Lists and leaderboards kept (`Store._cached`), least recently used dropped first."""

_SUMMARY_COLUMNS = [schema.runs.c[f.name] for f in fields(RunSummary)]
_ENDPOINT = schema.runs.c.results_json[("config", "endpoint")].as_string()
"""A run's endpoint (its results' config.endpoint: completions, chat, responses, messages)."""


def _summary(row: Any) -> RunSummary:
    return RunSummary(**{f.name: getattr(row, f.name) for f in fields(RunSummary)})


def _listed():
    """Runs that lists, leaderboards and counts show: not pending approval."""
    return schema.runs.c.tier != "pending"


def _model_is(model: str):
    return sa.or_(schema.runs.c.model == model, schema.runs.c.model_root == model)


def _filtered(query, filters: RunFilter):
    """`query` (over runs) with the filters' conditions."""
    r = schema.runs.c
    if filters.model is not None:
        query = query.where(_model_is(filters.model))
    for name in ("engine", "engine_version", "hardware", "provenance"):
        if getattr(filters, name) is not None:
            query = query.where(r[name] == getattr(filters, name))
    if filters.since is not None:
        query = query.where(r.started_at >= filters.since)
    if filters.until is not None:
        query = query.where(r.started_at < filters.until)
    if not filters.pending:
        query = query.where(_listed())
    return query


class Store:
    """An open store (`open_store`); a context manager that closes it."""

    def __init__(self, engine: Engine, *, label: str, writable: bool) -> None:
        self.engine = engine
        self.label = label
        """The URL, its password masked: what messages name the store by."""
        self.writable = writable
        self._aggregates: OrderedDict = OrderedDict()
        self._generation: int | None = None

    @property
    def url(self) -> str:
        """The URL to open the store again by (the hub's worker processes), password and all:
        never for a message (`label` is)."""
        return self.engine.url.render_as_string(hide_password=False)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def rows(self, query) -> list[Any]:
        """The rows of a query over the store's tables, in one transaction (StoreError, one
        line, where the store fails): the one way the hub's modules read the store."""
        try:
            with self.engine.connect() as connection:
                return list(connection.execute(query))
        except SQLAlchemyError as exc:
            raise StoreError(f"--db {self.label}: {first_line(exc)}", exit_code=1) from None

    def runs(self, filters: RunFilter = RunFilter(), *, limit: int | None = None, offset: int = 0
             ) -> list[RunSummary]:
        """The runs that pass `filters`, newest first (by started_at, then published_at);
        `limit` of them from `offset` (None: all). Kept (`_cached`) unless pending runs are asked."""
        if filters.pending:
            return self._runs(filters, limit, offset)
        return self._cached(("runs", filters, limit, offset), lambda: self._runs(filters, limit, offset))

    def _runs(self, filters: RunFilter, limit: int | None, offset: int) -> list[RunSummary]:
        r = schema.runs.c
        query = _filtered(sa.select(*_SUMMARY_COLUMNS), filters)
        query = query.order_by(r.started_at.desc(), r.published_at.desc(), r.id)
        if limit is not None:
            query = query.limit(limit).offset(offset)
        return [_summary(row) for row in self.rows(query)]

    def count_runs(self, filters: RunFilter = RunFilter()) -> int:
        """How many runs pass `filters` (kept, as `runs`)."""
        if filters.pending or filters == RunFilter():
            return self._count(filters)
        return self._cached(("count", filters), lambda: self._count(filters))

    def _count(self, filters: RunFilter) -> int:
        return self.rows(_filtered(sa.select(sa.func.count()).select_from(schema.runs), filters))[0][0]

    def _cached(self, key, make):
        """A list of the store (runs, models, hardware, contexts) or a leaderboard, from memory
        while the store lists the same runs: each costs a scan (0.05 to 0.7 s at 10,000
        runs), the check a count of its listed runs (1 ms). A run's content never changes,
        and listed runs are only ever added (published, or approved)."""
        generation = self._count(RunFilter())
        if generation != self._generation:
            self._aggregates.clear()
            self._generation = generation
        if key in self._aggregates:
            self._aggregates.move_to_end(key)
            return self._aggregates[key]
        value = self._aggregates[key] = make()
        while len(self._aggregates) > LISTS_KEPT:
            self._aggregates.popitem(last=False)
        return value

    def summary(self, run_id: str) -> RunSummary | None:
        """The stored run with this id, or None."""
        rows = self.rows(sa.select(*_SUMMARY_COLUMNS).where(schema.runs.c.id == run_id))
        return _summary(rows[0]) if rows else None

    def run(self, run_id: str) -> Results | None:
        """The stored run's results (its scrubbed document, checked), or None."""
        rows = self.rows(sa.select(schema.runs.c.results_json).where(schema.runs.c.id == run_id))
        if not rows:
            return None
        try:
            return results_from_dict(rows[0].results_json, source=f"run {run_id}")
        except ResultsError as exc:
            raise StoreError(f"--db {self.label}: {exc}") from None

    def document_text(self, run_id: str) -> str | None:
        """The stored run's results document as the store holds its JSON text, unparsed, or None."""
        rows = self.rows(sa.select(sa.cast(schema.runs.c.results_json, sa.Text)).where(schema.runs.c.id == run_id))
        return rows[0][0] if rows else None

    def leaderboard(self, model: str, context: int, concurrency: int | None = None, *,
                    hardware: str | None = None, engine_version: str | None = None,
                    endpoint: str | None = None) -> list[LeaderRow]:
        """For a model (served name or model root) and a decode context: one row per run that
        measured a total tok/s there (at `concurrency`, when given; on `hardware`, with that
        `engine_version` and on that `endpoint`, when given), best first."""
        return self._cached(("leaderboard", model, context, concurrency, hardware, engine_version, endpoint),
                            lambda: self._leaderboard(model, context, concurrency, hardware, engine_version, endpoint))

    def _leaderboard(self, model: str, context: int, concurrency: int | None, hardware: str | None,
                     engine_version: str | None, endpoint: str | None) -> list[LeaderRow]:
        c, r = schema.cells.c, schema.runs.c
        query = (sa.select(*_SUMMARY_COLUMNS, r.results_json["launch_command"].as_string().label("launch"),
                           c.concurrency, c.status.label("cell_status"), c.total_tok_s, c.per_request_tok_s,
                           c.ttft_ms, c.ttft_p99_ms, c.tbt_ms, c.total_tok_s_ci_low, c.total_tok_s_ci_high,
                           c.repeats)
                 .join(schema.cells, c.run_id == r.id)
                 .where(_model_is(model), _listed(), c.phase == "decode", c.context_tokens == context,
                        c.total_tok_s.is_not(None))
                 .order_by(r.id, c.concurrency))
        for column, value in ((r.hardware, hardware), (r.engine_version, engine_version), (_ENDPOINT, endpoint)):
            if value is not None:
                query = query.where(column == value)
        by_run: dict[str, tuple[RunSummary, str | None, list[LeaderCell]]] = {}
        for row in self.rows(query):
            entry = by_run.setdefault(row.id, (_summary(row), row.launch, []))
            entry[2].append(LeaderCell(concurrency=row.concurrency, status=row.cell_status, total_tok_s=row.total_tok_s,
                                       per_request_tok_s=row.per_request_tok_s, ttft_ms=row.ttft_ms,
                                       ttft_p99_ms=row.ttft_p99_ms, tbt_ms=row.tbt_ms,
                                       total_tok_s_ci_low=row.total_tok_s_ci_low,
                                       total_tok_s_ci_high=row.total_tok_s_ci_high, repeats=row.repeats))
        board = []
        for run, launch, run_cells in by_run.values():
            ranked = [x for x in run_cells if concurrency is None or x.concurrency == concurrency]
            if not ranked:
                continue
            top = max(ranked, key=lambda x: x.total_tok_s)
            board.append(LeaderRow(run=run, context_tokens=context, concurrency=top.concurrency,
                                   total_tok_s=top.total_tok_s, per_request_tok_s=top.per_request_tok_s,
                                   ttft_ms=top.ttft_ms, cells=tuple(run_cells), launch_command=launch,
                                   total_tok_s_ci_low=top.total_tok_s_ci_low,
                                   total_tok_s_ci_high=top.total_tok_s_ci_high, repeats=top.repeats))
        board.sort(key=lambda row: (-row.total_tok_s, row.run.id))
        return ranked_with_ties(board)

    def leaderboard_choices(self, model: str, context: int) -> tuple[list[str], list[tuple[str, list[str]]], list[str]]:
        """What the leaderboard of a model at a decode context can be filtered by: the
        hardware names, each engine version with its engines, and the endpoints of its runs; sorted."""
        return self._cached(("choices", model, context), lambda: self._leaderboard_choices(model, context))

    def _leaderboard_choices(self, model: str, context: int) -> tuple[list[str], list[tuple[str, list[str]]], list[str]]:
        c, r = schema.cells.c, schema.runs.c
        query = (sa.select(r.hardware, r.engine, r.engine_version, _ENDPOINT.label("endpoint")).distinct()
                 .join(schema.cells, c.run_id == r.id)
                 .where(_model_is(model), _listed(), c.phase == "decode", c.context_tokens == context,
                        c.total_tok_s.is_not(None)))
        rows = self.rows(query)
        versions: dict[str, set[str]] = {}
        for row in rows:
            if row.engine_version is not None:
                versions.setdefault(row.engine_version, set()).update([row.engine] if row.engine else [])
        return (sorted({row.hardware for row in rows if row.hardware is not None}),
                [(version, sorted(engines)) for version, engines in sorted(versions.items())],
                sorted({row.endpoint for row in rows if row.endpoint is not None}))

    def models(self) -> list[ModelEntry]:
        """Each (served name, model root) published, with its number of runs, most first."""
        r = schema.runs.c
        n = sa.func.count().label("n")
        query = (sa.select(r.model, r.model_root, n).where(_listed()).group_by(r.model, r.model_root)
                 .order_by(n.desc(), r.model))
        return self._cached("models", lambda: [ModelEntry(model=row.model, model_root=row.model_root, runs=row.n)
                                               for row in self.rows(query)])

    def hardware(self) -> list[HardwareEntry]:
        """Each (hardware, GPU) published, with its number of runs, most first."""
        r = schema.runs.c
        n = sa.func.count().label("n")
        query = (sa.select(r.hardware, r.gpu, n).where(_listed()).group_by(r.hardware, r.gpu)
                 .order_by(n.desc(), r.hardware))
        return self._cached("hardware", lambda: [HardwareEntry(hardware=row.hardware, gpu=row.gpu, runs=row.n)
                                                 for row in self.rows(query)])

    def contexts(self, model: str) -> list[int]:
        """The decode contexts measured for a model (served name or model root), lowest first."""
        return sorted({c for (name, root), found in self.contexts_by_model().items() if model in (name, root)
                       for c in found})

    def contexts_by_model(self) -> dict[tuple[str | None, str | None], list[int]]:
        """`contexts` of every (served name, model root) at once (one query), lowest first."""
        c, r = schema.cells.c, schema.runs.c
        query = (sa.select(r.model, r.model_root, c.context_tokens).distinct()
                 .join(schema.cells, c.run_id == r.id)
                 .where(_listed(), c.phase == "decode", c.total_tok_s.is_not(None))
                 .order_by(r.model, r.model_root, c.context_tokens))
        def read() -> dict[tuple[str | None, str | None], list[int]]:
            out: dict[tuple[str | None, str | None], list[int]] = {}
            for row in self.rows(query):
                out.setdefault((row.model, row.model_root), []).append(row.context_tokens)
            return out
        return self._cached("contexts", read)

    def record_names(self, run_id: str) -> list[str]:
        """The records files uploaded with a run (`publish --to --with-records`), by name."""
        t = schema.run_records.c
        return [row.name for row in self.rows(sa.select(t.name).where(t.run_id == run_id).order_by(t.name))]

    def record(self, run_id: str, name: str) -> bytes | None:
        """One uploaded records file's Parquet bytes, or None."""
        t = schema.run_records.c
        rows = self.rows(sa.select(t.data).where(t.run_id == run_id, t.name == name))
        return bytes(rows[0].data) if rows else None


def open_store(url: str | None = None, *, write: bool = False, busy_s: float = SQLITE_BUSY_S,
               wal: bool = False) -> Store:
    """The store at `url` (default: `database.default_url()`), brought to this llmload's
    schema (an empty database becomes an empty store); `write`: it will be published into
    (a SQLite file and its folder are created; each transaction takes the write lock), else
    a SQLite file that does not exist is refused; SQLite waits `busy_s` for another
    process's lock (`database.HUB_BUSY_S` in the hub); `wal`: the hub's write-ahead log
    (`database.connect`). Raises StoreError."""
    url = url or default_url()
    engine = connect(url, write=write, busy_s=busy_s, wal=wal)
    label = masked(url)
    try:
        migrate(engine, label=label)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, label=label, writable=write)


def ranked_with_ties(board: list[LeaderRow]) -> list[LeaderRow]:
    """The board (best first) with each row's rank: a row whose total tok/s interval overlaps
    the interval of the row above it is tied with it (the same rank) — their difference is
    within the noise; a row without an interval is never tied."""
    out: list[LeaderRow] = []
    for i, row in enumerate(board):
        above = out[-1] if out else None
        tied = (above is not None and None not in (row.total_tok_s_ci_low, row.total_tok_s_ci_high,
                                                   above.total_tok_s_ci_low, above.total_tok_s_ci_high)
                and row.total_tok_s_ci_high >= above.total_tok_s_ci_low)
        out.append(replace(row, rank=above.rank if tied else i + 1, tied=tied))
    return out
