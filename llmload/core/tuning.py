"""The settings of a tune (`llmload tune`, issue 42's first part): the parameters' values as
the user writes them, every combination of them, and the server's command line for one.

- `parse_param("seqs=8,16,32")` → ("seqs", ("8", "16", "32")); a range `lo..hi` steps by 1,
  `lo..hi*k` multiplies by k (`seqs=8..64*2` → 8, 16, 32, 64), `lo..hi+k` adds k.
- `settings(params)`: every combination, the first parameter slowest, each a tuple of
  (name, value) in the parameters' order.
- `render(template, setting, port)`: the command line with each `{name}` replaced and
  `{port}` the port it must listen on; a field the parameters do not name, or a template
  without `{port}`, is a one-line `TuneError`.

Pure: no I/O.
"""

from __future__ import annotations

import itertools
import re
import shlex
import string
from collections.abc import Sequence

NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
MAX_SETTINGS = 1000
"""The most combinations a tune takes (a typo in a range should not plan a million servers)."""

Setting = tuple[tuple[str, str], ...]


class TuneError(ValueError):
    """A bad --param or --serve; the message is one line."""


def parse_param(spec: str) -> tuple[str, tuple[str, ...]]:
    """NAME=V1,V2,... or NAME=LO..HI[*K|+K] → (name, values as written)."""
    name, sep, values = spec.partition("=")
    name = name.strip()
    if not sep or not NAME.match(name):
        raise TuneError(f"--param {spec!r}: expected NAME=V1,V2,... (a lower-case name), e.g. seqs=8,16,32")
    if name == "port":
        raise TuneError("--param port: {port} is the free port llmload picks for each server")
    found = _range(name, values.strip()) if ".." in values else tuple(v.strip() for v in values.split(","))
    if not found or any(not v for v in found):
        raise TuneError(f"--param {spec!r}: an empty value")
    if len(set(found)) != len(found):
        raise TuneError(f"--param {spec!r}: a value given twice")
    return name, found


def _range(name: str, text: str) -> tuple[str, ...]:
    m = re.fullmatch(r"(-?\d+)\.\.(-?\d+)(?:([*+])(\d+))?", text)
    if m is None:
        raise TuneError(f"--param {name}={text}: a range is LO..HI, LO..HI*K or LO..HI+K (integers)")
    lo, hi, op, k = int(m[1]), int(m[2]), m[3] or "+", int(m[4] or 1)
    if hi < lo or (op == "*" and (k < 2 or lo <= 0)) or (op == "+" and k < 1):
        raise TuneError(f"--param {name}={text}: the range never reaches {hi} from {lo}")
    out, v = [], lo
    while v <= hi:
        out.append(str(v))
        if len(out) > MAX_SETTINGS:
            raise TuneError(f"--param {name}={text}: more than {MAX_SETTINGS} values")
        v = v * k if op == "*" else v + k
    return tuple(out)


def settings(params: Sequence[tuple[str, tuple[str, ...]]]) -> list[Setting]:
    """Every combination of the parameters' values, the first parameter slowest."""
    names = [n for n, _ in params]
    if len(set(names)) != len(names):
        raise TuneError(f"--param {next(n for n in names if names.count(n) > 1)} is given twice")
    count = 1
    for _, values in params:
        count *= len(values)
    if count > MAX_SETTINGS:
        raise TuneError(f"{count:,} settings: at most {MAX_SETTINGS:,}")
    return [tuple(zip(names, combo)) for combo in itertools.product(*(v for _, v in params))]


def fields_of(template: str) -> set[str]:
    """The `{name}` fields of a --serve template."""
    try:
        return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise TuneError(f"--serve: {exc} (a literal brace is written {{{{ or }}}})") from None


def check_template(template: str, names: Sequence[str]) -> None:
    """The template names {port} and only the parameters' fields; every parameter is used."""
    found = fields_of(template)
    if "port" not in found:
        raise TuneError("--serve must say where the server listens: {port} (llmload picks a free port)")
    unknown = sorted(found - {"port", *names})
    if unknown:
        raise TuneError(f"--serve names {{{unknown[0]}}}, which no --param gives")
    unused = [n for n in names if n not in found]
    if unused:
        raise TuneError(f"--param {unused[0]} is not used by --serve (no {{{unused[0]}}} in it)")


def render(template: str, setting: Setting, port: int) -> list[str]:
    """The command line (argv) of one setting, listening on `port`."""
    check_template(template, [n for n, _ in setting])
    text = template.format(port=port, **dict(setting))
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise TuneError(f"--serve: {exc}") from None


def label(setting: Setting) -> str:
    """A setting as a short, path-safe name: seqs=8,batch=2048 → "seqs-8_batch-2048"."""
    parts = [f"{n}-{re.sub(r'[^A-Za-z0-9.]+', '.', v).strip('.') or 'x'}" for n, v in setting]
    return "_".join(parts) or "default"


# --------------------------------------------------------------------------- objectives

#: --objective: (what it reads, "max" or "min", unit).
OBJECTIVES = {
    "max-tok-s": ("the best total tok/s of a valid cell", "max", "tok/s"),
    "max-users": ("the most users (N) of a valid cell", "max", "users"),
    "max-rate": ("the highest achieved rate of a valid rate or replay cell", "max", "req/s"),
    "min-ttft-p99": ("the worst TTFT p99 over the valid cells", "min", "ms"),
    "min-e2e-p99": ("the worst end-to-end p99 over the valid cells", "min", "ms"),
}


def objective_value(objective: str, cells, slo=None) -> float | None:
    """A measured setting's objective from its run's cells: over the cells that are valid and
    (with an SLO) meet it (`slo.judge_cell`); None when no cell counts."""
    from llmload.core.figures.slo import judge_cell
    ok = [c for c in cells if c.status == "valid" and (not slo or judge_cell(c, slo).meets)]
    if objective == "max-tok-s":
        values = [c.total_tok_s for c in ok]
    elif objective == "max-users":
        values = [float(c.concurrency) for c in ok if c.phase in ("decode", "session")]
    elif objective == "max-rate":
        values = [c.traffic.achieved_rate_rps for c in ok if c.phase in ("rate", "replay")]
    elif objective == "min-ttft-p99":
        values = [c.ttft_p99_ms for c in ok]
    elif objective == "min-e2e-p99":
        values = [c.traffic.e2e_p99_ms for c in ok]
    else:
        raise TuneError(f"--objective {objective}: one of {', '.join(OBJECTIVES)}")
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    return max(values)


def ranked(objective: str, values: dict[str, float | None]) -> list[str]:
    """The settings (by label) that have a value, best first (ties by label)."""
    sign = -1.0 if OBJECTIVES[objective][1] == "max" else 1.0
    return sorted((k for k, v in values.items() if v is not None), key=lambda k: (sign * values[k], k))
