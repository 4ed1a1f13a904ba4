"""Chat sessions' part of the page: one row per (S, users) cell (status, throughput, TTFT and
TBT percentiles, the prefix cache's share of the prompt by usage's cached tokens and by the
server's counters where it has them, the context reached, turns and requests); with an SLO,
per system prompt the most chat users meeting it; TTFT by turn and the cache's share drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmload.core.model.cell import CellResult
from llmload.core.model.results import Results
from llmload.core.traffic.workloads import parse_think_time
from llmload.core.units import format_duration_s, format_tokens
from llmload.output.formats import fmt_count, fmt_ms, fmt_rate, fmt_share, fmt_tbt_ms, status_label
from llmload.output.pages.model import Section
from llmload.output.pages.tables import Column
from llmload.output.pages.workloads.part import (CAPACITY_COLUMNS, CapacityTable, Slo, WorkloadPart, cancel_parameter,
                                                 close_notes, fmt_list, fmt_tokens, present, status_table,
                                                 users_answer)


def _think(value: Any) -> str:
    try:
        think = parse_think_time(value if value is not None else "0")
    except ValueError:
        return str(value)
    if think.mean_s <= 0:
        return "none"
    seconds = format_duration_s(think.mean_s)
    return f"exponential, mean {seconds}" if think.exponential else seconds


def parameters(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    dataset = config.get("dataset")
    return [("system prompt S", fmt_list(config.get("system_prompt_tokens"), fmt_tokens) + " tokens"),
            ("users", config.get("users_schedule") or fmt_list(config.get("concurrency"))),
            ("turns", config.get("turns")),
            ("conversations", dataset),
            ("new tokens a turn U", None if dataset else config.get("prompt_tokens") or config.get("turn_tokens")),
            ("output tokens a turn M", "each answer's length" if dataset
             else config.get("output_tokens") or config.get("max_tokens")),
            ("seed", config.get("seed") if config.get("prompt_tokens") or config.get("output_tokens")
             or dataset or config.get("cancel") else None),
            ("think time", _think(config.get("think_time"))), cancel_parameter(config)]


SESSION_COLUMNS: list[Column] = [
    ("S", lambda c: format_tokens(c.context_tokens)),
    ("users", lambda c: str(c.concurrency)),
    ("status", status_label),
    ("total tok/s", lambda c: fmt_rate(c.total_tok_s)),
    ("per request tok/s", lambda c: fmt_rate(c.per_request_tok_s)),
    ("TTFT p50", lambda c: fmt_ms(c.ttft_ms)),
    ("TTFT p99", lambda c: fmt_ms(c.ttft_p99_ms)),
    ("TBT p50", lambda c: fmt_tbt_ms(c.tbt_ms)),
    ("TBT p99", lambda c: fmt_tbt_ms(c.tbt_p99_ms)),
    ("cached prompt", lambda c: fmt_share(c.traffic.cached_prompt_ratio)),
    ("cached (server counters)", lambda c: fmt_share(c.traffic.server_cached_prompt_ratio)),
    ("context reached", lambda c: fmt_count(c.traffic.context_reached_tokens)),
    ("turns", lambda c: fmt_count(c.traffic.turns)),
    ("requests", lambda c: fmt_count(c.requests_sent)),
    ("cancelled by the client", lambda c: fmt_count(c.traffic.requests_cancelled_by_client)),
]
SESSION_NOTE = (
    "Cached prompt: prompt tokens the server served from its prefix cache (usage cached_tokens) "
    "over prompt tokens; the server-counter column is the same share from its prefix-cache "
    "counters over the window, where it has them. Context reached: the longest prompt sent.")


def sections(results: Results, cells: Sequence[CellResult], slo: Slo | None) -> tuple[list[Section], list[str]]:
    columns = present(cells, SESSION_COLUMNS,
                      {"cached (server counters)": lambda c: c.traffic.server_cached_prompt_ratio,
                       "cancelled by the client": lambda c: c.traffic.requests_cancelled_by_client or None})
    return [Section(title="Chat sessions (one row per system prompt S × users)", intro=None,
                    table=status_table(cells, columns), note=SESSION_NOTE)], close_notes(cells, results.server.get("engine"))


CAPACITY_NOTE = (
    "Max chat users: the largest measured number of users holding conversations whose cell "
    "met every bound, with every smaller measured number meeting it too (≥: none failed). "
    "Binding limit, few samples and goodput as for the matrix.")

PART = WorkloadPart(
    name="sessions",
    title=lambda config: "Chat sessions",
    parameters=parameters,
    sections=sections,
    capacity=CapacityTable(phase="session", note=CAPACITY_NOTE, columns=(
        "system prompt S", "max chat users", *CAPACITY_COLUMNS[2:5], "first failing users", CAPACITY_COLUMNS[6])),
    answer=lambda cells, slo: users_answer(cells, slo, phase="session", noun="chat user", where="system prompt {}",
                                           what="the most chat users"),
    charts=("ttft_by_turn", "cache_ratio"),
)
