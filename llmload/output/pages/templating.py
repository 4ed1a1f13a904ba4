"""Jinja2 rendering of llmload's HTML pages (report, compare, the Locust companion page).

Templates live in `llmload/output/pages/templates/` (package data). Rules: autoescape is on for every
template, so a model name or an error message can never inject markup; a chart's SVG is
the only thing marked safe, and it comes from `llmload.output.pages.charts.kit` (matplotlib), not from the
results file. The pages are self-contained: styles inline, no script unless the page is
live, no external URL.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("llmload.output.pages", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
