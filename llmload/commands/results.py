"""`llmload report`, `compare` and `export`: commands on results directories already written."""

from __future__ import annotations

import sys

import click

from llmload.commands.common import Refused, echo
from llmload.core import exitcodes


@click.command()
@click.argument("results_dir", type=click.Path(exists=True))
@click.option("--recompute", is_flag=True,
              help="Derive every cell's figures and status again from the stored records (records/).")
@click.option("--allow-missing", is_flag=True,
              help="With --recompute: keep cells whose records file is missing as stored (else refused).")
@click.option("--price-per-hour", "price", metavar="USD",
              help="Price the run again: what the server's machine costs an hour (written into results.json).")
def report(results_dir: str, recompute: bool, allow_missing: bool, price: str | None) -> None:
    """Re-render report.md, report.html and measurements.csv from RESULTS_DIR/results.json alone;
    with --recompute, first derive every cell again from RESULTS_DIR/records/ and rewrite results.json;
    with --price-per-hour, first write that price into results.json."""
    from pathlib import Path

    from llmload.output.rundir.resultsfile import ResultsError, load_results
    from llmload.output.rundir.writer import write_document, write_renderings
    folder = Path(results_dir) if Path(results_dir).is_dir() else Path(results_dir).parent
    try:
        # A malformed file is refused here, in one line naming it and the field; what fails
        # after this is a bug of llmload's, not the file's, and is not reported as the file's.
        results = load_results(results_dir)
    except ResultsError as exc:
        raise Refused(str(exc)) from None
    priced = _pricing(price)
    try:
        if recompute:
            from llmload.output.rundir.recompute import recompute as derive
            from llmload.output.rundir.records import RecordsError
            from llmload.output.rundir.directory import RunDirError, lock
            try:
                held = lock(folder)  # never rewrite a run that is still writing
            except RunDirError as exc:
                raise Refused(str(exc)) from None
            from llmload.output.rundir.recompute import repeat_dirs
            rounds = repeat_dirs(folder) if not (folder / "records").is_dir() else []
            try:
                if rounds:  # a repeated run: each round from its records, then combined again
                    from llmload.core.scenario import Scenario
                    from llmload.matrix.repeats import combined
                    derived, n, missing = [], 0, []
                    for _, round_folder in rounds:
                        one, k, lost = derive(round_folder, allow_missing=allow_missing)
                        write_document(one, round_folder)
                        derived.append(load_results(round_folder))
                        n, missing = n + k, missing + lost
                    results = combined(derived, Scenario.from_dict(dict(results.config)))
                else:
                    results, n, missing = derive(folder, allow_missing=allow_missing)
                path = write_document(priced(results), folder)
            except (RecordsError, ResultsError) as exc:
                raise Refused(str(exc)) from None
            finally:
                held.release()
            where = f"the records of {len(rounds)} repeats" if rounds else folder / "records"
            echo(f"Recomputed {n} cell(s) from {where}")
            if missing:
                echo(f"Kept {len(missing)} cell(s) as stored, their records missing: {', '.join(missing)}")
        elif price is not None:
            from llmload.output.rundir.directory import RunDirError, lock
            try:
                held = lock(folder)  # never rewrite a run that is still writing
            except RunDirError as exc:
                raise Refused(str(exc)) from None
            try:
                path = write_document(priced(results), folder)
            finally:
                held.release()
        else:
            path = write_renderings(results, folder)
    except OSError as exc:
        raise Refused(f"cannot write into {folder}: {exc.strerror or exc}") from None
    echo(f"Report: {path}")
    echo(f"HTML report: {path.with_name('report.html')}")


def _pricing(price: str | None):
    """The run's results as `report --price-per-hour` rewrites them (its price in the config);
    a price that is not a positive number is bad input (one line)."""
    import dataclasses

    from llmload.core.figures.cost import PRICE_KEY, parse_price
    if price is None:
        return lambda results: results
    try:
        value = parse_price(price, "--price-per-hour")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return lambda results: dataclasses.replace(results, config={**results.config, PRICE_KEY: value})


@click.command()
@click.argument("results_dirs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Where to write the compare page (default: compare.html here; with --json: none).")
@click.option("--no-html", is_flag=True, help="Do not write the compare page.")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True,
              help="Confidence of the verdicts (better / worse / no difference).")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(0, min_open=True), metavar="PCT",
              help="Exit 3 when some cell of a run is worse than A's, with confidence, by more than PCT %.")
def compare(results_dirs, as_json, html_path, no_html, confidence, fail_pct) -> None:
    """Compare results directories: DIR_A DIR_B [DIR_C ...] (ratios are each run / A;
    verdicts where both cells carry intervals, docs/figures.md)."""
    from llmload.output.pages.compare import CompareError
    from llmload.output.rundir.comparedirs import compare_dirs
    try:
        if no_html or (as_json and not html_path):
            html_path = None  # --json alone prints JSON and nothing else
        else:
            html_path = html_path or "compare.html"
        text, page, comparison = compare_dirs(list(results_dirs), as_json=as_json, html_path=html_path,
                                              confidence=confidence)
    except CompareError as exc:  # also a results.json the loader refused
        raise Refused(str(exc)) from None
    except OSError as exc:
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        raise Refused(f"cannot write the compare page{where}: {exc.strerror or exc}") from None
    echo(text)
    if page and not as_json:
        echo(f"\nCompare page: {page}")
    if fail_pct is not None:
        worse = comparison.regressions(fail_pct)
        for cell, figure, run, v in worse:
            click.echo(f"regression: {run} {cell} {figure}: {v.text()}", err=True)
        if worse:
            sys.exit(exitcodes.REGRESSION)


@click.command()
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet", "jsonl"]), default="csv", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="File to write (default: standard output).")
@click.option("--allow-missing", is_flag=True,
              help="Export what is there when some cells' records files are missing (else refused).")
@click.option("--with-origin", is_flag=True,
              help="Keep the server's address and the paths of the files the run read in the rows' text "
                   "(by default: 'the server', file names only).")
def export(results_dir: str, fmt: str, output: str | None, allow_missing: bool, with_origin: bool) -> None:
    """Every request of every cell of RESULTS_DIR, one row each (from RESULTS_DIR/records/)."""
    import io

    from llmload.output.rundir.recompute import export_records
    from llmload.output.rundir.records import RecordsError
    from llmload.output.rundir.resultsfile import ResultsError
    try:
        # Built in memory first: a refused export leaves no file, and no half of one.
        buffer = io.BytesIO()
        n = export_records(results_dir, fmt, buffer, allow_missing=allow_missing, with_origin=with_origin)
    except (RecordsError, ResultsError) as exc:
        raise Refused(str(exc)) from None
    try:
        if output:
            with open(output, "wb") as f:
                f.write(buffer.getvalue())
            click.echo(f"{n} request(s) written to {output}", err=True)
        else:
            sys.stdout.buffer.write(buffer.getvalue())
            sys.stdout.buffer.flush()
    except OSError as exc:
        raise Refused(f"cannot write {output or 'standard output'}: {exc.strerror or exc}") from None
