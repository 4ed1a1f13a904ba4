"""The hub's work that grows with what it is asked, run by its workers (`llmload.hub.workers`)
off the loop that answers pages: a run's page (its report's charts, then its styles made
strict under the hub's bar), a comparison of two runs, and the calculator's prediction. Each
is `task(store, profiles, **arguments)`: whatever runs it passes the store and the offered
profiles of where it runs. What a task raises (LookupError for a run the store does not
hold, QueryError for a question it cannot answer) is raised in the request that asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llmload.hub import security
from llmload.hub.query import QueryError

if TYPE_CHECKING:
    from llmload.hub.store import Store
    from llmload.sim.profiles import Profile


def report_parts(html: str, bar: str) -> tuple[str, str]:
    """A report page (`llmload.output`'s) under the hub's bar, its styles made strict, and its
    Content-Security-Policy (the regular expressions over a page of megabytes: a task's work)."""
    html = html.replace("</head>", '<link rel="stylesheet" href="/static/bar.css">\n</head>', 1)
    return security.strict_styles(html.replace("<body>", "<body>\n" + bar, 1))


def _stored(store: Store, run: str):
    results = store.run(run)
    if results is None:
        raise LookupError(f"no run {run[:40]!r} in the store")
    return results


def priced(results, price_per_hour: float | None):
    """The run's results at `price_per_hour` (the hub's pricing of it, `llmload.hub.pricing`:
    its own price, else the hub's for its hardware) in its config's `price_per_hour`, where the
    page reads it ("What a token costs"); as they are where that is the price they hold."""
    from dataclasses import replace

    from llmload.core.figures.cost import PRICE_KEY
    if results.config.get(PRICE_KEY) == price_per_hour:
        return results
    config = {k: v for k, v in results.config.items() if k != PRICE_KEY}  # a price the hub does not take: none
    return replace(results, config=config if price_per_hour is None else {**config, PRICE_KEY: price_per_hour})


def report_html(store: Store, profiles: Mapping[str, Profile], *, run: str,
                price_per_hour: float | None = None) -> str:
    """The report page of stored run `run` (its `Page`, written by `llmload.output.pages.html`),
    at `price_per_hour` (`priced`)."""
    from llmload.output.pages.build import build_page
    from llmload.output.pages.html import page_html
    return page_html(build_page(priced(_stored(store, run), price_per_hour)))


def run_page(store: Store, profiles: Mapping[str, Profile], *, run: str, bar: str,
             price_per_hour: float | None = None) -> tuple[str, str]:
    """(stored run `run`'s page at `price_per_hour` under the hub's `bar`, its Content-Security-Policy)."""
    return report_parts(report_html(store, profiles, run=run, price_per_hour=price_per_hour), bar)


def comparison(store: Store, profiles: Mapping[str, Profile], *, a: str, b: str,
               bar: str | None = None) -> Any:
    """`llmload compare` of stored runs `a` (the reference) and `b`: its page under `bar`
    (page, Content-Security-Policy), or without a bar its JSON form."""
    from llmload.output.pages import comparepage
    from llmload.output.pages.compare import CompareError
    from llmload.output.pages.report import compare_runs
    try:
        compared = compare_runs([_stored(store, a), _stored(store, b)], [f"run {a}", f"run {b}"])
    except CompareError as exc:
        raise QueryError(str(exc)) from None
    return compared.to_dict() if bar is None else report_parts(comparepage.render_html(compared), bar)


def prediction(store: Store, profiles: Mapping[str, Profile], *, workload: str, **arguments: Any):
    """The calculator's answer (`calculator.calculate`, or `ratecalc.calculate_rate` for the
    rate workload)."""
    from llmload.hub.calculator import calculate
    from llmload.hub.ratecalc import calculate_rate
    calculators = {"matrix": calculate, "rate": calculate_rate}
    return calculators[workload](store, profiles=profiles, **arguments)


def warm() -> None:
    """What the first task would otherwise pay: matplotlib, its fonts, the twin's modules."""
    from llmload.output.pages.charts import report as charts  # noqa: F401  (matplotlib and the chart style)
    from llmload.output.pages.charts.kit import panels_figure, render_chart
    from llmload.twin import predict  # noqa: F401

    def draw():
        fig, (ax,) = panels_figure(2.0, 1.0)
        ax.plot([1, 2], [1, 2])
        ax.set_title("warm")
        return fig

    render_chart("warm", draw)
