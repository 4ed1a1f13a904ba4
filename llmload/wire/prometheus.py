"""Prometheus text exposition, parsed. Pure."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r'^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_prometheus(text: str) -> Samples:
    """Prometheus text exposition -> {metric name: [(labels, value), ...]}."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def metric_sum(samples: Samples, *names: str) -> float | None:
    """Sum of a metric over its label sets (data-parallel engines), first name found."""
    for name in names:
        if name in samples:
            return sum(v for _, v in samples[name])
    return None
