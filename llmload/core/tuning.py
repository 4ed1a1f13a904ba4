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


def with_port(template: str, engine_launch=None) -> str:
    """The template with `{port}`: as given, or with the engine's port flag added (the engine
    table's `Launch.port_flag`) when the template has none and names a known engine."""
    if "port" in fields_of(template) or engine_launch is None:
        return template
    return f"{template} {engine_launch.port_flag} {{port}}"


def twin_fields(template: str, names: Sequence[str], engine_launch=None) -> dict[str, str]:
    """Which parameters the twin models: name → the profile field its flag sets (the engine
    table's `Launch.tuned`), read from the word before `{name}` (`--max-num-seqs {seqs}`),
    the word itself (`--max-num-seqs={seqs}`), or the simulator's `--set KEY={name}`."""
    if engine_launch is None:
        return {}
    tuned = dict(engine_launch.tuned)
    try:
        words = shlex.split(template)
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        for name in names:
            if "{" + name + "}" not in word:
                continue
            key, eq, value = word.partition("=")
            flags = ([f"{words[i - 1]} {key}", key] if eq and value == "{" + name + "}" and i > 0 else []) + \
                ([words[i - 1]] if word == "{" + name + "}" and i > 0 else [])
            field = next((tuned[f] for f in flags if f in tuned), None)
            if field is not None:
                out[name] = field
    return out


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


#: --objective → (the phases whose cells count, how a cell gives the figure, the interval's key).
_READ = {
    "max-tok-s": (None, lambda c: c.total_tok_s, "total_tok_s"),
    "max-users": (("decode", "session"), lambda c: float(c.concurrency), None),
    "max-rate": (("rate", "replay"), lambda c: c.traffic.achieved_rate_rps, "achieved_rate_rps"),
    "min-ttft-p99": (None, lambda c: c.ttft_p99_ms, "ttft_p99_ms"),
    "min-e2e-p99": (None, lambda c: c.traffic.e2e_p99_ms, "e2e_p99_ms"),
}


def objective_pick(objective: str, cells, slo=None):
    """A measured setting's objective from its run's cells: over the cells that are valid and
    (with an SLO) meet it (`slo.judge_cell`), the highest value (for min-* objectives: the
    worst cell, the one a user meets). Returns (value, the cell, the interval's key), or
    (None, None, None) when no cell counts."""
    from llmload.core.figures.slo import judge_cell
    if objective not in _READ:
        raise TuneError(f"--objective {objective}: one of {', '.join(OBJECTIVES)}")
    phases, read, key = _READ[objective]
    found = [(float(read(c)), c) for c in cells
             if c.status == "valid" and (phases is None or c.phase in phases)
             and (not slo or judge_cell(c, slo).meets) and read(c) is not None]
    if not found:
        return None, None, None
    value, cell = max(found, key=lambda vc: vc[0])
    return value, cell, key


def why_none(objective: str, cells, slo=None) -> str:
    """Why no cell of a measured setting counts for the objective: the cells' statuses, and
    what the valid ones failed of the SLO."""
    from collections import Counter

    from llmload.core.figures.slo import judge_cell
    phases = _READ[objective][0]
    mine = [c for c in cells if phases is None or c.phase in phases]
    if not mine:
        return f"no {' or '.join(phases or ())} cell for {objective}"
    statuses = Counter(c.status for c in mine if c.status != "valid")
    failed = Counter(f for c in mine if c.status == "valid" and slo for f in judge_cell(c, slo).failed)
    parts = [f"{n} {s.replace('_', ' ')}" for s, n in sorted(statuses.items())]
    parts += [f"{n} valid failing the SLO on {f}" for f, n in sorted(failed.items())]
    return "no cell counts: " + (", ".join(parts) or "no figure")


def objective_value(objective: str, cells, slo=None) -> float | None:
    """The objective's value (`objective_pick`), None when no cell counts."""
    return objective_pick(objective, cells, slo)[0]


def objective_interval(cell, key: str | None) -> tuple[float | None, float | None]:
    """The interval (with repeats or sub-windows) of the figure `key` of the cell that gives
    the objective (`objective_pick`'s cell and key), or (None, None)."""
    if cell is None or key is None:
        return None, None
    return getattr(cell.intervals, f"{key}_ci_low"), getattr(cell.intervals, f"{key}_ci_high")


def tradeoff_point(cells, slo=None) -> tuple[float | None, float | None]:
    """(total tok/s, per-request tok/s) of the setting's best valid cell by total tok/s
    (meeting the SLO where one is given): its point on the trade-off chart."""
    _, cell, _ = objective_pick("max-tok-s", cells, slo)
    return (None, None) if cell is None else (cell.total_tok_s, cell.per_request_tok_s)


def pareto(points: dict[str, tuple[float, float]]) -> set[str]:
    """The settings no other beats on both total and per-request tok/s (higher is better)."""
    front = set()
    for k, (t, u) in points.items():
        if not any((t2 >= t and u2 >= u) and (t2 > t or u2 > u) for k2, (t2, u2) in points.items() if k2 != k):
            front.add(k)
    return front


def ranked(objective: str, values: dict[str, float | None]) -> list[str]:
    """The settings (by label) that have a value, best first (ties by label)."""
    sign = -1.0 if OBJECTIVES[objective][1] == "max" else 1.0
    return sorted((k for k, v in values.items() if v is not None), key=lambda k: (sign * values[k], k))


# --------------------------------------------------------------------------- search twin


def within(objective: str, value: float, best: float, margin: float) -> bool:
    """Whether `value` is within `margin` (a fraction) of `best`, or better: a prediction
    that close cannot rule a setting out."""
    if OBJECTIVES[objective][1] == "max":
        return value >= best * (1.0 - margin) if best >= 0 else value >= best * (1.0 + margin)
    return value <= best * (1.0 + margin) if best >= 0 else value <= best * (1.0 - margin)


def gap_pct(objective: str, value: float, best: float) -> float:
    """How much worse `value` is than `best`, in percent of `best` (positive: worse)."""
    if best == 0:
        return 0.0
    worse = (best - value) if OBJECTIVES[objective][1] == "max" else (value - best)
    return 100.0 * worse / abs(best)


def loosened(slo: dict[str, float] | None, margin: float) -> dict[str, float] | None:
    """The SLO with every bound moved by `margin` in the setting's favour: a prediction that
    misses the SLO by less cannot rule the setting out."""
    if not slo:
        return slo
    return {k: (v * (1.0 - margin) if k == "per_request_tok_s" else v * (1.0 + margin)) for k, v in slo.items()}


def group_of(setting: Setting, modelled: Sequence[str]) -> Setting:
    """The setting's values of the parameters the twin does not model: settings of one group
    differ only where the twin models them, so one twin predicts them all."""
    return tuple((n, v) for n, v in setting if n not in modelled)


def first_settings(grid: Sequence[Setting], modelled: Sequence[str]) -> list[int]:
    """The settings `--search twin` measures first (indices into the grid): the middle one of
    each group, so each group's twin sits between its settings' ends."""
    groups: dict[Setting, list[int]] = {}
    for i, setting in enumerate(grid):
        groups.setdefault(group_of(setting, modelled), []).append(i)
    return [members[(len(members) - 1) // 2] for members in groups.values()]


def nearest(i: int, grid: Sequence[Setting], measured: Sequence[int], modelled: Sequence[str]) -> int | None:
    """The measured setting of i's group nearest to it in the grid (its twin predicts i)."""
    mine = group_of(grid[i], modelled)
    same = [j for j in measured if group_of(grid[j], modelled) == mine]
    return min(same, key=lambda j: (abs(j - i), j)) if same else None
