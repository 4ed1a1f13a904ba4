"""A cell's result as a typed value, and the one place it becomes a results.json cell.

`CellResult` (frozen, keyword-only) groups a cell's identity, status, figures, the server's
load (`ServerLoad`) and the load generator's (`ClientLoad`). `to_dict()` flattens it into
the results.json cell: the keys are the field names, in field order, the groups' fields in
the group's place; `CELL_KEYS` is derived from the fields, so the written keys and the
declared ones cannot drift (`llmload.output.results` documents each, and a test checks it).
Pure: no numpy, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from llmload.core.servercheck import ServerCheck


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLoad:
    """The server during a decode window, from its /metrics."""

    max_waiting: float | None = None
    median_waiting: float | None = None
    preemptions: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientLoad:
    """The load generator's busiest process during a decode window."""

    client_cpu_pct_max: float | None = None
    client_cpu_pct_mean: float | None = None
    loop_lag_ms_max: float | None = None
    loop_lag_ms_p50: float | None = None
    loop_lag_ms_p90: float | None = None
    client_events_per_read: float | None = None
    client_added_delay_ms_p50: float | None = None
    client_added_delay_ms_p99: float | None = None
    client_added_delay_source: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTiming:
    """The server's own per-request timing over the cell (`servercheck.server_timing`): its
    medians, how many requests carried it, and llmload's figures checked against them."""

    server_ttft_ms: float | None = None
    server_queue_ms: float | None = None
    server_mean_itl_ms: float | None = None
    server_timing_requests: int | None = None
    server_timing_checks: tuple[ServerCheck, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CellSlo:
    """Percentile sample counts (decode cells) and, with an SLO, goodput (`llmload.core.goodput`)."""

    ttft_samples: int | None = None
    tbt_samples: int | None = None
    goodput_tok_s: float | None = None
    slo_requests: int | None = None
    slo_met_requests: int | None = None
    slo_search: bool | None = None
    """The cell was added by the SLO bisection."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellEnergy:
    """A decode cell's energy figures (`llmload.core.energy.cell_energy`), where measured."""

    power_mean_w: float | None = None
    power_max_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    power_samples: int | None = None
    j_per_output_token: float | None = None
    output_tokens_per_j: float | None = None
    idle_power_w: float | None = None
    energy_above_idle_j: float | None = None
    j_per_output_token_above_idle: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CellTiming:
    """Where the cell's wall time went, in seconds (`CellFacts.timing`), as measured."""

    users_s: float
    warmup_s: float
    window_s: float
    wall_s: float
    overhead_s: float


_GROUPS = {"server_load": ServerLoad, "client_load": ClientLoad, "server_timing": ServerTiming,
           "slo": CellSlo, "energy": CellEnergy}


@dataclass(frozen=True, slots=True, kw_only=True)
class CellResult:
    """One cell of results.json (see `llmload.output.results` for each key's meaning)."""

    phase: str
    context_tokens: int
    concurrency: int
    status: str
    # figures
    prompt_tok_s: float | None = None
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tbt_ms: float | None = None
    tbt_p90_ms: float | None = None
    tbt_p99_ms: float | None = None
    ttfa_ms: float | None = None
    ttfa_p90_ms: float | None = None
    ttfa_p99_ms: float | None = None
    ttfa_samples: int | None = None
    reasoning_token_share: float | None = None
    avg_active: float | None = None
    avg_streaming: float | None = None
    completed_requests: int | None = None
    requests_sent: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None
    errors: int | None = None
    requests_attempted: int | None = None
    error_samples: tuple[str, ...] = ()
    # extras
    prompt_tokens: int | None = None
    reason: str | None = None
    prefill_source: str | None = None
    server_load: ServerLoad = ServerLoad()
    client_load: ClientLoad = ClientLoad()
    warmup_cache_hit: bool | None = None
    cached_tokens: int | None = None
    longest_stall_s: float | None = None
    stall_check_note: str | None = None
    token_source: str | None = None
    server_prompt_tokens: int | None = None
    usage_mismatches: int | None = None
    server_check: ServerCheck | None = None
    server_timing: ServerTiming = ServerTiming()
    prompt_length_note: str | None = None
    slo: CellSlo = CellSlo()
    energy: CellEnergy = CellEnergy()
    records_file: str | None = None
    timing: CellTiming | None = None

    def to_dict(self) -> dict[str, Any]:
        """The results.json cell (flat, keys in CELL_KEYS order)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _GROUPS:
                out.update({g.name: getattr(value, g.name) for g in fields(value)})
                if f.name == "server_timing" and value.server_timing_checks is not None:
                    out["server_timing_checks"] = [c.to_dict() for c in value.server_timing_checks]
            elif f.name == "error_samples":
                out[f.name] = list(value)
            elif f.name == "server_check" and value is not None:
                out[f.name] = value.to_dict()
            elif f.name == "timing" and value is not None:
                out[f.name] = {t.name: getattr(value, t.name) for t in fields(value)}
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CellResult":
        """From a flat cell; a key that is no field is refused (ValueError)."""
        unknown = set(d) - set(CELL_KEYS)
        if unknown:
            raise ValueError(f"cell keys {sorted(unknown)} are not CellResult fields")
        kw: dict[str, Any] = {k: v for k, v in d.items() if k in _TOP}
        for name, group in _GROUPS.items():
            kw[name] = group(**{g.name: d[g.name] for g in fields(group) if g.name in d})
        kw["error_samples"] = tuple(d.get("error_samples") or ())
        if kw.get("server_check") is not None:
            kw["server_check"] = _check(kw["server_check"])
        checks = d.get("server_timing_checks")
        if checks is not None:
            kw["server_timing"] = ServerTiming(**{**{g.name: getattr(kw["server_timing"], g.name)
                                                     for g in fields(ServerTiming)},
                                                  "server_timing_checks": tuple(_check(c) for c in checks)})
        if kw.get("timing") is not None:
            kw["timing"] = CellTiming(**kw["timing"])
        return cls(**kw)


def _check(d: dict[str, Any]) -> ServerCheck:
    return ServerCheck(**{k: v for k, v in d.items() if k not in ("diff_pct", "agrees")})


def _keys() -> tuple[str, ...]:
    keys: list[str] = []
    for f in fields(CellResult):
        group = _GROUPS.get(f.name)
        keys.extend(g.name for g in fields(group)) if group else keys.append(f.name)
    return tuple(keys)


CELL_KEYS = _keys()
"""Every key of a results.json cell, in the order written."""
_TOP = {f.name for f in fields(CellResult)} - set(_GROUPS)
