"""Token counts and durations as people write them, and back.

Pure functions shared by the CLI and scenario files, so "16K" means the same everywhere.

Rules:
- Token suffixes are binary: "16K" = 16,384 and "1M" = 1,048,576 (case-insensitive), as
  context lengths are usually quoted. A decimal is allowed only when the result is a whole
  number of tokens ("1.5K" = 1,536; "1.3K" is rejected).
- A single token count may use thousands separators ("8,192"); inside a list the comma
  separates items, so "0,16K,32K" is three counts and separators are not allowed there.
- Durations are seconds unless suffixed: "30", "30s", "2m", "1.5m", "500ms", "1h"; they must
  be greater than zero.
- Absurd sizes are refused, not overflowed: a token count above MAX_TOKENS (2^40), an
  integer (concurrency) above MAX_INT, a duration above MAX_DURATION_S (7 days).
- Bad input raises ValueError with a one-line message that quotes the bad value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

MAX_TOKENS = 2 ** 40
MAX_INT = 1_000_000
MAX_DURATION_S = 7 * 24 * 3600.0
_TOKEN_SUFFIX = {"": 1, "k": 1024, "m": 1024 * 1024}
_DURATION_SUFFIX_S = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}

_TOKENS_RE = re.compile(r"^(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|\.\d+)\s*(?P<suffix>[kKmM]?)$")
_DURATION_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<suffix>ms|min|[smh]?)$", re.I)


def parse_tokens(s: str | int) -> int:
    """A token count: 8192, "8192", "8,192", "16K", "1m", "0". Never negative."""
    if isinstance(s, bool):
        raise ValueError(f"invalid token count {s!r}: expected a number like 8192 or 16K")
    if isinstance(s, int):
        if s < 0:
            raise ValueError(f"invalid token count {s!r}: must not be negative")
        if s > MAX_TOKENS:
            raise ValueError(f"invalid token count {s!r}: more than {MAX_TOKENS:,} tokens")
        return s
    if not isinstance(s, str):
        raise ValueError(f"invalid token count {s!r}: expected a number like 8192 or 16K")
    m = _TOKENS_RE.match(s.strip())
    if m is None:
        raise ValueError(f"invalid token count {s!r}: expected a number like 8192, 8,192 or 16K")
    num, suffix = m.group("num"), m.group("suffix").lower()
    value = float(num.replace(",", "")) * _TOKEN_SUFFIX[suffix]
    if not math.isfinite(value) or value > MAX_TOKENS:
        raise ValueError(f"invalid token count {s!r}: more than {MAX_TOKENS:,} tokens")
    if not value.is_integer():
        raise ValueError(f"invalid token count {s!r}: not a whole number of tokens")
    return int(value)


def _split_list(s: str | Iterable) -> list:
    if isinstance(s, str):
        return [part.strip() for part in s.split(",") if part.strip()]
    if isinstance(s, (int, float)):
        return [s]
    return list(s)


def parse_token_list(s: str | Iterable[str | int]) -> list[int]:
    """Comma-separated token counts ("0,16K,32K"), or a sequence of them; "" → []."""
    items = _split_list(s)
    return [parse_tokens(item) for item in items]


def parse_int_list(s: str | Iterable[str | int], *, minimum: int = 1) -> list[int]:
    """Comma-separated integers ("1,2,4"), or a sequence of them; each ≥ minimum."""
    out = []
    for item in _split_list(s):
        if isinstance(item, bool) or isinstance(item, float):
            raise ValueError(f"invalid integer {item!r} in {s!r}")
        try:
            value = int(str(item).strip())
        except ValueError:
            raise ValueError(f"invalid integer {item!r} in {s!r}") from None
        if value < minimum:
            raise ValueError(f"invalid integer {item!r} in {s!r}: must be at least {minimum}")
        if value > MAX_INT:
            raise ValueError(f"invalid integer {item!r} in {s!r}: more than {MAX_INT:,}")
        out.append(value)
    return out


def parse_duration(s: str | int | float) -> float:
    """A duration in seconds: 30, "30", "30s", "2m", "1.5m", "500ms", "1h". Must be > 0."""
    if isinstance(s, bool):
        raise ValueError(f"invalid duration {s!r}: expected e.g. 30s, 2m or 500ms")
    if isinstance(s, (int, float)):
        value = float(s)
    elif isinstance(s, str):
        m = _DURATION_RE.match(s.strip())
        if m is None:
            raise ValueError(f"invalid duration {s!r}: expected e.g. 30s, 2m or 500ms")
        value = float(m.group("num")) * _DURATION_SUFFIX_S[m.group("suffix").lower()]
    else:
        raise ValueError(f"invalid duration {s!r}: expected e.g. 30s, 2m or 500ms")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid duration {s!r}: must be greater than zero")
    if value > MAX_DURATION_S:
        raise ValueError(f"invalid duration {s!r}: more than 7 days")
    return value


def format_tokens(n: int) -> str:
    """16384 → "16K", 1048576 → "1M", 0 → "0", 1000 → "1,000", 8200 → "8,200"."""
    if n != 0 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024):,}M"
    if n != 0 and n % 1024 == 0:
        return f"{n // 1024:,}K"
    return f"{n:,}"


def format_duration_s(seconds: float, *, clock: bool = False) -> str:
    """A duration as people read it: 0.5 → "500 ms", 30 → "30 s", 150 → "2 min 30 s",
    3900 → "1 h 05 min"; with `clock`, as a clock shows it, in whole seconds: 150 → "2:30",
    from an hour on h:mm:ss (3900 → "1:05:00")."""
    if not clock and seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if not clock and seconds < 60:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    total_s = int(round(seconds))
    if total_s < 3600:
        minutes, secs = divmod(total_s, 60)
        if clock:
            return f"{minutes}:{secs:02d}"
        return f"{minutes} min" if secs == 0 else f"{minutes} min {secs:02d} s"
    hours, rest = divmod(total_s, 3600)
    if clock:
        return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{hours} h {rest // 60:02d} min"


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """`a=1, b=2` as [("a", "1"), ("b", "2")], names and values stripped; ValueError for an
    item without "=" (the caller says what the pairs were for)."""
    pairs = [item.partition("=") for item in text.split(",") if item.strip()]
    if any(not sep for _, sep, _ in pairs):
        raise ValueError(f"expected key=value pairs separated by commas, got {text!r}")
    return [(k.strip(), v.strip()) for k, _, v in pairs]
