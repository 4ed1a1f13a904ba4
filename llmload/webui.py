"""The "LLM" tab of the Locust web UI, and the LLM table as CSV.

Uses Locust's documented extension points: `extended_tabs` / `extended_tables` in the
template arguments and an `extended_stats` entry added to the /stats/requests JSON that
the UI polls. The figures are `live.LiveStats` rows (on the master: merged from workers).
"""

from __future__ import annotations

import csv
import io
import json

from flask import make_response, request

from llmload.clock import now
from llmload.live import LiveStats

TAB_KEY = "llm"

_COLUMNS = [("figure", "LLM figure"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"),
            ("count", "samples")]


def ui_rows(stats: LiveStats, users: int) -> list[dict]:
    t = now()
    rows = [{k: _fmt(v) for k, v in row.items()} for row in stats.rows(t)]
    s = stats.summary(t, users=users)
    extra = [("output tok/s (mean)", s["output_tok_s_mean"]),
             ("output tok/s (last 10 s, finished requests)", s["output_tok_s_recent"]),
             ("output tokens", s["output_tokens"]), ("requests", s["requests"]),
             ("failed requests", s["failures"]), ("requests in flight (users)", s["in_flight"])]
    rows += [{"figure": name, "p50": _fmt(value), "p90": "", "p99": "", "count": ""} for name, value in extra]
    for row in rows:
        row["safe_name"] = row["figure"]
    return rows


def _fmt(v):
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return "—" if v is None else v


def live_csv(stats: LiveStats, now_s: float, users: int = 0) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["figure", "p50", "p90", "p99", "count"])
    for row in stats.rows(now_s):
        w.writerow([row["figure"], row["p50"], row["p90"], row["p99"], row["count"]])
    for k, v in stats.summary(now_s, users=users).items():
        w.writerow([k, v, "", "", ""])
    return out.getvalue()


def extend_web_ui(environment, web_ui, state) -> None:
    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in _COLUMNS]}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "/llmload/llm.csv", "title": "Download LLM statistics CSV"}]

    @web_ui.app.after_request
    def _add_llm_stats(response):
        if request.path != "/stats/requests" or not response.is_json:
            return response
        users = environment.runner.user_count if environment.runner else 0
        data = response.get_json()
        data["extended_stats"] = [{"key": TAB_KEY, "data": ui_rows(state.live, users)}]
        response.set_data(json.dumps(data))
        return response

    @web_ui.app.route("/llmload/llm.csv")
    def _llm_csv():
        users = environment.runner.user_count if environment.runner else 0
        resp = make_response(live_csv(state.live, now(), users))
        resp.headers["Content-Type"] = "text/csv"
        resp.headers["Content-Disposition"] = "attachment;filename=llm_stats.csv"
        return resp
