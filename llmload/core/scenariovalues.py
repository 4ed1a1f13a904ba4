"""The value parsers of a scenario: one per `Scenario` field, turning what a file or a flag
says ("16K", "30s", "0,16K,32K", "yes", "gpu=RTX 3090,vram_gb=24") into the field's value.

Pure. Each parser raises ValueError with the problem; `llmload.core.scenario` adds the
source and the key (`ScenarioError`). The keys of `PARSERS` are the valid scenario keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from llmload.core.capacity.protocols import PROTOCOLS
from llmload.core.units import parse_duration, parse_int_list, parse_pairs, parse_token_list, parse_tokens
from llmload.core.traffic.cancels import parse_cancel_after, parse_cancel_fraction
from llmload.core.traffic.dataset import parse_dataset_spec
from llmload.core.traffic.schedule import parse_schedule, parse_users_ramp
from llmload.core.traffic.lengths import parse_lengths
from llmload.core.traffic.traceshape import parse_sample
from llmload.core.figures.cost import parse_price
from llmload.core.traffic.workloads import OVER_CONTEXT, WORKLOADS, parse_arrivals, parse_think_time

ENDPOINTS = tuple(PROTOCOLS)
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected text, got {value!r}")
    return str(value).strip()


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    return _text(value) or None


def _nonempty_text(value: Any) -> str:
    text = _text(value)
    if not text:
        raise ValueError("must not be empty")
    return text


def _host(value: Any) -> str | None:
    host = _optional_text(value)
    if host is None:
        return None
    if not host.startswith(("http://", "https://")):
        raise ValueError(f"host {host!r} must start with http:// or https://")
    if "@" in host.split("//", 1)[1].split("/", 1)[0]:
        # user:password@host would put a secret into results.json
        raise ValueError("host must not contain credentials; use --api-key or the environment")
    try:
        parts = urlsplit(host)
    except ValueError:
        raise ValueError(f"host {host!r} is not a URL") from None
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"host {host!r}: the port must be a number from 1 to 65535")
    if not parts.hostname:
        raise ValueError(f"host {host!r} names no server")
    return host.rstrip("/")


def parse_bind(value: str) -> tuple[str, int]:
    """`--master-bind HOST:PORT` (or `:PORT`) as (host, port); "" host = every interface,
    port 0 = any free port. Raises ValueError with the problem."""
    bind_host, colon, port = value.strip().rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} must be HOST:PORT, the port a number from 0 to 65535")
    return bind_host.strip("[]"), int(port)


MIN_WINDOW_S = 1.0
"""The shortest decode window measured: shorter, a window holds little but the users' first
requests on their way (at 0.001 s no token arrives and the cell read "saturated" at
0 tok/s), so it is refused before anything runs."""


def _window(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds < MIN_WINDOW_S:
        raise ValueError(f"a window of {seconds:g} s is too short to measure: at least {MIN_WINDOW_S:g} s")
    return seconds


def _endpoint(value: Any) -> str:
    endpoint = _text(value).lower()
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint {value!r} must be one of {', '.join(ENDPOINTS)}")
    return endpoint


def _tokens_at_least_1(value: Any) -> int:
    n = parse_tokens(value)
    if n < 1:
        raise ValueError(f"{value!r} must be at least 1 token")
    return n


def _sample(value: Any) -> str | None:
    """`--sample` as given ("4", "0.25"), checked (`traceshape.parse_sample`); None: all."""
    if value is None or value == "":
        return None
    parse_sample(value)
    return str(value)


def _lengths(value: Any) -> str | None:
    """A length distribution (`lengths.parse_lengths`) in its shortest form; None: not given."""
    if value is None or value == "":
        return None
    return parse_lengths(str(value)).label


def _dataset(value: Any) -> str | None:
    """A dataset SPEC (`dataset.parse_dataset_spec`) as given; None: none."""
    if value is None or value == "":
        return None
    parse_dataset_spec(str(value))
    return str(value)


def _optional_tokens(value: Any) -> int | None:
    return None if value is None or value == "" else _tokens_at_least_1(value)


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, float):
            raise ValueError(f"invalid integer {value!r}")
        values = parse_int_list([value], minimum=minimum)
        if maximum is not None and values[0] > maximum:
            raise ValueError(f"{values[0]:,} is more than {maximum:,}")
        return values[0]

    return parse


def _workers(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return _int_at_least(0, 256)(value)
    except ValueError as exc:
        raise ValueError(f"{exc} (a number of processes, or auto)") from None


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _nonempty_list(value: Any) -> tuple[int, ...]:
    levels = tuple(parse_int_list(value, minimum=1))
    if not levels:
        raise ValueError("needs at least one concurrency level")
    return levels


def _number_or_text(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _facts(value: Any) -> dict[str, Any] | None:
    """A flat mapping of name -> text or number ("k=v,k=v" on the command line)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = {k: _number_or_text(v) for k, v in parse_pairs(value)}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of name: value, got {value!r}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list, tuple)) or v is None:
            raise ValueError(f"{k!r}: expected a name and a plain value, got {v!r}")
        out[k] = v
    return out


def _energy(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    text = _text(value).lower()
    if text in ("auto", "on", "off"):
        return text
    if text in _TRUE | _FALSE:
        return "on" if text in _TRUE else "off"
    raise ValueError(f"energy {value!r} must be auto, on or off")


def _slo(value: Any) -> dict[str, float] | None:
    from llmload.core.figures.slo import parse_slo
    return parse_slo(value)


MAX_IMAGES = 64
"""The most images one request may carry."""


def _image_counts(value: Any) -> tuple[int, ...]:
    """Images per request: one count or several ("0,1,4"), each 0..MAX_IMAGES, sorted; ()
    when every count is 0 (no images)."""
    counts = sorted(set(parse_int_list(value if isinstance(value, (str, list, tuple)) else [value], minimum=0)))
    if counts and counts[-1] > MAX_IMAGES:
        raise ValueError(f"{counts[-1]:,} is more than {MAX_IMAGES}")
    return tuple(counts) if any(counts) else ()


def _token_tuple(value: Any) -> tuple[int, ...]:
    return tuple(parse_token_list(value))


def _choice(value: Any, what: str, choices: tuple[str, ...]) -> str:
    text = _text(value).strip().lower()
    if text not in choices:
        raise ValueError(f"{what} {value!r} must be one of {', '.join(choices)}")
    return text


def _nonempty_tokens(value: Any, what: str) -> tuple[int, ...]:
    values = tuple(parse_token_list(value))
    if not values:
        raise ValueError(f"needs at least one {what} length")
    return values


def _positive_number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} must be a number greater than 0")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} must be a number greater than 0") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{value!r} must be a number greater than 0")
    return number


def _rates(value: Any) -> tuple[float, ...]:
    """Requests per second: "1,2,4.5" or a YAML list; each greater than 0."""
    items = [v for v in (value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple))
                         else [value]) if not (isinstance(v, str) and not v.strip())]
    if not items:
        raise ValueError("needs at least one rate (requests/s)")
    out = []
    for item in items:
        try:
            out.append(_positive_number(item.strip() if isinstance(item, str) else item))
        except ValueError:
            raise ValueError(f"rate {item!r} must be requests per second greater than 0") from None
    return tuple(out)


def _image_size(value: Any) -> str:
    from llmload.core.traffic.images import parse_size
    w, h = parse_size(_text(value))
    return f"{w}x{h}"


PARSERS: dict[str, Callable[[Any], Any]] = {
    "name": _nonempty_text,
    "description": lambda v: "" if v is None else _text(v),
    "host": _host,
    "sim_profile": _nonempty_text,
    "model": _optional_text,
    "endpoint": _endpoint,
    "contexts": _token_tuple,
    "prefill_contexts": _token_tuple,
    "concurrency": _nonempty_list,
    "duration_s": _window,
    "slice_s": lambda v: None if v is None or v == "" else parse_duration(v),
    "max_tokens": _tokens_at_least_1,
    "kv_cache_tokens": _optional_tokens,
    "warmup": _bool,
    "prefill_repeats": _int_at_least(1),
    "request_timeout_s": parse_duration,
    "launch_command": _optional_text,
    "workers": _workers,
    "server_hardware": lambda v: _facts(v),
    "server_info": lambda v: _facts(v),
    "slo": lambda v: _slo(v),
    "slo_search": _bool,
    "energy": lambda v: _energy(v),
    "workload": lambda v: _choice(v, "workload", WORKLOADS),
    "system_prompt_tokens": lambda v: _nonempty_tokens(v, "system prompt"),
    "turns": _int_at_least(1, 10_000),
    "turn_tokens": _tokens_at_least_1,
    "think_time": lambda v: str(parse_think_time(v)),
    "rates": _rates,
    "rate_schedule": lambda v: None if v is None or v == "" else parse_schedule(str(v)).text,
    "users_schedule": lambda v: None if v is None or v == "" else parse_users_ramp(str(v)).text,
    "arrivals": parse_arrivals,
    "prompt_tokens": _lengths,
    "output_tokens": _lengths,
    "seed": _int_at_least(0),
    "cancel": parse_cancel_fraction,
    "cancel_after": lambda v: None if v is None or v == "" else parse_cancel_after(v).label,
    "price_per_hour": lambda v: None if v is None else parse_price(v, "price_per_hour"),
    "repeat": _int_at_least(1, 1000),
    "repeat_cooldown_s": lambda v: 0.0 if v in (None, "", 0, "0", "0s") else parse_duration(v),
    "same_prompts": _bool,
    "until_ci": lambda v: None if v is None or v == "" else _until_ci(v),
    "dataset": _dataset,
    "output_length": lambda v: _choice(v, "output_length", ("exact", "natural")),
    "dataset_images": _bool,
    "max_in_flight": _int_at_least(1, 100_000),
    "trace": _optional_text,
    "speedup": _positive_number,
    "drain_s": lambda v: None if v is None or v == "" else parse_duration(v),
    "over_context": lambda v: _choice(v, "over_context", OVER_CONTEXT),
    "sample": lambda v: _sample(v),
    "length_scale": _positive_number,
    "max_prompt_tokens": _optional_tokens,
    "batch_size": lambda v: None if v is None or v == "" else _int_at_least(1, 4096)(v),
    "documents": lambda v: None if v is None or v == "" else _int_at_least(1, 4096)(v),
    "images": _image_counts,
    "image_size": _image_size,
    "image_dir": _optional_text,
}



def _until_ci(value: Any) -> float:
    """--until-ci PCT: a half-width in percent of the figure, above 0 and below 100."""
    pct = _positive_number(str(value).rstrip("%"))
    if not 0 < pct < 100:
        raise ValueError(f"until_ci must be a percentage above 0 and below 100, got {value!r}")
    return float(pct)
