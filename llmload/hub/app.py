"""The hub's web app (Flask): pages and JSON over an open store, read only.

`create_app(store, profiles=...)` gives the WSGI app; `llmload hub` serves it (`llmload.hub.server`).
Routes (GET and HEAD only: a POST or any other method is a 405, and the store is opened for reading):

    /, /runs            runs, filtered by model, engine, version, hardware, provenance, since, until
                        (/api/runs: each with what its cost per token is priced at, `llmload.hub.pricing`)
    /runs/<id>          the run's report.html (its Page by `llmload.output.pages.html`) under the hub's bar
                        (its tier and pricing; links to /runs/<id>/results.json and each uploaded records
                        file), priced at the hub's price for its hardware where it has no price of its own
    /leaderboard        ?model=M&context=C[&concurrency=N][&hardware=H][&version=V][&endpoint=E][&images=K]
                        [&rank=cost]: runs ranked by total tok/s (cells of K images per request, default 0)
                        or cost per 1M output tokens, or embeddings and rerank runs by inputs/s
                        (`llmload.hub.boardroutes`)
    /models, /hardware  what the store holds, with counts, links and the operator's prices
    /compare            ?a=ID&b=ID: the compare page (`llmload.output.pages.comparepage.render_html`)
    /calculator         ?run=ID|profile=NAME&context=C&users=N[&slo=...]: the twin's prediction (NAME:
                        a profile the hub offers, `calculator.offered_profiles`; never a file's path;
                        [&price_per_hour=USD]: the cost per 1M output tokens at that price);
                        &workload=rate&rate=R[&arrivals=constant&window=30s]: a rate cell, and with an SLO
                        the highest rate meeting it (`llmload.hub.ratecalc`)
    /api/...            the same as JSON: /api/runs, /api/runs/<id> (the results document),
                        /api/leaderboard, /api/models, /api/hardware, /api/compare, /api/calculator

Templates (`llmload/hub/templates/`) are autoescaped, all of them: a model name or launch
command holding markup is text; their styles are static files (`llmload/hub/static/`). Every
request is held to `llmload.hub.security`'s limits before a route reads it, and every
response carries its headers (a strict Content-Security-Policy, nosniff, no framing,
Referrer-Policy same-origin). Bad query parameters are a 400, an unknown run a 404, a query
too long a 414, a prediction over its CPU budget a 422, a store that fails or does not answer
in time a 503 (naming neither its file nor its host), anything else a 500 (its traceback
logged, never sent): each one line (plain text; `{"error": ...}` under /api/).

Nothing whose cost grows with what is asked runs on the loop that answers every request:
the store is read in threads (`llmload.hub.offloop`), run documents are served as stored and
kept encoded (`llmload.hub.documents`), run pages, comparisons, predictions and submissions
run in the workers (`llmload.hub.workers`, `llmload.hub.tasks`), uploads are held to
`llmload.hub.limits`, and the server holds connections to deadlines (`llmload.hub.server`).
"""

from __future__ import annotations

import logging
import mimetypes
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import jinja2
from flask import Flask, Response, jsonify, render_template, request
from werkzeug.exceptions import HTTPException

from llmload.core.budget import BudgetSpent
from llmload.core.redact import scrub
from llmload.hub import security, views
from llmload.hub.boardroutes import add_leaderboard_routes
from llmload.hub.database import StoreError
from llmload.hub.documents import Documents, NotStored
from llmload.hub.offloop import OffLoop
from llmload.hub.pricing import fmt_price
from llmload.hub.query import MAX_USERS, RUN_ID, QueryError, count, price, required, run_filter, run_id, text, tokens
from llmload.hub.store import Store
from llmload.hub.submit import RECORDS_NAME
from llmload.hub.submitroutes import Submissions, add_submission_routes
from llmload.hub.tasks import comparison
from llmload.hub.tasks import run_page as run_page_task
from llmload.hub.workers import CLIENT_SOCKET, Busy, Workers

if TYPE_CHECKING:
    from llmload.sim.profiles import Profile

logger = logging.getLogger(__name__)
PAGE_RUNS = 100
"""Runs per page of /runs and /api/runs (`?page=N`)."""
CHOICES = 200
"""The newest runs the compare and calculator forms offer to pick from (any id may be typed)."""
RENDER_WAIT_S = 60.0
"""How long a run page's first render waits for a worker before a 503 (`llmload.hub.workers`)."""
RUN_PAGES_KEPT = 128
"""Run pages kept rendered in memory (a report renders its charts: most of a second of CPU)."""
STORE_RETRY_S = 5
"""Retry-After of a 503 for a store that did not answer."""
NAV = (("Runs", "/runs"), ("Leaderboard", "/leaderboard"), ("Models", "/models"), ("Hardware", "/hardware"),
       ("Compare", "/compare"), ("Calculator", "/calculator"))


class _HubFlask(Flask):
    def select_jinja_autoescape(self, filename: str) -> bool:
        return True  # every template, whatever its name


def _one_line(status: int, message: str) -> Response:
    line = scrub(" ".join(str(message).split()))[:500]
    if request.path.startswith("/api/"):
        response = jsonify(error=line)
    else:
        response = Response(line + "\n", mimetype="text/plain")
    response.status_code = status
    return response


def _report_page(parts: tuple[str, str]) -> Response:
    page, csp = parts
    return Response(page, mimetype="text/html", headers={"Content-Security-Policy": csp})


def create_app(store: Store, *, profiles: Mapping[str, Profile] | None = None,
               submissions: Submissions | None = None, workers: Workers | None = None) -> Flask:
    """The hub's app over `store` (opened for reading; the app never writes, but with
    `submissions`: `POST /api/runs`, `llmload.hub.submitroutes`, the store opened for
    writing). `profiles`: the calculator's profiles by name (`calculator.offered_profiles`;
    default: the built-in ones), read before any request. `workers`: where run pages' charts and
    predictions are computed (`llmload.hub.workers`; default: a thread of this process)."""
    from llmload.hub.calculator import MAX_OUTPUT_TOKENS, offered_profiles
    from llmload.hub.ratecalc import RateCalculation, parse_rate, parse_window
    from llmload.output import formats
    from llmload.output.pages.sections import usd

    offered = dict(offered_profiles() if profiles is None else profiles)
    mimetypes.guess_type("hub.css")  # the system's MIME types read now, not by the first static file's request
    app = _HubFlask("llmload.hub")
    app.config.update(DEBUG=False, PROPAGATE_EXCEPTIONS=False)
    app.url_map.merge_slashes = False  # `//x` is a 404, never a redirect
    app.json.sort_keys = False
    app.jinja_env.undefined = jinja2.StrictUndefined
    app.jinja_env.finalize = views.shown
    app.jinja_env.filters.update(rate=formats.fmt_rate, ms=formats.fmt_ms, tbt=formats.fmt_tbt_ms,
                                 context=formats.fmt_context, link=views.link, tier=views.tier_text, usd=usd,
                                 price=fmt_price)

    def page(template: str, active: str, **context) -> str:
        return render_template(template, nav=NAV, active=active, **context)

    run_pages: OrderedDict[tuple, tuple[str, str]] = OrderedDict()
    # a report's charts and a prediction are CPU: in the workers, a run page waiting up to a
    # minute for one rather than being refused
    workers = workers or Workers(store, offered)
    reads = OffLoop(store)  # the routes' reads: a database that waits holds one request, not the loop
    documents = Documents(reads)
    app.before_request(lambda: security.check_request(request))
    app.after_request(lambda response: security.add_headers(response) or response)

    # ------------------------------------------------------------------ runs
    @app.get("/")
    @app.get("/runs")
    def runs_page():
        filters = run_filter(request.args)
        number, total = count(request.args, "page", default=1), reads.count_runs(filters)
        return page("runs.html", "Runs", runs=reads.runs(filters, limit=PAGE_RUNS, offset=(number - 1) * PAGE_RUNS),
                    filters=filters, models=reads.models(), hardware=reads.hardware(), total=total,
                    price=reads.hardware_prices().get(filters.hardware) if filters.hardware else None,
                    pages=views.pages(number, total, PAGE_RUNS, request.args))

    @app.get("/api/runs")
    def runs_api():
        number = count(request.args, "page", default=1)
        listed = tuple(reads.runs(run_filter(request.args), limit=PAGE_RUNS, offset=(number - 1) * PAGE_RUNS))
        pricing = reads.pricing(listed)
        return jsonify([views.run_dict(r, pricing[r.id]) for r in listed])

    @app.get("/runs/<rid>")
    def run_page(rid: str):
        summary = reads.summary(rid) if RUN_ID.match(rid) else None
        if summary is None:
            raise NotStored(f"no run {rid[:40]!r} in the store")
        records, pricing = reads.record_names(rid), reads.pricing((summary,))[rid]
        key = (rid, summary.tier, tuple(records), pricing)
        if key not in run_pages:  # a run's id is its content: its page changes only with its tier, records or price
            bar = render_template("bar.html", nav=NAV, run=summary, records=records, pricing=pricing)
            try:
                run_pages[key] = workers.run(run_page_task, {"run": rid, "bar": bar,
                                                             "price_per_hour": pricing.price_per_hour},
                                             wait_s=RENDER_WAIT_S)
            except LookupError as exc:
                raise NotStored(str(exc)) from None
            while len(run_pages) > RUN_PAGES_KEPT:
                run_pages.popitem(last=False)
        run_pages.move_to_end(key)
        page_html, csp = run_pages[key]
        return Response(page_html, mimetype="text/html", headers={"Content-Security-Policy": csp})

    @app.get("/api/runs/<rid>")
    def run_api(rid: str):
        return Response(documents.get(rid, "compact"), mimetype="application/json")

    # ------------------------------------------------------------------ leaderboard
    add_leaderboard_routes(app, reads, page)  # llmload.hub.boardroutes: the token board, or embeddings' and rerank's

    # ------------------------------------------------------------------ models, hardware
    def model_entries():
        contexts = reads.contexts_by_model()  # one query, not one per model
        return [(m, contexts.get((m.model, m.model_root), [])) for m in reads.models()]

    @app.get("/models")
    def models_page():
        return page("models.html", "Models", entries=model_entries())

    @app.get("/api/models")
    def models_api():
        return jsonify([views.model_dict(m, contexts) for m, contexts in model_entries()])

    @app.get("/hardware")
    def hardware_page():
        return page("hardware.html", "Hardware", entries=reads.hardware())

    @app.get("/api/hardware")
    def hardware_api():
        return jsonify([views.hardware_dict(h) for h in reads.hardware()])

    # ------------------------------------------------------------------ compare
    def compared(bar: str | None):
        """The comparison of runs a and b, in the workers: its page under `bar`, else its JSON."""
        a, b = (run_id(required(request.args, name, "a run id"), name) for name in ("a", "b"))
        try:
            return workers.run(comparison, {"a": a, "b": b, "bar": bar}, wait_s=RENDER_WAIT_S)
        except LookupError as exc:
            raise NotStored(str(exc)) from None

    @app.get("/compare")
    def compare_page():
        if not request.args:
            return page("compare.html", "Compare", runs=reads.runs(limit=CHOICES))
        return _report_page(compared(render_template("bar.html", nav=NAV, run=None, pricing=None)))

    @app.get("/api/compare")
    def compare_api():
        return jsonify(compared(None))

    # ------------------------------------------------------------------ calculator
    def calculation():
        try:
            return predicted(request.args)
        except LookupError as exc:
            raise NotStored(str(exc)) from None

    def predicted(args):
        rid = text(args, "run")
        if rid is not None:
            run_id(rid)
        workload = text(args, "workload") or "matrix"
        if workload not in ("matrix", "rate"):
            raise QueryError(f"workload: {workload[:40]!r} is none of matrix, rate")
        context = tokens(args, "context")
        if context is None:
            raise QueryError("context is missing: give a context in tokens (e.g. 16384 or 16K)")
        client = request.environ.get(CLIENT_SOCKET)  # gone: the prediction is cancelled (absent: never)
        asked = price(args)  # else the run's own price, else the hub's for its hardware (`calculator.priced`)
        if workload == "rate":
            return workers.predict(dict(workload="rate", run=rid, profile=text(args, "profile"), price_per_hour=asked,
                                        context_tokens=context, rate=parse_rate(text(args, "rate")),
                                        arrivals=text(args, "arrivals"), slo=text(args, "slo"),
                                        window_s=parse_window(text(args, "window")),
                                        max_tokens=count(args, "max_tokens", most=MAX_OUTPUT_TOKENS)), client=client)
        users = count(args, "users", most=MAX_USERS)
        if users is None:
            raise QueryError("users is missing: give the number of simultaneous users")
        return workers.predict(dict(workload="matrix", run=rid, profile=text(args, "profile"), price_per_hour=asked,
                                    context_tokens=context, users=users, slo=text(args, "slo"),
                                    max_tokens=count(args, "max_tokens", most=MAX_OUTPUT_TOKENS)), client=client)

    @app.get("/calculator")
    def calculator_page():
        result = calculation() if request.args else None
        rate = result if isinstance(result, RateCalculation) else None
        return page("calculator.html", "Calculator", result=None if rate else result, rate_result=rate,
                    runs=reads.runs(limit=CHOICES), profiles=sorted(offered), args=request.args, rate_figures=views.rate_figures,
                    request_counts=views.request_counts, rate_slo_rows=views.rate_slo_rows)

    @app.get("/api/calculator")
    def calculator_api():
        return jsonify(calculation().to_dict())

    @app.get("/runs/<rid>/results.json")
    def run_results_file(rid: str):
        return Response(documents.get(rid, "file"), mimetype="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{rid}-results.json"'})

    @app.get("/runs/<rid>/records/<name>")
    def run_records_file(rid: str, name: str):
        if not RUN_ID.match(rid) or reads.summary(rid) is None:
            raise NotStored(f"no run {rid[:40]!r} in the store")
        data = reads.record(rid, name) if RECORDS_NAME.match(name) else None
        if data is None:
            raise NotStored(f"run {rid} has no records file {name[:80]!r}")
        return Response(data, mimetype="application/vnd.apache.parquet",
                        headers={"Content-Disposition": f'attachment; filename="{rid}-{name}"'})

    if submissions is not None:
        add_submission_routes(app, reads, submissions, workers)

    @app.get("/favicon.ico")
    def favicon():
        return Response(status=204)  # no icon: browsers ask for one on every page

    # ------------------------------------------------------------------ errors
    @app.errorhandler(QueryError)
    def bad_query(exc):
        return _one_line(400, str(exc))

    @app.errorhandler(NotStored)
    def not_found(exc):
        return _one_line(404, str(exc))

    @app.errorhandler(Busy)
    def busy(exc):
        response = _one_line(503, str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.errorhandler(StoreError)
    def store_failed(exc):  # the store's words (its path, its host) to the log, not to a visitor
        logger.warning("%s", exc)
        response = _one_line(503, "the store did not answer in time (busy or failing): try again in a few seconds")
        response.headers["Retry-After"] = str(STORE_RETRY_S)
        return response

    @app.errorhandler(HTTPException)
    def http_error(exc):
        response = _one_line(exc.code or 500, f"{exc.code} {exc.name}: {request.method[:16]} {request.path[:80]}")
        if getattr(exc, "valid_methods", None):
            response.headers["Allow"] = ", ".join(exc.valid_methods)  # a 405 says what is allowed
        return response

    @app.errorhandler(Exception)
    def crashed(exc):  # the traceback to the log, one line to the visitor
        logger.error("%s %s failed: %s: %s", request.method, request.path[:200], type(exc).__name__, exc,
                     exc_info=exc)
        return _one_line(500, f"internal error ({type(exc).__name__}) answering {request.path[:80]}")

    app.register_error_handler(BudgetSpent, lambda exc: _one_line(422, str(exc)))  # asked again, spent again: no 503
    return app
