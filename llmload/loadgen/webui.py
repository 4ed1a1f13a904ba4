"""The "LLM" tab of the Locust web UI, the LLM table as CSV, and the LLM page.

Uses Locust's documented extension points: `extended_tabs` / `extended_tables` in the
template arguments and an `extended_stats` entry added to the /stats/requests JSON that
the UI polls, plus routes of llmload's own on the UI's Flask app. The figures are
`live.LiveStats` rows and `livehistory.LiveHistory` points (on the master: merged from
workers). Locust's extended tabs draw tables only, so the charts over time are drawn by a
small self-contained script (`templates/live.js`, no library, no network) that the UI's
index page loads from /llmload/live.js; it polls /llmload/live.json and draws under the LLM
table while that tab is open. The same table and charts, as a static page without script,
are /llmload/llm.html in the UI and `PREFIX_llm.html` beside Locust's `--html PREFIX.html`
report (Locust offers no hook into that report).
"""

from __future__ import annotations

import csv
import io
import json
import os
from importlib import resources

from flask import make_response, request

from llmload.core.clock import now
from llmload.core.figures.live import LiveStats

TAB_KEY = "llm"

_COLUMNS = [("figure", "LLM figure"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"),
            ("count", "samples")]


def ui_rows(stats: LiveStats, users: int) -> list[dict]:
    t = now()
    rows = [{k: _fmt(v) for k, v in row.items()} for row in stats.rows(t)]
    s = stats.summary(t, users=users)
    if "inputs" in s:  # embeddings or rerank: no output tokens
        extra = [("inputs/s (mean)", s["inputs_per_s_mean"]), ("input tok/s (mean)", s["input_tok_s_mean"]),
                 ("inputs", s["inputs"]), ("input tokens", s["input_tokens"])]
    else:
        extra = [("output tok/s (mean)", s["output_tok_s_mean"]),
                 ("output tok/s (last 10 s, finished requests)", s["output_tok_s_recent"]),
                 ("output tokens", s["output_tokens"])]
    extra += [("requests", s["requests"]), ("failed requests", s["failures"]),
              ("requests in flight (users)", s["in_flight"])]
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
        {"href": "/llmload/llm.csv", "title": "Download LLM statistics CSV"},
        {"href": "/llmload/llm.html", "title": "Download LLM report (table and charts)"}]

    # Behind the web UI's login when it has one (--web-login), like Locust's own pages.
    auth = getattr(web_ui, "auth_required_if_enabled", lambda view: view)

    @web_ui.app.after_request
    def _add_llm_stats(response):
        if (request.endpoint or "").endswith("index") and response.mimetype == "text/html" \
                and not response.direct_passthrough:
            page = response.get_data(as_text=True)
            if LIVE_SCRIPT_TAG not in page and "</body>" in page:
                response.set_data(page.replace("</body>", LIVE_SCRIPT_TAG + "\n</body>", 1))
            return response
        if request.path != "/stats/requests" or not response.is_json:
            return response
        users = environment.runner.user_count if environment.runner else 0
        data = response.get_json()
        data["extended_stats"] = [{"key": TAB_KEY, "data": ui_rows(state.live, users)}]
        response.set_data(json.dumps(data))
        return response

    @web_ui.app.route("/llmload/live.json")
    @auth
    def _live_json():
        if state.history is None:
            return {"points": []}
        return state.history.to_dict(state.live)

    @web_ui.app.route("/llmload/live.js")
    @auth
    def _live_js():
        resp = make_response(live_script())
        resp.headers["Content-Type"] = "text/javascript; charset=utf-8"
        return resp

    @web_ui.app.route("/llmload/llm.html")
    @auth
    def _llm_html():
        resp = make_response(live_page(environment, state))
        resp.headers["Content-Type"] = "text/html; charset=utf-8"
        return resp

    @web_ui.app.route("/llmload/llm.csv")
    @auth
    def _llm_csv():
        users = environment.runner.user_count if environment.runner else 0
        resp = make_response(live_csv(state.live, now(), users))
        resp.headers["Content-Type"] = "text/csv"
        resp.headers["Content-Disposition"] = "attachment;filename=llm_stats.csv"
        return resp


LIVE_SCRIPT_TAG = '<script src="/llmload/live.js" defer></script>'


def live_script() -> str:
    return resources.files("llmload.output.pages").joinpath("templates", "live.js").read_text(encoding="utf-8")


def companion_path(html_file: str) -> str:
    """PREFIX_llm.html beside Locust's PREFIX.html (or beside any other name)."""
    root, ext = os.path.splitext(html_file)
    return f"{root}_llm{ext or '.html'}"


def live_page(environment, state) -> str:
    """The LLM table and the charts over time as one self-contained page (no script)."""
    from llmload.output.pages.charts.live import live_chart
    from llmload.core.figures.live import RATE_WINDOW_S
    from llmload.core.redact import scrub
    from llmload.output.pages.templating import render_template

    t = now()
    runner = environment.runner
    users = runner.user_count if runner else 0
    history = (state.history.to_dict(state.live) if state.history is not None
               else {"points": [], "window_s": None})
    chart = live_chart(history)
    return render_template(
        "llm_live.html.j2", host=scrub(environment.host or ""), rows=ui_rows(state.live, users),
        summary=state.live.summary(t, users=users), rate_window_s=RATE_WINDOW_S,
        chart=chart, points=len(history["points"]), window_s=history["window_s"])
