"""The hub's query parameters, read and checked: each a value or a `QueryError` of one line
(the web app answers it with a 400). Only what a page or API route reads is parsed here; the
limits on a request as a whole (its length, how many parameters) are `llmload.hub.security`'s.
Every number is bounded: a token count by MAX_CONTEXT_TOKENS, a count by MAX_COUNT (or less),
so that nothing a visitor types overflows a database integer or a conversion."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime

from llmload.core.figures.cost import parse_price
from llmload.core.scenariovalues import ENDPOINTS, MAX_IMAGES
from llmload.core.units import parse_tokens
from llmload.hub.store import RunFilter

PROVENANCES = ("measured", "simulated", "predicted")
RUN_ID = re.compile(r"^[0-9a-f]{16}$")
MAX_USERS = 256
"""The most simultaneous users the calculator predicts for (a virtual run grows with them)."""
MAX_CONTEXT_TOKENS = 16 * 1024 * 1024
"""The largest context (tokens) a query may name: 16M."""
MAX_COUNT = 1_000_000
"""The largest whole number a query may give where no smaller bound is set."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class QueryError(ValueError):
    """A query parameter the hub cannot use; the message is one line."""


def text(args: Mapping[str, str], name: str) -> str | None:
    """A text parameter, stripped; empty or absent is None. A control character (a line
    break, NUL, ...) is refused."""
    value = (args.get(name) or "").strip()
    if _CONTROL.search(value):
        raise QueryError(f"{name}: one line of text expected (no control characters)")
    return value or None


def required(args: Mapping[str, str], name: str, what: str) -> str:
    value = text(args, name)
    if value is None:
        raise QueryError(f"{name} is missing: give {what}")
    return value


def tokens(args: Mapping[str, str], name: str, *, default: int | None = None) -> int | None:
    """A token count (8192, 16K) up to MAX_CONTEXT_TOKENS; absent is `default`."""
    value = text(args, name)
    if value is None:
        return default
    try:
        count_ = parse_tokens(value)
    except ValueError:
        raise QueryError(f"{name}: {value[:40]!r} is not a token count (a number like 8192 or 16K)") from None
    if count_ > MAX_CONTEXT_TOKENS:
        raise QueryError(f"{name}: {value[:40]} is more than {MAX_CONTEXT_TOKENS:,} tokens")
    return count_


def count(args: Mapping[str, str], name: str, *, default: int | None = None, most: int = MAX_COUNT) -> int | None:
    """A whole number ≥ 1 (ASCII digits, at most `most`); absent is `default`."""
    value = text(args, name)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise QueryError(f"{name}: {value[:40]!r} is not a whole number of at least 1")
    if len(value.lstrip("0")) > len(str(most)) or int(value) > most:
        raise QueryError(f"{name}: {value[:40]} is more than {most}")
    return int(value)


def images(args: Mapping[str, str], name: str = "images") -> int:
    """Images per request (the token leaderboard's `images`): a whole number from 0 to
    MAX_IMAGES (`llmload run --images`' bound); absent is 0 (text only)."""
    value = text(args, name)
    if value is None:
        return 0
    if not (value.isascii() and value.isdigit()):
        raise QueryError(f"{name}: {value[:40]!r} is not a number of images per request (0 to {MAX_IMAGES})")
    if len(value.lstrip("0")) > len(str(MAX_IMAGES)) or int(value) > MAX_IMAGES:
        raise QueryError(f"{name}: {value[:40]} is more than {MAX_IMAGES} images per request")
    return int(value)


RANKS = {"tok_s": "total tok/s", "cost": "cost per 1M output tokens"}
"""What the token leaderboard ranks by (`rank`): the first is the default."""


def rank(args: Mapping[str, str], name: str = "rank") -> str:
    """The token leaderboard's `rank`: one of RANKS; absent is total tok/s ("tok_s")."""
    value = text(args, name)
    if value is None:
        return next(iter(RANKS))
    if value not in RANKS:
        raise QueryError(f"{name}: {value[:40]!r} is none of {', '.join(RANKS)}")
    return value


def price(args: Mapping[str, str], name: str = "price_per_hour") -> float | None:
    """A price per hour in USD (the calculator's `price_per_hour`): above 0, below 1,000,000
    (`parse_price`); absent is None."""
    value = text(args, name)
    if value is None:
        return None
    if len(value) > 40:
        raise QueryError(f"{name}: {value[:40]!r}... is not a price per hour (a number of USD, e.g. 2.5)")
    try:
        return parse_price(value, f"{name}:")
    except ValueError as exc:
        raise QueryError(str(exc)) from None


def run_id(value: str, name: str = "run") -> str:
    """A run's id as the store makes them (16 lower-case hex digits)."""
    if not RUN_ID.match(value or ""):
        raise QueryError(f"{name}: {value[:40]!r} is not a run id (16 hex digits)")
    return value


def _day(args: Mapping[str, str], name: str) -> str | None:
    value = text(args, name)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
    except ValueError:
        raise QueryError(f"{name}: {value[:40]!r} is not a date (YYYY-MM-DD or an ISO 8601 time)") from None
    return parsed.isoformat()


def run_filter(args: Mapping[str, str]) -> RunFilter:
    """The runs filter of /runs and /api/runs: model, engine, version, hardware,
    provenance, since, until."""
    provenance = text(args, "provenance")
    if provenance is not None and provenance not in PROVENANCES:
        raise QueryError(f"provenance: {provenance[:40]!r} is none of {', '.join(PROVENANCES)}")
    return RunFilter(model=text(args, "model"), engine=text(args, "engine"),
                     engine_version=text(args, "version"), hardware=text(args, "hardware"),
                     provenance=provenance, since=_day(args, "since"), until=_day(args, "until"))


def board_filter(args: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """The leaderboard's optional filters: `hardware` (a run's hardware name, as /hardware
    lists it), `version` (its engine's version), each one line of text, and `endpoint` (one
    of ENDPOINTS); else None."""
    endpoint = text(args, "endpoint")
    if endpoint is not None and endpoint not in ENDPOINTS:
        raise QueryError(f"endpoint: {endpoint[:40]!r} is none of {', '.join(ENDPOINTS)}")
    return text(args, "hardware"), text(args, "version"), endpoint
