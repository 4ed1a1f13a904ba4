"""The hub operator's prices per hour, by hardware name (`llmload hub price set|clear|list`;
`llmload.hub.schema.hardware_prices`). A price is a number of USD above 0 and below
1,000,000 (`llmload.core.figures.cost.parse_price`); a hardware name is the runs' as /hardware
lists it (`runs.hardware`: the run's hardware name, else its GPU, else its CPU), one line of
at most 200 characters. What a run is priced at from them is `llmload.hub.pricing`'s.

The hub has no login, so a price is set where tokens are made and runs approved: by the
operator, on the store, through the CLI. A running hub sees a change at its next page (its
lists and leaderboards are kept while the runs and the prices stay the same, `Store._cached`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from llmload.core.figures.cost import parse_price
from llmload.core.model.results import utc_now_iso
from llmload.hub import schema
from llmload.hub.boards import listed
from llmload.hub.database import StoreError, first_line
from llmload.hub.limits import MAX_NAME_CHARS, hidden_character
from llmload.hub.store import Store


class PriceError(ValueError):
    """A price or hardware name the operator gave that cannot be used; one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwarePrice:
    hardware: str
    price_per_hour: float
    set_at: str
    runs: int
    """The listed runs on that hardware (0: none yet, or a name no run has)."""


def checked_hardware(name: str) -> str:
    """A hardware name as a price is set for (stripped); PriceError for one that is empty, too
    long, or holds a control, invisible or direction-changing character."""
    name = (name or "").strip()
    if not name:
        raise PriceError("hardware: give the hardware's name as /hardware lists it")
    if len(name) > MAX_NAME_CHARS:
        raise PriceError(f"hardware: {name[:40]!r}... is longer than {MAX_NAME_CHARS} characters")
    found = hidden_character(name)
    if found:
        raise PriceError(f"hardware: {name[:40]!r} holds {found}, a control, invisible or direction-changing character")
    return name


def checked_price(value: object) -> float:
    """`parse_price`'s price, its error as a PriceError."""
    try:
        return parse_price(value, "price")
    except ValueError as exc:
        raise PriceError(str(exc)) from None


def _write(store: Store, *statements) -> None:
    try:
        with store.engine.begin() as connection:
            for statement in statements:
                connection.execute(statement)
    except SQLAlchemyError as exc:
        raise StoreError(f"--db {store.label}: {first_line(exc)}", exit_code=1) from None


def set_price(store: Store, hardware: str, price: object) -> float | None:
    """Set the price per hour of `hardware` (PriceError for a bad name or price); gives the
    price it had before (None: none)."""
    name, usd = checked_hardware(hardware), checked_price(price)
    before = store.hardware_prices().get(name)
    t = schema.hardware_prices
    _write(store, sa.delete(t).where(t.c.hardware == name),
           sa.insert(t).values(hardware=name, price_per_hour=usd, set_at=utc_now_iso()))
    return before


def clear_price(store: Store, hardware: str) -> float:
    """Remove the price of `hardware`; gives the price it had. PriceError where it has none."""
    name = checked_hardware(hardware)
    before = store.hardware_prices().get(name)
    if before is None:
        raise PriceError(f"no price is set for {name[:80]!r} (llmload hub price list shows those set)")
    t = schema.hardware_prices
    _write(store, sa.delete(t).where(t.c.hardware == name))
    return before


def runs_on(store: Store, hardware: str) -> int:
    """The listed runs whose hardware is `hardware`."""
    r = schema.runs.c
    return store.rows(sa.select(sa.func.count()).select_from(schema.runs).where(r.hardware == hardware, listed()))[0][0]


def list_prices(store: Store) -> list[HardwarePrice]:
    """Every price set, by hardware name, with the listed runs on each."""
    t, r = schema.hardware_prices.c, schema.runs.c
    n = (sa.select(sa.func.count()).select_from(schema.runs).where(r.hardware == t.hardware, listed())
         .scalar_subquery())
    rows = store.rows(sa.select(t.hardware, t.price_per_hour, t.set_at, n.label("n")).order_by(t.hardware))
    return [HardwarePrice(hardware=row.hardware, price_per_hour=row.price_per_hour, set_at=row.set_at, runs=row.n)
            for row in rows]
