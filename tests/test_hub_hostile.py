"""The hub is safe to expose (docs/hub.md, "Safe to expose"; llmload/hub/security.py): every
route of the app's url_map, asked as a hostile visitor would (paths on the server, `..`,
huge numbers, long strings, wrong types, control characters, other methods, over-long
queries), answers a one-line 4xx without a traceback and opens no file; a request never
names a file (the calculator takes a profile's name: the built-in ones and `llmload hub
--profiles DIR`'s); every response carries the security headers, and a report page's
policy allows exactly its own `<style>` elements."""

from __future__ import annotations

import base64
import builtins
import hashlib
import io
import json
import logging
import os
import pathlib
import re
import socket
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from llmload.hub import security
from llmload.hub.app import create_app
from llmload.hub.calculator import offered_profiles
from llmload.hub.store import open_store
from llmload.sim.profiles import ProfileError, list_profiles
from test_hub_store import sim_run  # noqa: F401  (a fixture: a finished run on the simulator)
from tests_helpers import llmload, one_line_error, start_llmload

HUB = Path(__file__).resolve().parent.parent / "llmload" / "hub"
ALLOWED = (HUB / "templates", HUB / "static")
"""The only files a request may open: the hub's own templates and static files."""
LEAK = "sk-LEAKME123"
HUGE = "9" * 200
LONG = "x" * (security.MAX_VALUE_CHARS + 1)


@pytest.fixture(scope="module")
def hub(sim_run, tmp_path_factory):  # noqa: F811
    """(app, run id, a secret profile file outside the offered ones, the --profiles folder)."""
    base = tmp_path_factory.mktemp("hostile")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    r = llmload("publish", sim_run, "--db", url)
    assert r.returncode == 0, r.stderr
    secret = base / "app" / "x.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"num_gpu_blocks": LEAK, "base": "tiny"}))
    folder = base / "profiles"
    folder.mkdir()
    (folder / "team-h100.json").write_text(json.dumps({"base": "tiny", "step_base_ms": 1.0}))
    with open_store(url) as store:
        app = create_app(store, profiles=offered_profiles(folder))
        app.config["HUB_TEST_URL"] = url
        yield app, r.stdout.split()[0], secret, folder


@contextmanager
def recorded_opens():
    """Every file opened through builtins.open, io.open, os.open or pathlib.Path.open."""
    opened: list[str] = []
    real_open, real_io_open, real_os_open, real_path_open = builtins.open, io.open, os.open, pathlib.Path.open

    def record(real):
        def opener(file, *args, **kwargs):
            opened.append(os.fspath(file) if isinstance(file, (str, bytes, os.PathLike)) else repr(file))
            return real(file, *args, **kwargs)
        return opener

    def path_open(self, *args, **kwargs):
        opened.append(str(self))
        return real_path_open(self, *args, **kwargs)

    builtins.open, io.open, os.open, pathlib.Path.open = (record(real_open), record(real_io_open),
                                                          record(real_os_open), path_open)
    try:
        yield opened
    finally:
        builtins.open, io.open, os.open, pathlib.Path.open = real_open, real_io_open, real_os_open, real_path_open


def outside_the_hub(opened: list[str]) -> list[str]:
    return [p for p in opened if not any(Path(str(p)).resolve().is_relative_to(a) for a in ALLOWED)]


def check_security_headers(response) -> None:
    h = response.headers
    csp = h["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert re.search(r"style-src 'self'( 'sha256-[A-Za-z0-9+/=]+')*;", csp) and "unsafe" not in csp
    assert (h["X-Content-Type-Options"], h["X-Frame-Options"], h["Referrer-Policy"]) == ("nosniff", "DENY",
                                                                                         "same-origin")


def answer(client, method: str, path: str, *, status: tuple[int, ...] = (400, 404, 405, 414)) -> str:
    """The one-line 4xx answer to a hostile request (no traceback, no file opened)."""
    with recorded_opens() as opened:
        r = client.open(path, method=method)
    body = r.get_data(as_text=True)
    what = f"{method} {path[:120]} -> {r.status_code} {body[:200]!r}"
    assert r.status_code in status, what
    assert "Traceback" not in body and "File \"" not in body and body.count("\n") <= 1 and len(body) <= 600, what
    if path.startswith("/api/"):
        assert r.mimetype == "application/json" and set(r.get_json()) == {"error"}, what
    else:
        assert r.mimetype == "text/plain", what
    assert outside_the_hub(opened) == [], (what, opened)
    check_security_headers(r)
    return r.get_json()["error"] if path.startswith("/api/") else body.strip()


def generic(path: str) -> list[tuple[str, str]]:
    """Hostile requests any route answers with a 4xx: other methods, queries over the limits."""
    cases = [(m, path) for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND")]
    sep = "&" if "?" in path else "?"
    many = "&".join(f"p{i}=1" for i in range(security.MAX_PARAMS + 1))
    cases += [("GET", f"{path}{sep}q={'y' * security.MAX_QUERY_BYTES}"), ("GET", f"{path}{sep}{many}"),
              ("GET", f"{path}{sep}model=a&model=b"), ("GET", f"{path}{sep}model={LONG}"),
              ("GET", f"{path}{sep}{'z' * 60}=1&{'z' * 60}=2")]
    return cases


def hostile(rid: str, secret: Path) -> dict[str, list[str]]:
    """Per route (its rule), GET requests whose parameters or path are hostile."""
    paths = [str(secret), "/etc/passwd", "../../../etc/passwd", "..", "tiny/../../x", "file:///etc/passwd",
             "%2Fetc%2Fpasswd", "\\\\server\\share\\x.json", "tiny.json", "C:\\x.json"]
    q = quote
    runs = ([f"provenance={q(p)}" for p in ("..", "measured/../x", LEAK)] + [f"since={x}" for x in (HUGE, "-1", "[]")]
            + [f"until={q('2020-01-01T00:00:00' + 'x' * 40)}", "model=a%00b", "engine=a%0aX", "hardware=%7f"])
    board = (["context=256", "model=tiny", "model=tiny&context=-1", f"model=tiny&context={HUGE}",
              "model=tiny&context=1e999", "model=tiny&context=99999999999M", "model=tiny&context=NaN",
              "model=tiny&context=[1]", "model=tiny&context=256&concurrency=0",
              f"model=tiny&context=256&concurrency={HUGE}", "model=tiny&context=256&concurrency=%C2%B2",
              "model=tiny&context=256&concurrency=1.5", "model=tiny&context=256&concurrency=-3"]
             + [f"model={q(p)}&context={q(p)}" for p in paths[:3]]
             + [f"model=tiny&context=256&{name}={x}" for name in ("hardware", "version")
                for x in ("a%00b", "H100%0aX", "%7f", "%1b[31m", "x%0d%0aSet-Cookie:%20a=b", LONG)]
             + [f"hardware={q(p)}&version={q(p)}" for p in paths[:3]])
    compare = ([f"a={q(p)}&b={rid}" for p in paths] + [f"a={rid}&b={q(p)}" for p in paths] + [f"a={rid}", f"b={rid}",
               f"a={HUGE}&b={HUGE}"])
    base = f"context=256&users=1&run={rid}"
    calc = ([f"profile={q(p)}&context=256&users=1" for p in paths]
            + [f"profile=tiny&run={rid}&context=256&users=1", "context=256&users=1"]
            + [f"run={q(p)}&context=256&users=1" for p in paths[:3]]
            + [f"run={rid}&context={x}&users=1" for x in (HUGE, "-5", "1e999", "32M", "x")]
            + [f"run={rid}&context=256&users={x}" for x in (HUGE, "257", "0", "%C2%B2", "1.0", "[]")]
            + [f"{base}&max_tokens={x}" for x in (HUGE, "8193", "0")]
            + [f"{base}&slo={q(x)}" for x in ("fast", "ttft_p99=1e999s", "ttft_p99=" + "9" * 200, "x=1", "tbt=-1ms")]
            + [f"{base}&workload={q(x)}" for x in ("../rate", "sessions", LEAK)]
            + [f"{base}&workload=rate&rate={x}" for x in ("0", "-1", "1e999", "nan", "inf", HUGE, "1001", "x")]
            + [f"{base}&workload=rate&rate=1&window={x}" for x in ("1s", "1e999s", "9999h", "-30s", "x")]
            + [f"{base}&workload=rate&rate=1&arrivals={q(x)}" for x in ("../poisson", "file:///etc/passwd")])
    return {"/": runs, "/runs": runs, "/api/runs": runs, "/runs/<rid>": [], "/api/runs/<rid>": [],
            "/leaderboard": board, "/api/leaderboard": board, "/models": [], "/api/models": [], "/hardware": [],
            "/api/hardware": [], "/compare": compare, "/api/compare": compare, "/calculator": calc,
            "/api/calculator": calc, "/favicon.ico": [], "/static/<path:filename>": [],
            "/runs/<rid>/results.json": [], "/runs/<rid>/records/<name>": []}


ID_PATHS = ["..", "%2e%2e", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "0123456789abcdeg", "0123456789ABCDEF",
            "x" * 400, "x" * (security.MAX_PATH_CHARS + 1), "%00", "%0a", "1e999", "-1", "<script>"]
STATIC_PATHS = ["../app.py", "..%2Fapp.py", "%2e%2e/app.py", "%2e%2e%2fapp.py", "/etc/passwd", "hub.css/../../app.py",
                "nothing.css", "..%5Capp.py", "templates/../../app.py", "%00"]


def test_every_route_answers_hostile_input_in_one_line_and_opens_no_file(hub, caplog):
    app, rid, secret, _folder = hub
    client = app.test_client()
    routes = hostile(rid, secret)
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert rules == set(routes), f"a route without hostile cases here: {rules ^ set(routes)}"
    with recorded_opens() as opened:  # the recorder is not blind
        assert client.get("/static/hub.css").status_code == 200
        Path(secret).read_text()
    assert set(outside_the_hub(opened)) == {str(secret)} and any(p.endswith("hub.css") for p in opened)
    caplog.set_level(logging.INFO)
    asked = 0
    for rule, queries in routes.items():
        path = rule.replace("<rid>", rid).replace("<path:filename>", "hub.css").replace("<name>", "x.parquet")
        for method, url in generic(path):
            answer(client, method, url)
            asked += 1
        for query in queries:
            answer(client, "GET", f"{path}?{query}")
            asked += 1
        for bad in ID_PATHS if "<rid>" in rule else STATIC_PATHS if "<path:" in rule else []:
            answer(client, "GET", rule.replace("<rid>", bad).replace("<path:filename>", bad).replace("<name>", "x.parquet"))
            asked += 1
        for bad in STATIC_PATHS + ["x" * 400, "..", "hub.sqlite"] if "<name>" in rule else []:
            answer(client, "GET", path.replace("x.parquet", bad))
            asked += 1
    for path in ("/nowhere", "/runs/", "/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/api", "/x" * 300,
                 "/runs/" + rid + "/..", "/api/runs/" + rid + "/../../x", "/static", "/static/"):
        answer(client, "GET", path)
        asked += 1
    assert asked > 400
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failed == []  # no 500: every hostile input was foreseen


def test_a_leaderboard_filter_is_a_value_never_a_file(hub):
    """`hardware` and `version` are compared with the store's columns: a path, `..` or a
    huge number there is a value no run has (an empty board), opening no file."""
    app, _rid, secret, _folder = hub
    client = app.test_client()
    for value in (str(secret), "/etc/passwd", "../../../etc/passwd", "..", "%2Fetc%2Fpasswd", HUGE, "' OR 1=1 --",
                  "*", "%", "_"):
        for name in ("hardware", "version"):
            for path in ("/api/leaderboard", "/leaderboard"):
                with recorded_opens() as opened:
                    r = client.get(f"{path}?model=tiny&context=256&{name}={quote(value)}")
                assert r.status_code == 200, (path, name, value, r.get_data(as_text=True)[:200])
                assert outside_the_hub(opened) == [], (value, opened)
                check_security_headers(r)
                if path.startswith("/api/"):
                    assert r.get_json() == []
                else:
                    assert "<table class=\"leaderboard\"" not in r.get_data(as_text=True)
    assert len(client.get("/api/leaderboard?model=tiny&context=256").get_json()) == 1  # and unfiltered, the run


def test_a_request_names_no_file_and_learns_nothing_of_one(hub):
    """The issue's probe: a profile path answers as any unknown name does, the same whether
    the file exists or not, and never quotes what a file holds."""
    app, _rid, secret, _folder = hub
    client = app.test_client()
    names = ", ".join(sorted([*list_profiles(), "team-h100"]))
    for path in (str(secret), "/etc/passwd", "/no/such/dir/x.json", str(secret.parent / "missing.json")):
        line = answer(client, "GET", f"/calculator?profile={quote(path)}&context=256&users=1")
        assert line == f"profile: {path[:40]!r} is none of the profiles this hub offers: {names}"
        assert LEAK not in line
    for path in ("/api/calculator", "/calculator"):
        line = answer(client, "GET", f"{path}?profile={quote(str(secret))}&context=256&users=1&workload=rate&rate=1")
        assert "none of the profiles" in line and LEAK not in line


def test_the_profiles_folder_offers_its_profiles_by_name_only(hub, tmp_path):
    app, _rid, _secret, folder = hub
    client = app.test_client()
    got = client.get("/api/calculator?profile=team-h100&context=256&users=1").get_json()
    assert got["source"] == "team-h100" and got["decode"]["total_tok_s"] > 0
    assert "none of the profiles" in answer(client, "GET", "/api/calculator?profile=team-h100.json&context=256&users=1")
    page = client.get("/calculator").get_data(as_text=True)
    assert "<option>team-h100</option>" in page and "<option>tiny</option>" in page and str(folder) not in page
    # What the operator gets wrong is refused when the hub starts, in one line.
    (tmp_path / "tiny.json").write_text("{}")
    with pytest.raises(ProfileError, match="tiny is a built-in profile's name"):
        offered_profiles(tmp_path)
    (tmp_path / "tiny.json").unlink()
    (tmp_path / "bad name.json").write_text("{}")
    with pytest.raises(ProfileError, match="letters, digits"):
        offered_profiles(tmp_path)
    (tmp_path / "bad name.json").unlink()
    (tmp_path / "broken.json").write_text(json.dumps({"num_gpu_blocks": LEAK}))
    line = one_line_error(llmload("hub", "--db", "sqlite:////nonexistent/hub.sqlite", "--profiles", tmp_path))
    assert "broken.json" in line and "num_gpu_blocks" in line  # to the operator, in their terminal
    assert "--profiles" in one_line_error(llmload("hub", "--profiles", tmp_path / "none"))


def test_security_headers_on_every_response(hub):
    app, rid, _secret, _folder = hub
    client = app.test_client()
    for path in ("/runs", "/api/runs", f"/runs/{rid}", f"/api/runs/{rid}", "/leaderboard", "/models", "/hardware",
                 "/compare", f"/compare?a={rid}&b={rid}", "/calculator", "/static/hub.css", "/static/bar.css",
                 "/favicon.ico", "/nowhere", "/api/leaderboard?context=1"):
        r = client.get(path)
        assert r.status_code < 500, path
        check_security_headers(r)
    assert client.head("/runs").status_code == 200  # HEAD is GET without the body
    assert client.post("/runs").headers["Allow"] == "GET, HEAD"


def style_hashes(page: str) -> set[str]:
    return {"'sha256-" + base64.b64encode(hashlib.sha256(css.encode()).digest()).decode() + "'"
            for css in re.findall(r"<style\b[^>]*>(.*?)</style>", page, re.S)}


def added_by_the_hub(element) -> bool:
    """The hub's bar (and all in it), its stylesheet link, the style element of the classes."""
    if element.tag == "link" and element.attrs.get("href") == "/static/bar.css":
        return True
    if element.tag == "style" and ".hs-" in element.all_text():
        return True
    while element is not None:
        if element.tag == "nav" and element.attrs.get("class") == "hub-bar":
            return True
        element = element.parent
    return False


def test_a_report_page_keeps_every_style_as_a_class_its_policy_allows(hub, sim_run):  # noqa: F811
    """The report's style attributes are classes with the same declarations (each
    !important, as an inline style beats the page's rules), in one `<style>` element whose
    hash, like every other `<style>` element's, the page's policy lists."""
    from html_check import parse
    from llmload.core.model.document import results_from_dict
    from llmload.core.model.origin import without_origin
    from llmload.output.pages.report import render_html
    app, rid, _secret, _folder = hub
    r = app.test_client().get(f"/runs/{rid}")
    page = r.get_data(as_text=True)
    # the report of the run as published (without the server's address: llmload.core.model.origin)
    original = render_html(results_from_dict(without_origin(json.loads((sim_run / "results.json").read_text()))))
    listed = set(re.findall(r"'sha256-[^']+'", r.headers["Content-Security-Policy"]))
    assert listed == style_hashes(page) and len(listed) >= 2
    rules = dict(re.findall(r"^\.(hs-[0-9a-f]{12}) \{ (.*) \}$", page, re.M))
    before = [e for e in parse(original).iter() if e.tag != "#document"]
    theirs = iter(e for e in parse(page).iter() if e.tag != "#document" and not added_by_the_hub(e))
    styled = 0
    for mine in before:
        got = next(theirs)
        assert (got.tag, [t for t in got.text if t.strip()]) == (mine.tag, [t for t in mine.text if t.strip()])
        if "style" in mine.attrs:
            styled += 1
            [cls] = [c for c in got.attrs["class"].split() if c.startswith("hs-")]
            want = "; ".join(d.strip() + " !important" for d in mine.attrs["style"].split(";") if d.strip())
            assert rules[cls] == want
            assert got.attrs["class"].replace(cls, "").split() == mine.attrs.get("class", "").split()
    assert next(theirs, None) is None
    assert styled > 100 and 'style="' not in page


def test_a_crash_is_one_line_and_its_traceback_is_logged(hub, caplog, monkeypatch):
    app, _rid, _secret, _folder = hub
    from llmload.hub.store import Store

    def boom(self, *args, **kwargs):
        raise RuntimeError(f"disk /srv/private/{LEAK} on fire")

    monkeypatch.setattr(Store, "hardware", boom)
    with caplog.at_level(logging.ERROR, logger="llmload.hub.app"):
        for path in ("/hardware", "/api/hardware"):
            r = app.test_client().get(path)
            body = r.get_data(as_text=True)
            assert r.status_code == 500 and body.count("\n") <= 1 and LEAK not in body and "Traceback" not in body
            assert "internal error (RuntimeError)" in body
            check_security_headers(r)
    assert [rec.exc_info[0] for rec in caplog.records] == [RuntimeError, RuntimeError]
    assert app.debug is False


def raw_request(base: str, request_line: bytes, header: bytes = b"") -> tuple[int, bytes]:
    """(status, body) of one request sent as bytes (no client normalises its path); the
    response carries the security headers, whoever answered (the app or gevent's server)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request_line + b"\r\nHost: hub\r\nConnection: close\r\n" + header + b"\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    names = {line.split(b":")[0].strip().lower().decode() for line in head.split(b"\r\n")[1:]}
    assert {name.lower() for name in security.HEADERS} | {"content-security-policy"} <= names, (request_line[:80], head)
    return int(head.split()[1]), body


def test_llmload_hub_answers_raw_hostile_requests_in_one_line(hub):
    """`llmload hub` itself (gevent's server, no test client): paths as sent, other methods,
    a request line or header over gevent's own limits; never a traceback in its log."""
    _app, rid, _secret, _folder = hub
    url = _app.config["HUB_TEST_URL"]
    proc = start_llmload("hub", "--db", url, "--bind", "127.0.0.1:0")
    try:
        base = proc.stdout.readline().split()[4]
        for line in (b"GET /runs/../etc/passwd HTTP/1.1", b"GET http://evil.example/runs HTTP/1.1",
                     b"GET ../../etc/passwd HTTP/1.1", b"GET /static/../app.py HTTP/1.1",
                     b"GET /static/%2e%2e/app.py HTTP/1.1", b"GET /api/runs/" + rid.encode() + b"/../x HTTP/1.1",
                     b"OPTIONS * HTTP/1.1", b"BREW /runs HTTP/1.1", b"DELETE /api/runs/" + rid.encode() + b" HTTP/1.1",
                     b"GET /runs?" + b"x=1&" * 600 + b" HTTP/1.1", b"GET /" + b"a" * 9000 + b" HTTP/1.1"):
            status, body = raw_request(base, line)
            assert 400 <= status < 500 and body.count(b"\n") <= 1 and b"Traceback" not in body, (line[:80], status, body)
        status, _ = raw_request(base, b"GET /runs HTTP/1.1", b"X-Big: " + b"a" * 70000 + b"\r\n")
        assert status == 400
        assert raw_request(base, b"GET /runs HTTP/1.1")[0] == 200  # and it still serves
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-2000:]
