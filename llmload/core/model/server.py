"""The server's own account of a cell next to llmload's, as values: one figure checked
(`ServerCheck`) and the server's per-request timing (`ServerTiming`). How they are computed
is `llmload.core.figures.servercheck`'s."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: Client and server figures that differ by more than this fraction are flagged.
SERVER_AGREEMENT = 0.03
#: ... for a cold prefill's prompt tok/s: llmload's TTFT also holds the request's HTTP
#: round trip, which the server's prompt time does not.
PREFILL_AGREEMENT = 0.10
#: ... and for a text prompt (the chat endpoint), whose TTFT also holds the server's
#: templating and tokenizing of the text: 13% of a 1K chat prefill on llama.cpp here.
PREFILL_TEXT_AGREEMENT = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerCheck:
    """One figure as llmload measured it next to the server's own account of it."""

    figure: str
    """What is compared, e.g. "per_request_tok_s"."""
    client: float
    server: float
    source: str
    """Where the server's number comes from."""
    tolerance: float = SERVER_AGREEMENT
    """The relative difference above which the two disagree."""

    @property
    def diff_pct(self) -> float:
        return (self.client / self.server - 1.0) * 100.0 if self.server else math.inf

    @property
    def agrees(self) -> bool:
        return abs(self.diff_pct) <= self.tolerance * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "diff_pct": self.diff_pct, "agrees": self.agrees}



@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTiming:
    """The server's own per-request timing over the cell (`server_timing`): its medians, how
    many requests carried it, and llmload's figures checked against them (a cell's group,
    `llmload.core.model.cell`)."""

    server_ttft_ms: float | None = None
    server_queue_ms: float | None = None
    server_mean_itl_ms: float | None = None
    server_timing_requests: int | None = None
    server_timing_checks: tuple[ServerCheck, ...] | None = None
