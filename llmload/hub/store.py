"""The store's API: open one (`open_store`), read it (`Store.runs`, `run`, `summary`,
`leaderboard`, `pooling_leaderboard`, `models`, `hardware`, `contexts`, `hardware_prices`,
`pricing`); publishing is `llmload.hub.publish`'s; the leaderboards' queries are
`llmload.hub.boards`'; the operator's prices are set by `llmload.hub.prices`.

    with open_store("sqlite:////home/me/hub.sqlite") as store:
        for row in store.leaderboard("bench", 16384):
            print(row.run.id, row.run.hardware, row.concurrency, row.total_tok_s)

Everything returned is a frozen dataclass (`llmload.hub.rows`) or a `Results`, read in one transaction per
call; the store's URL is kept masked (`Store.label`). What is stored is in
`llmload.hub.schema`; the URL forms and migrations in `llmload.hub.database`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from llmload.core.model.document import ResultsError, results_from_dict
from llmload.core.model.results import Results
from llmload.hub import schema
from llmload.hub.boards import (RUN_PRICE, SUMMARY_COLUMNS, board_choices, board_contexts, listed, model_is,
                                pooling_board, ranked_with_ties, summary, token_board)
from llmload.hub.database import SQLITE_BUSY_S, StoreError, connect, default_url, first_line, masked, migrate
from llmload.hub.pricing import Pricing, price_of
from llmload.hub.rows import (HardwareEntry, LeaderCell, LeaderRow, ModelEntry, PoolingCell, PoolingRow, RunFilter,
                              RunSummary)

__all__ = ["HardwareEntry", "LeaderCell", "LeaderRow", "ModelEntry", "PoolingCell", "PoolingRow", "RunFilter",
           "RunSummary", "Store", "open_store", "ranked_with_ties"]
LISTS_KEPT = 256
"""Lists and leaderboards kept (`Store._cached`), least recently used dropped first."""


def _filtered(query, filters: RunFilter):
    """`query` (over runs) with the filters' conditions."""
    r = schema.runs.c
    if filters.model is not None:
        query = query.where(model_is(filters.model))
    for name in ("engine", "engine_version", "hardware", "provenance"):
        if getattr(filters, name) is not None:
            query = query.where(r[name] == getattr(filters, name))
    if filters.since is not None:
        query = query.where(r.started_at >= filters.since)
    if filters.until is not None:
        query = query.where(r.started_at < filters.until)
    if not filters.pending:
        query = query.where(listed())
    return query


class Store:
    """An open store (`open_store`); a context manager that closes it."""

    def __init__(self, engine: Engine, *, label: str, writable: bool) -> None:
        self.engine = engine
        self.label = label
        """The URL, its password masked: what messages name the store by."""
        self.writable = writable
        self._aggregates: OrderedDict = OrderedDict()
        self._generation: tuple | None = None

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
        query = _filtered(sa.select(*SUMMARY_COLUMNS), filters)
        query = query.order_by(r.started_at.desc(), r.published_at.desc(), r.id)
        if limit is not None:
            query = query.limit(limit).offset(offset)
        return [summary(row) for row in self.rows(query)]

    def count_runs(self, filters: RunFilter = RunFilter()) -> int:
        """How many runs pass `filters` (kept, as `runs`)."""
        if filters.pending or filters == RunFilter():
            return self._count(filters)
        return self._cached(("count", filters), lambda: self._count(filters))

    def _count(self, filters: RunFilter) -> int:
        return self.rows(_filtered(sa.select(sa.func.count()).select_from(schema.runs), filters))[0][0]

    def _generation_now(self) -> tuple:
        """What a kept list depends on, in one query: how many runs the store lists, and
        how many prices the operator set, their sum and when one last changed."""
        p = schema.hardware_prices.c
        listed = _filtered(sa.select(sa.func.count()).select_from(schema.runs), RunFilter()).scalar_subquery()
        prices = sa.select(sa.func.count(), sa.func.sum(p.price_per_hour), sa.func.max(p.set_at)).subquery()
        return tuple(self.rows(sa.select(listed, *prices.c))[0])

    def _cached(self, key, make):
        """A list of the store (runs, models, hardware, contexts) or a leaderboard, from memory
        while the store lists the same runs at the same prices: each costs a scan (0.05 to
        0.7 s at 10,000 runs), the check one query (`_generation_now`: the listed runs'
        count and the operator's prices' count, sum and last change; 1 ms). A run's content never changes, and listed runs are only ever
        added (published, or approved)."""
        generation = self._generation_now()
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
        rows = self.rows(sa.select(*SUMMARY_COLUMNS).where(schema.runs.c.id == run_id))
        return summary(rows[0]) if rows else None

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
                    endpoint: str | None = None, images: int = 0, rank: str = "tok_s") -> list[LeaderRow]:
        """For a model (served name or model root) and a decode context: one row per run that
        measured a total tok/s there with `images` images per request (0: text only; at
        `concurrency`, when given; on `hardware`, with that `engine_version` and on that
        `endpoint`, when given), each priced (`pricing`), best first by `rank`: "tok_s", or
        "cost" (the cheapest per 1M output tokens first, the runs without a price after;
        `boards.token_board`)."""
        key = ("leaderboard", model, context, concurrency, hardware, engine_version, endpoint, images, rank)
        return self._cached(key, lambda: token_board(self.rows, model, context, concurrency, hardware, engine_version,
                                                     endpoint, images, self.hardware_prices(), rank))

    def pooling_leaderboard(self, model: str, context: int, concurrency: int | None = None, *,
                            hardware: str | None = None, engine_version: str | None = None,
                            endpoint: str | None = None) -> list[PoolingRow]:
        """For a model and an input length: one row per run that measured inputs/s there on
        the embeddings or rerank endpoint (`endpoint`; None: either), the filters as
        `leaderboard`'s, the most inputs/s first (`boards.pooling_board`)."""
        return self._cached(("pooling", model, context, concurrency, hardware, engine_version, endpoint),
                            lambda: pooling_board(self.rows, model, context, concurrency, hardware, engine_version,
                                                  endpoint))

    def leaderboard_choices(self, model: str, context: int
                            ) -> tuple[list[str], list[tuple[str, list[str]]], list[str], list[int]]:
        """What the leaderboards of a model at a context (decode context, or pooling input
        length) can be filtered by: the hardware names, each engine version with its engines,
        the endpoints and the image counts (images per request, 0: none) of its runs there; sorted."""
        return self._cached(("choices", model, context), lambda: board_choices(self.rows, model, context))

    def models(self) -> list[ModelEntry]:
        """Each (served name, model root) published, with its number of runs, most first."""
        r = schema.runs.c
        n = sa.func.count().label("n")
        query = (sa.select(r.model, r.model_root, n).where(listed()).group_by(r.model, r.model_root)
                 .order_by(n.desc(), r.model))
        return self._cached("models", lambda: [ModelEntry(model=row.model, model_root=row.model_root, runs=row.n)
                                               for row in self.rows(query)])

    def hardware(self) -> list[HardwareEntry]:
        """Each (hardware, GPU) published, with its number of runs, most first, and the
        operator's price for it; then each hardware priced that no listed run is on (0 runs)."""
        return self._cached("hardware", self._hardware)

    def _hardware(self) -> list[HardwareEntry]:
        r = schema.runs.c
        n = sa.func.count().label("n")
        query = (sa.select(r.hardware, r.gpu, n).where(listed()).group_by(r.hardware, r.gpu)
                 .order_by(n.desc(), r.hardware))
        prices = self.hardware_prices()
        found = [HardwareEntry(hardware=row.hardware, gpu=row.gpu, runs=row.n,
                               price_per_hour=prices.get(row.hardware) if row.hardware is not None else None)
                 for row in self.rows(query)]
        named = {entry.hardware for entry in found}
        return found + [HardwareEntry(hardware=name, gpu=None, runs=0, price_per_hour=price)
                        for name, price in sorted(prices.items()) if name not in named]

    def hardware_prices(self) -> dict[str, float]:
        """The hub operator's price per hour (USD) of each hardware name priced (`llmload hub
        price set`, `llmload.hub.prices`); read each time (a few rows)."""
        t = schema.hardware_prices.c
        return {row.hardware: row.price_per_hour for row in self.rows(sa.select(t.hardware, t.price_per_hour))}

    def pricing(self, runs: tuple[RunSummary, ...]) -> dict[str, Pricing]:
        """What each of `runs` is priced at, by id (`pricing.price_of`: its own price, else the
        operator's for its hardware): one query of their prices (a page of runs, or one)."""
        if not runs:
            return {}
        prices, r = self.hardware_prices(), schema.runs.c
        own = {row.id: row.run_price for row in self.rows(sa.select(r.id, RUN_PRICE).where(
            r.id.in_([run.id for run in runs])))}
        return {run.id: price_of(own.get(run.id), run.hardware, prices) for run in runs}

    def contexts(self, model: str) -> list[int]:
        """The contexts a leaderboard ranks a model's runs at (served name or model root): its
        decode contexts and its embeddings or rerank input lengths, lowest first."""
        return sorted({c for (name, root), found in self.contexts_by_model().items() if model in (name, root)
                       for c in found})

    def contexts_by_model(self) -> dict[tuple[str | None, str | None], list[int]]:
        """`contexts` of every (served name, model root) at once (one query), lowest first."""
        return self._cached("contexts", lambda: board_contexts(self.rows))

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

