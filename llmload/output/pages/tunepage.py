"""`llmload tune`'s pages: tune.md (and the terminal) and tune.html, from tune.json's document
(`llmload.matrix.tune`): one row per setting (status, the objective with its interval, the
twin's prediction, the trade-off figures, the server's start), the Pareto front, the
trade-off chart (HTML), and last the answer line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from markupsafe import Markup

from llmload.output.pages.templating import render_template

TUNE_PAGE = "tune.md"
TUNE_HTML = "tune.html"


def _num(value, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.1f}{(' ' + unit) if unit else ''}"


def objective_text(row: Mapping, unit: str) -> str:
    value = row.get("objective")
    if value is None:
        return "—"
    low, high = row.get("objective_ci_low"), row.get("objective_ci_high")
    band = f" ±{(high - low) / 2:,.1f}" if low is not None and high is not None else ""
    return f"{value:,.1f}{band} {unit}"


def predicted_text(row: Mapping, unit: str) -> str:
    if row.get("twin_from") is None:
        return "—"
    return f"{_num(row.get('predicted'), unit)} (twin of {row['twin_from']})" if row.get("predicted") is not None \
        else f"none counts (twin of {row['twin_from']})"


def table_rows(doc: Mapping) -> list[dict[str, str]]:
    unit = doc["unit"]
    out = []
    for r in doc["settings"]:
        out.append({
            "setting": r["label"], "status": r["status"].replace("_", " "),
            "objective": objective_text(r, unit), "predicted": predicted_text(r, unit),
            "total": _num(r.get("total_tok_s")), "per_user": _num(r.get("per_request_tok_s")),
            "front": "yes" if r.get("pareto") else "",
            "ready": "—" if r.get("ready_s") is None else f"{r['ready_s']:.1f} s",
            "note": ((r.get("message") or "").splitlines() or [""])[0],
        })
    return out


def page_lines(doc: Mapping, rows: list[dict[str, str]] | None = None) -> list[str]:
    """tune.md (and the terminal): the table, the front, then the answer (`rows`: the
    table's, when the caller has them)."""
    search = doc.get("search", "grid")
    slo = ", meeting the SLO" if doc.get("slo") else ""
    lines = ["", f"Tune: {doc['objective']} ({doc['objective_means']}{slo}); search {search}: "
                 f"{doc['measured']} of {len(doc['settings'])} settings measured", "",
             "| setting | status | objective | twin predicted | total tok/s | per-request tok/s | Pareto | "
             "server ready | note |", "|---|---|---|---|---|---|---|---|---|"]
    for t in rows if rows is not None else table_rows(doc):
        lines.append(f"| {t['setting']} | {t['status']} | {t['objective']} | {t['predicted']} | {t['total']} | "
                     f"{t['per_user']} | {t['front']} | {t['ready']} | {t['note']} |")
    front = [r["label"] for r in doc["settings"] if r.get("pareto")]
    if front:
        lines += ["", "Pareto front (per-request against total tok/s): " + ", ".join(front)]
    lines += ["", doc["answer"]]
    return lines


def write_pages(out: Path, doc: Mapping) -> None:
    from llmload.output.pages.charts.tune import tradeoff_chart
    rows = table_rows(doc)
    lines = page_lines(doc, rows)
    (out / TUNE_PAGE).write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    chart = tradeoff_chart(doc["settings"])
    html = render_template("tune.html.j2", doc=doc, rows=rows, heading=lines[1],
                           chart=chart, chart_svg=Markup(chart.svg) if chart else None)
    (out / TUNE_HTML).write_text(html, encoding="utf-8")
