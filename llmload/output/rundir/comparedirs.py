"""`llmload compare`'s files: the results directories read, compared, and the page written
(`compare_dirs`); the comparison is `llmload.output.pages.compare`'s, its renderings
`llmload.output.pages.comparepage`'s."""

from __future__ import annotations

import json

from llmload.output.pages.compare import CompareError, Comparison
from llmload.output.pages.comparepage import render_html, render_text
from llmload.output.pages.report import compare_runs


def compare_dirs(paths: list[str], *, as_json: bool = False, html_path: str | None = None,
                 confidence: float | None = None) -> tuple[str, str | None, "Comparison"]:
    """What `llmload compare` does: load each results directory, compare, and return the
    text to print (aligned tables, or JSON), the path of the page written (or None) and the
    comparison. Raises CompareError with one line for unreadable results."""
    from pathlib import Path

    from llmload.output.rundir.resultsfile import ResultsError, load_results
    from llmload.output.rundir.writer import as_written, atomic_write_text

    try:
        # As every page llmload writes: secrets masked (a file from an older llmload may hold a key).
        runs = [as_written(load_results(p), source=p) for p in paths]
    except ResultsError as exc:
        raise CompareError(str(exc)) from None
    comparison = compare_runs(runs, paths, **({} if confidence is None else {"confidence": confidence}))
    text = (json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False) if as_json
            else render_text(comparison))
    if html_path is None:
        return text, None, comparison
    page = Path(html_path)
    if page.parent and not page.parent.exists():
        page.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(page, render_html(comparison))
    return text, str(page), comparison
