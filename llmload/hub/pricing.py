"""What a stored run's cost per token is priced at, and the cost itself (pure: no store).
The pages say a cost as the report does (`llmload.output.pages.sections.usd`), a price per hour
as its "What a token costs" does (`fmt_price`: "$2.50").

A run is priced (`price_of`), first that holds:
- by the run: its results' `config.price_per_hour` (`llmload run --price-per-hour`), where it
  is a number the hub takes (`own_price`: above 0, below 1,000,000, as `parse_price`);
- at the hub's price for its hardware: the price per hour the hub's operator set for the
  run's hardware name (`llmload hub price set`, `llmload.hub.prices`);
- else not at all: "no price".
The calculator also takes a price asked for (its `price_per_hour` parameter), before both.

The cost is `llmload.core.figures.cost.cell_cost`'s, the one definition: per 1M output
tokens = price / 3,600 / total tok/s × 10⁶ (`output_cost`); None without a price or a rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmload.core.figures.cost import cell_cost, parse_price
from llmload.core.model.cell import CellResult

PRICED_BY = ("run", "hub", "asked")
"""Where a price comes from: the run's own, the hub operator's for its hardware, a query's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """What a run (or a prediction) is priced at: `price_per_hour` (USD) and where it came
    from (`priced_by`, one of PRICED_BY; None: no price), `hardware` for the hub's."""

    price_per_hour: float | None = None
    priced_by: str | None = None
    hardware: str | None = None

    @property
    def text(self) -> str:
        """"priced by the run", "at the hub's price for H100", "at the price asked", "no price"."""
        if self.priced_by == "run":
            return "priced by the run"
        if self.priced_by == "hub":
            return f"at the hub's price for {self.hardware}"
        if self.priced_by == "asked":
            return "at the price asked"
        return "no price"

    def to_dict(self) -> dict[str, Any]:
        return {"price_per_hour": self.price_per_hour, "priced_by": self.priced_by, "price_text": self.text}


def own_price(value: Any) -> float | None:
    """A run's own price (its config's `price_per_hour` as stored), or None where it has none
    the hub takes: not a number (a text, a bool), or out of `parse_price`'s range."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return parse_price(value, "price_per_hour")
    except ValueError:
        return None


def price_of(own: Any, hardware: str | None, prices: dict[str, float]) -> Pricing:
    """A stored run's pricing (module docstring): `own` its config's price as stored,
    `hardware` its hardware name, `prices` the operator's by hardware name."""
    mine = own_price(own)
    if mine is not None:
        return Pricing(price_per_hour=mine, priced_by="run")
    if hardware is not None and hardware in prices:
        return Pricing(price_per_hour=prices[hardware], priced_by="hub", hardware=hardware)
    return Pricing()


def output_cost(price_per_hour: float | None, total_tok_s: float | None) -> float | None:
    """USD per 1M output tokens at `price_per_hour` for a cell of `total_tok_s`
    (`cell_cost`'s figure, of a decode cell with only that rate); None without either."""
    if not price_per_hour or not total_tok_s:
        return None
    cell = CellResult(phase="decode", context_tokens=0, concurrency=1, status="ok", total_tok_s=total_tok_s)
    return cell_cost(cell, price_per_hour).usd_per_1m_output_tokens



def fmt_price(price_per_hour: float | None) -> str:
    """A price per hour as the report's "What a token costs" says it: "$2.50", "$0.80",
    "$1,200.00"; under a cent to three digits ("$0.004"); "" for None."""
    if price_per_hour is None:
        return ""
    return f"${price_per_hour:,.2f}" if price_per_hour >= 0.01 else f"${price_per_hour:.3g}"
