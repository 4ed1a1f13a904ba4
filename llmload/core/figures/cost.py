"""What a token costs: the server machine's price per hour spread over what a cell's window
served. Pure; the price is the user's (`--price-per-hour`, LLMLOAD_PRICE_PER_HOUR, or
`price_per_hour` in `--server-hardware`), written in results.json's config, so a run can
be priced again later (`llmload report --price-per-hour`).

Rules (docs/figures.md, "What a token costs"): the machine costs price / 3,600 per second
of the window, whatever it serves, so
- per 1M output tokens = price / 3,600 / total tok/s × 10⁶ (every cell that generates:
  decode, session, rate, replay);
- per 1M prompt tokens = price / 3,600 / prompt tok/s × 10⁶ where the cell has a prompt
  rate (a cold prefill; a rate or replay cell's prompts of the requests whose first token
  came in the window): the same seconds as the output's, each figure as if the machine
  served that kind of token alone;
- embeddings and rerank: per 1M input tokens (input tok/s) and per 1K inputs (inputs/s).
A figure is None where its rate is missing or zero: never a zero or an infinity.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.core.model.cell import CellResult

PRICE_KEY = "price_per_hour"
"""The key of the price in --server-hardware's facts and in results.json's config."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellCost:
    """A cell's cost per token at a price per hour (`cell_cost`); None where undefined."""

    usd_per_1m_output_tokens: float | None = None
    usd_per_1m_prompt_tokens: float | None = None
    usd_per_1k_inputs: float | None = None
    """Embeddings and rerank: per 1,000 inputs (rerank: documents)."""


def _per(price_per_hour: float, rate: float | None, unit: float) -> float | None:
    return price_per_hour / 3600.0 / rate * unit if rate else None


def cell_cost(cell: CellResult, price_per_hour: float | None) -> CellCost:
    """The cost figures of `cell` at `price_per_hour` (module docstring); all None without a price."""
    if not price_per_hour:
        return CellCost()
    pool = cell.pooling
    if pool.inputs_per_s is not None:
        return CellCost(usd_per_1m_prompt_tokens=_per(price_per_hour, pool.input_tok_s, 1e6),
                        usd_per_1k_inputs=_per(price_per_hour, pool.inputs_per_s, 1e3))
    return CellCost(usd_per_1m_output_tokens=_per(price_per_hour, cell.total_tok_s, 1e6),
                    usd_per_1m_prompt_tokens=_per(price_per_hour, cell.prompt_tok_s, 1e6))


def parse_price(value: object, where: str) -> float:
    """A price per hour (> 0, a number); ValueError (one line naming `where`) for another."""
    try:
        price = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where} {value!r} must be a number (USD per hour of the server's machine)") from None
    if not 0 < price < 1e6:
        raise ValueError(f"{where} {price:g} must be above 0 and below 1,000,000 (USD per hour)")
    return price
