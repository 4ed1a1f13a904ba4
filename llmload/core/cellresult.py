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


_GROUPS = {"server_load": ServerLoad, "client_load": ClientLoad}


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
    server_check: dict[str, Any] | None = None
    # the server's own per-request timing (llmload.core.servercheck.server_timing), where it gives one
    server_ttft_ms: float | None = None
    server_queue_ms: float | None = None
    server_mean_itl_ms: float | None = None
    server_timing_requests: int | None = None
    server_timing_checks: list[dict[str, Any]] | None = None
    prompt_length_note: str | None = None
    # SLO (llmload.core.slo): sample counts always on decode cells, goodput with an SLO
    ttft_samples: int | None = None
    tbt_samples: int | None = None
    goodput_tok_s: float | None = None
    slo_requests: int | None = None
    slo_met_requests: int | None = None
    slo_search: bool | None = None
    # energy (llmload.core.energy), where measured
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
    records_file: str | None = None
    timing: dict[str, float] | None = None
    """Where the cell's wall time went (`CellFacts.timing`)."""

    def to_dict(self) -> dict[str, Any]:
        """The results.json cell (flat, keys in CELL_KEYS order)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _GROUPS:
                out.update({g.name: getattr(value, g.name) for g in fields(value)})
            elif f.name == "error_samples":
                out[f.name] = list(value)
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
        return cls(**kw)


def _keys() -> tuple[str, ...]:
    keys: list[str] = []
    for f in fields(CellResult):
        group = _GROUPS.get(f.name)
        keys.extend(g.name for g in fields(group)) if group else keys.append(f.name)
    return tuple(keys)


CELL_KEYS = _keys()
"""Every key of a results.json cell, in the order written."""
_TOP = {f.name for f in fields(CellResult)} - set(_GROUPS)
