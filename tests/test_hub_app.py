"""The results hub's web app (`llmload hub`, llmload/hub/app.py, docs/hub.md): Flask's test
client over a SQLite store of runs published from the simulator (one run and copies of it on
other "machines"), `llmload hub` as a process on port 0, and the same app over a throwaway
PostgreSQL filled by two publishers at once (tests/postgres.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from html_check import parse
from llmload.core.model.document import results_from_dict
from llmload.core.model.origin import without_origin
from llmload.hub.app import create_app
from llmload.hub.store import open_store
from llmload.output.rundir.resultsfile import load_results
from postgres import PASSWORD, postgres  # noqa: F401  (the fixture)
from test_hub_store import variant
from tests_helpers import llmload, one_line_error, start_llmload

EVIL = "<script>alert('x')</script>"
LAUNCH = "vllm serve tiny --tensor-parallel-size 1 --max-model-len 4096"
BAR_CSS = '<link rel="stylesheet" href="/static/bar.css">\n'


@pytest.fixture(scope="module")
def sim_run(sim_tiny, tmp_path_factory) -> Path:
    """A finished run on the simulator: decode 0 and 256 tokens × 1 and 2 requests, prefill 256.
    Requests of 128 tokens: the calculator fits valid decode cells, and with 16-token
    requests the time before each first token made about a fifth of every stream's time
    non-streaming — `saturated` at the 80% rule on a loaded machine (seen in CI)."""
    out = tmp_path_factory.mktemp("hubapp") / "sim"
    r = llmload("run", "--host", sim_tiny.url, "--contexts", "0,256", "--prefill-contexts", "256",
                "--concurrency", "1,2", "--duration", "1s", "--max-tokens", "128", "--out", out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


def machines(sim_run: Path, base: Path) -> dict[str, Path]:
    """The simulated run and copies of it on three other machines: an RTX 3090 at half its
    speed, an H100 at twice (measured, vLLM 0.11, launched with LAUNCH), and one whose model
    name and launch command hold markup."""
    server = load_results(sim_run).server
    return {
        "sim": sim_run,
        "slow": variant(sim_run, base / "slow", scale=0.5, hardware={"name": "RTX 3090 24GB", "gpu": "RTX 3090"}),
        "fast": variant(sim_run, base / "fast", scale=2.0, hardware={"name": "H100 80GB", "gpu": "H100"},
                        provenance="measured", sim_profile=None,
                        server={**server, "engine": "vllm", "version": "0.11.0"}, launch_command=LAUNCH),
        "evil": variant(sim_run, base / "evil", hardware={"name": f"box {EVIL}"},
                        server={**server, "model": f"m{EVIL}"}, launch_command=f"vllm serve {EVIL}"),
    }


@pytest.fixture(scope="module")
def hub(sim_run, tmp_path_factory):
    """(Flask test client, store URL, {name: run id}) over a SQLite store of `machines`."""
    base = tmp_path_factory.mktemp("hubstore")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    runs = machines(sim_run, base)
    r = llmload("publish", *runs.values(), "--db", url)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = dict(zip(runs, (line.split()[0] for line in r.stdout.splitlines())))
    with open_store(url) as store:
        yield create_app(store).test_client(), url, ids


def ok(client, path: str):
    r = client.get(path)
    assert r.status_code == 200, (path, r.status_code, r.get_data(as_text=True)[:300])
    return r


def one_line(client, path: str, status: int) -> str:
    r = client.get(path)
    body = r.get_data(as_text=True)
    assert r.status_code == status, (path, r.status_code, body[:300])
    assert "Traceback" not in body and body.count("\n") <= 1, body
    return r.get_json()["error"] if path.startswith("/api/") else body.strip()


def test_every_page_answers_with_the_navigation(hub):
    client, _url, ids = hub
    for path in ("/", "/runs", "/leaderboard", "/leaderboard?model=tiny&context=256", "/models", "/hardware",
                 "/compare", f"/calculator?run={ids['sim']}&context=256&users=2"):
        root = parse(ok(client, path).get_data(as_text=True))
        links = {a.attrs["href"] for a in root.find_all("a")}
        assert {"/runs", "/leaderboard", "/models", "/hardware", "/compare", "/calculator"} <= links, path


def test_the_runs_page_lists_every_run_and_filters(hub):
    client, _url, ids = hub
    page = ok(client, "/runs").get_data(as_text=True)
    assert all(f'href="/runs/{rid}"' in page for rid in ids.values())
    listed = ok(client, "/api/runs").get_json()
    assert sorted(r["id"] for r in listed) == sorted(ids.values())
    assert all(r["url"] == f"/runs/{r['id']}" for r in listed)
    assert all((r["publisher"], r["source_dir"]) == (None, None) for r in listed)  # no --with-origin

    def only(query: str) -> set[str]:
        html = ok(client, "/runs?" + query).get_data(as_text=True)
        api = {r["id"] for r in ok(client, "/api/runs?" + query).get_json()}
        assert api == {rid for rid in ids.values() if f'href="/runs/{rid}"' in html}
        return {name for name, rid in ids.items() if rid in api}

    assert only("provenance=measured") == {"fast"}
    assert only("provenance=simulated") == {"sim", "slow", "evil"}
    assert only("engine=vllm&version=0.11.0") == {"fast"}
    assert only("hardware=RTX+3090+24GB") == {"slow"}
    assert only("model=tiny") == {"sim", "slow", "fast"}
    assert only("since=2000-01-01") == set(ids) and only("until=2000-01-01") == set()
    assert only("model=tiny&provenance=predicted") == set()


def test_a_run_page_is_its_report(hub, sim_run):
    client, _url, ids = hub
    page = ok(client, f"/runs/{ids['sim']}").get_data(as_text=True)
    root = parse(page)
    assert "Simulated" in root.all_text() and 'data-chart="heatmap"' in page
    [bar] = root.find_all("nav", **{"class": "hub-bar"})
    assert ids["sim"] in bar.all_text()
    from llmload.hub.security import strict_styles
    from llmload.output.pages.report import render_html
    without_bar = re.sub(r'\n<nav class="hub-bar".*?</nav>', "", page, count=1, flags=re.S)
    # the run as published: its report.html without the server's address (llmload.core.model.origin)
    published = without_origin(json.loads((sim_run / "results.json").read_text()))
    report = render_html(results_from_dict(published)).replace("</head>", BAR_CSS + "</head>", 1)
    assert without_bar == strict_styles(report)[0]  # report.html, its style attributes made classes
    assert 'style="' not in page  # tests/test_hub_hostile.py: the classes are the same declarations
    doc = ok(client, f"/api/runs/{ids['sim']}").get_json()
    assert doc == published and load_results(sim_run).server["base_url"] not in page


def test_the_leaderboard_ranks_runs_best_first(hub):
    client, _url, ids = hub
    rows = ok(client, "/api/leaderboard?model=tiny&context=256").get_json()
    assert [r["id"] for r in rows] == [ids["fast"], ids["sim"], ids["slow"]]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert rows[0]["total_tok_s"] == pytest.approx(2 * rows[1]["total_tok_s"])
    assert rows[0]["total_tok_s"] == max(c["total_tok_s"] for c in rows[0]["cells"])
    assert (rows[0]["hardware"], rows[0]["engine"], rows[0]["engine_version"]) == ("H100 80GB", "vllm", "0.11.0")
    at_one = ok(client, "/api/leaderboard?model=tiny&context=256&concurrency=1").get_json()
    assert {r["concurrency"] for r in at_one} == {1} and [r["id"] for r in at_one] == [r["id"] for r in rows]
    root = parse(ok(client, "/leaderboard?model=tiny&context=256").get_data(as_text=True))
    [table] = root.find_all("table")
    body_rows = [tr for tr in table.find_all("tr") if tr.find_all("td")]
    assert [tr.find_all("a")[0].attrs["href"] for tr in body_rows] == [f"/runs/{r['id']}" for r in rows]
    heads = [th.all_text() for th in table.find_all("th")]
    assert "tok/s @ 1" in heads and "tok/s @ 2" in heads and "TTFT" in heads
    assert ok(client, "/api/leaderboard?model=tiny&context=999").get_json() == []


def board_rows(client, query: str) -> list:
    """The leaderboard table's body rows (`tr` elements)."""
    root = parse(ok(client, "/leaderboard?" + query).get_data(as_text=True))
    return [tr for table in root.find_all("table", **{"class": "leaderboard"})  # none when no run ranks
            for tr in table.find_all("tr") if tr.find_all("td")]


def test_the_leaderboard_filters_by_hardware_and_engine_version(hub):
    client, _url, ids = hub
    sim_version = ok(client, f"/api/runs/{ids['sim']}").get_json()["server"]["version"]

    def only(query: str) -> list[str]:
        api = [r["id"] for r in ok(client, "/api/leaderboard?model=tiny&context=256&" + query).get_json()]
        html = [tr.find_all("a")[0].attrs["href"] for tr in board_rows(client, "model=tiny&context=256&" + query)]
        assert html == [f"/runs/{rid}" for rid in api]
        names = {rid: name for name, rid in ids.items()}
        return [names[rid] for rid in api]

    assert only("hardware=H100+80GB") == ["fast"] and only("hardware=RTX+3090+24GB") == ["slow"]
    assert only("version=0.11.0") == ["fast"] and only(f"version={sim_version}") == ["sim", "slow"]
    assert only("hardware=RTX+3090+24GB&version=0.11.0") == []
    assert only("hardware=H100+80GB&version=0.11.0&concurrency=2") == ["fast"]
    assert only("hardware=nowhere") == [] and only("hardware=&version=") == ["fast", "sim", "slow"]
    # the form's select boxes list the values this model's leaderboard at that context holds
    page = ok(client, "/leaderboard?model=tiny&context=256&hardware=H100+80GB")
    root = parse(page.get_data(as_text=True))
    selects = {s.attrs["name"]: s for s in root.find_all("select")}
    hardware = [(o.all_text(), "selected" in o.attrs) for o in selects["hardware"].find_all("option")]
    sim_hardware = ok(client, f"/api/leaderboard?model=tiny&context=256&version={sim_version}").get_json()
    assert hardware == sorted([("any", False), ("H100 80GB", True), ("RTX 3090 24GB", False),
                               (next(r["hardware"] for r in sim_hardware if r["id"] == ids["sim"]), False)],
                              key=lambda o: (o[0] != "any", o[0]))
    versions = [(o.attrs["value"], o.all_text()) for o in selects["version"].find_all("option")]
    assert ("0.11.0", "0.11.0 (vllm)") in versions and versions[0] == ("", "any") and len(versions) == 3
    assert 'href="/api/leaderboard?model=tiny&amp;context=256&amp;hardware=H100+80GB"' in page.get_data(as_text=True)
    empty = ok(client, "/leaderboard?model=tiny&context=256&version=9.9").get_data(as_text=True)
    assert "with engine version 9.9" in empty and '<option selected>9.9</option>' in empty
    assert 'href="/leaderboard?model=tiny&amp;context=256">Any hardware, engine version and endpoint' in empty


def test_each_leaderboard_row_links_its_hardware_and_shows_its_launch_command_and_tier(hub):
    client, _url, ids = hub
    rows = {r["id"]: r for r in ok(client, "/api/leaderboard?model=tiny&context=256").get_json()}
    fast, sim = rows[ids["fast"]], rows[ids["sim"]]
    assert fast["hardware_url"] == "/runs?hardware=H100+80GB" and fast["launch_command"] == LAUNCH
    assert sim["launch_command"] is None
    assert all((r["tier"], r["tier_text"], r["submitter"]) == ("here", "published here", None) for r in rows.values())
    assert [r["id"] for r in ok(client, fast["hardware_url"].replace("/runs", "/api/runs")).get_json()] == [ids["fast"]]
    by_run = {tr.find_all("a")[0].attrs["href"]: tr for tr in board_rows(client, "model=tiny&context=256")}
    row = by_run[f"/runs/{ids['fast']}"]
    [hardware] = row.find_all("a", **{"class": "hardware"})
    assert hardware.attrs["href"] == "/runs?hardware=H100+80GB" and hardware.all_text() == "H100 80GB"
    [launch] = row.find_all("details", **{"class": "launch"})
    assert launch.find_all("pre")[0].all_text() == LAUNCH and launch.find_all("summary")
    assert not by_run[f"/runs/{ids['sim']}"].find_all("details")
    assert "not recorded" in by_run[f"/runs/{ids['sim']}"].all_text()
    assert all(tr.find_all("td", **{"class": "tier"})[0].all_text() == "published here" for tr in by_run.values())
    evil = ok(client, f"/api/leaderboard?model=m{EVIL}&context=256").get_json()
    assert [r["launch_command"] for r in evil] == [f"vllm serve {EVIL}"]


@pytest.fixture(scope="module")
def tiered(sim_run, tmp_path_factory):
    """(client, {tier: run id}) over a store of one run published here, one submitted and
    approved, and one submitted and pending, with two records files."""
    from llmload.hub.publish import publish, read_run
    base = tmp_path_factory.mktemp("tiers")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    runs = {"here": sim_run,
            "approved": variant(sim_run, base / "approved", scale=2.0, hardware={"name": "H100 80GB"}),
            "pending": variant(sim_run, base / "pending", scale=3.0, hardware={"name": "B200"})}
    records = [("decode-256-x1.parquet", b"PAR1 one"), ("decode-256-x2.parquet", b"PAR1 two")]
    with open_store(url, write=True) as store:
        publish(store, read_run(runs["here"]))
        publish(store, read_run(runs["approved"]), submitter="alice", tier="approved")
        publish(store, read_run(runs["pending"]), submitter="bob", tier="pending", records=records)
    ids = {tier: read_run(path).id for tier, path in runs.items()}
    with open_store(url) as store:
        yield create_app(store).test_client(), ids


def test_runs_and_leaderboard_rows_say_their_tier_in_words(tiered):
    client, ids = tiered
    words = {"here": "published here", "approved": "submitted, approved"}
    listed = {r["id"]: r for r in ok(client, "/api/runs").get_json()}
    assert set(listed) == {ids["here"], ids["approved"]}  # the pending run is on no list
    for tier, said in words.items():
        assert (listed[ids[tier]]["tier"], listed[ids[tier]]["tier_text"]) == (tier, said)
    assert listed[ids["approved"]]["submitter"] == "alice"
    board = ok(client, "/api/leaderboard?model=tiny&context=256").get_json()
    assert [(r["id"], r["tier_text"]) for r in board] == [(ids["approved"], "submitted, approved"),
                                                           (ids["here"], "published here")]
    root = parse(ok(client, "/runs").get_data(as_text=True))
    shown = {tr.find_all("a")[0].attrs["href"]: tr.find_all("td", **{"class": "tier"})[0].all_text()
             for tr in root.find_all("tr") if tr.find_all("td")}
    assert shown == {f"/runs/{ids[t]}": said for t, said in words.items()}
    assert [tr.find_all("td", **{"class": "tier"})[0].all_text()
            for tr in board_rows(client, "model=tiny&context=256")] == ["submitted, approved", "published here"]


def test_a_run_page_links_its_results_json_and_records_and_says_its_tier(tiered):
    client, ids = tiered

    def bar(tier: str):
        [nav] = parse(ok(client, f"/runs/{ids[tier]}").get_data(as_text=True)).find_all("nav", **{"class": "hub-bar"})
        return nav, {a.all_text(): a.attrs["href"] for a in nav.find_all("a")}

    nav, links = bar("pending")  # on no list, and its page answers by id
    assert "submitted, pending approval" in nav.all_text()
    assert links["results.json"] == f"/runs/{ids['pending']}/results.json"
    for name, data in (("decode-256-x1.parquet", b"PAR1 one"), ("decode-256-x2.parquet", b"PAR1 two")):
        assert links[name] == f"/runs/{ids['pending']}/records/{name}"
        assert ok(client, links[name]).data == data
    document = ok(client, links["results.json"])
    assert json.loads(document.data) == ok(client, f"/api/runs/{ids['pending']}").get_json()
    assert "attachment" in document.headers["Content-Disposition"]
    nav, links = bar("here")
    assert "published here" in nav.all_text() and "records" not in nav.all_text()
    assert links["results.json"] == f"/runs/{ids['here']}/results.json" and not any(".parquet" in k for k in links)
    assert "submitted, approved" in bar("approved")[0].all_text()


def test_models_and_hardware_count_and_link(hub):
    client, _url, _ids = hub
    models = {m["model"]: m for m in ok(client, "/api/models").get_json()}
    assert models["tiny"]["runs"] == 3 and models["tiny"]["contexts"] == [0, 256]
    assert "/leaderboard?model=tiny&context=256" in models["tiny"]["leaderboards"]
    assert 'href="/leaderboard?model=tiny&amp;context=256"' in ok(client, "/models").get_data(as_text=True)
    hardware = {h["hardware"]: h["runs"] for h in ok(client, "/api/hardware").get_json()}
    assert hardware["H100 80GB"] == 1 and hardware["RTX 3090 24GB"] == 1 and len(hardware) == 4
    assert 'href="/runs?hardware=H100+80GB"' in ok(client, "/hardware").get_data(as_text=True)


def test_compare_is_the_compare_page_of_two_stored_runs(hub):
    client, _url, ids = hub
    page = ok(client, f"/compare?a={ids['sim']}&b={ids['fast']}").get_data(as_text=True)
    assert 'data-chart="compare_ratio"' in page
    data = ok(client, f"/api/compare?a={ids['sim']}&b={ids['fast']}").get_json()
    ratios = [f["ratios"][1] for row in data["decode"] for f in row["figures"] if f["figure"] == "total_tok_s"]
    assert ratios and all(r == pytest.approx(2.0) for r in ratios)


def test_the_calculator_is_the_twins_prediction_labelled_predicted(hub):
    client, _url, ids = hub
    got = ok(client, f"/api/calculator?run={ids['sim']}&context=256&users=4&slo=ttft_p99=60s").get_json()
    assert got["provenance"] == "predicted" and got["source"] == f"run {ids['sim']}"
    assert (got["context_tokens"], got["users"], got["max_tokens"]) == (256, 4, 128)
    assert got["decode"]["concurrency"] == 4 and got["decode"]["total_tok_s"] > 0 and got["meets_slo"] is True
    root = parse(ok(client, f"/calculator?run={ids['sim']}&context=256&users=4").get_data(as_text=True))
    assert "Predicted" in root.all_text() and root.find_all("table", **{"class": "calculator"})
    profile = ok(client, "/api/calculator?profile=tiny&context=1K&users=2").get_json()
    assert profile["profile"] == "tiny" and profile["decode"]["total_tok_s"] > 0


def test_markup_in_a_model_name_or_launch_command_is_text(hub):
    client, _url, ids = hub
    for path in ("/runs", f"/runs/{ids['evil']}", "/models", "/hardware", "/leaderboard",
                 f"/leaderboard?model=m{EVIL}&context=256", f"/compare?a={ids['sim']}&b={ids['evil']}",
                 f"/calculator?run={ids['evil']}&context=0&users=1", "/compare"):
        page = ok(client, path).get_data(as_text=True)
        assert "<script" not in page, path
        assert "&lt;script&gt;" in page, path
    assert parse(ok(client, f"/runs/{ids['evil']}").get_data(as_text=True)).find_all("script") == []


def test_bad_parameters_are_one_line_400s_and_unknown_runs_404s(hub):
    client, _url, ids = hub
    assert "context" in one_line(client, "/leaderboard?model=tiny&context=lots", 400)
    assert "context" in one_line(client, "/api/leaderboard?model=tiny&context=lots", 400)
    assert "model is missing" in one_line(client, "/api/leaderboard?context=256", 400)
    assert "concurrency" in one_line(client, "/api/leaderboard?model=tiny&context=256&concurrency=0", 400)
    assert "hardware: one line" in one_line(client, "/leaderboard?model=tiny&context=256&hardware=H100%0aX", 400)
    assert "version: one line" in one_line(client, "/api/leaderboard?model=tiny&context=256&version=0.1%00", 400)
    assert "at most 256" in one_line(client, f"/api/leaderboard?model=tiny&context=256&hardware={'x' * 257}", 400)
    assert "model is missing" in one_line(client, "/leaderboard?hardware=H100+80GB", 400)
    assert "provenance" in one_line(client, "/runs?provenance=guessed", 400)
    assert "since" in one_line(client, "/api/runs?since=yesterday", 400)
    assert "no run" in one_line(client, "/runs/0123456789abcdef", 404)
    assert "no run" in one_line(client, "/api/runs/<script>", 404)
    assert "no run" in one_line(client, f"/compare?a={ids['sim']}&b=ffffffffffffffff", 404)
    assert "b is missing" in one_line(client, f"/compare?a={ids['sim']}", 400)
    assert "users" in one_line(client, f"/calculator?run={ids['sim']}&context=256", 400)
    assert "users" in one_line(client, f"/api/calculator?run={ids['sim']}&context=256&users=-3", 400)
    assert "either run" in one_line(client, "/calculator?context=256&users=1", 400)
    line = one_line(client, "/calculator?profile=/etc/passwd&context=256&users=1", 400)
    assert line == ("profile: '/etc/passwd' is none of the profiles this hub offers: "
                    "rtx3090-r1-qwen14b-awq, tiny")
    assert "slo" in one_line(client, f"/calculator?run={ids['sim']}&context=256&users=1&slo=fast", 400)
    assert "404" in one_line(client, "/nowhere", 404)


def test_the_app_is_read_only(hub):
    client, url, _ids = hub
    for path in ("/runs", "/api/runs", "/leaderboard", "/calculator"):
        for method in (client.post, client.put, client.delete):
            r = method(path, data={"model": "x"})
            assert r.status_code == 405, (path, r.status_code)
    with open_store(url) as store:
        assert store.writable is False and len(store.runs()) == 4


def test_llmload_hub_serves_on_port_0_until_stopped(hub):
    _client, url, ids = hub
    proc = start_llmload("hub", "--db", url, "--bind", "127.0.0.1:0")
    try:
        line = proc.stdout.readline()
        assert line.startswith("llmload hub listening on http://127.0.0.1:"), line
        base = line.split()[4]
        with urllib.request.urlopen(f"{base}/api/leaderboard?model=tiny&context=256", timeout=30) as resp:
            assert [r["id"] for r in json.loads(resp.read())][0] == ids["fast"]
        with urllib.request.urlopen(f"{base}/leaderboard?model=tiny&context=256", timeout=30) as resp:
            assert resp.status == 200 and "H100 80GB" in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(f"{base}/leaderboard?model=tiny&context=x", timeout=30)
        assert bad.value.code == 400
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_llmload_hub_refuses_what_it_cannot_serve_in_one_line(tmp_path):
    assert "no store there" in one_line_error(llmload("hub", "--db", f"sqlite:///{tmp_path / 'none.sqlite'}"))
    assert "--bind" in one_line_error(llmload("hub", "--db", f"sqlite:///{tmp_path / 'x'}", "--bind", "h:port"))
    line = one_line_error(llmload("hub", "--db", f"postgresql://hub:{PASSWORD}@127.0.0.1:1/hub"), code=1)
    assert "postgresql://hub:***@127.0.0.1:1/hub" in line and PASSWORD not in line


# ----------------------------------------------------------------------------- PostgreSQL


def test_the_hub_over_postgresql_fed_by_two_publishers(postgres, sim_run, tmp_path):  # noqa: F811
    url = postgres.new_database()
    runs = machines(sim_run, tmp_path)
    publishers = [subprocess.Popen([sys.executable, "-m", "llmload", "publish", runs["sim"], mine, "--db", url],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for mine in (runs["slow"], runs["fast"])]
    outputs = [p.communicate(timeout=120) for p in publishers]
    assert [p.returncode for p in publishers] == [0, 0], outputs
    with open_store(url) as store:
        client = create_app(store).test_client()
        rows = ok(client, "/api/leaderboard?model=tiny&context=256").get_json()
        assert [r["hardware"] for r in rows][::2] == ["H100 80GB", "RTX 3090 24GB"] and len(rows) == 3
        page = ok(client, "/leaderboard?model=tiny&context=256").get_data(as_text=True)
        # the store's URL is on no page, its password nowhere
        assert "H100 80GB" in page and PASSWORD not in page and "127.0.0.1" not in page
        assert "no run" in one_line(client, "/api/runs/0123456789abcdef", 404)
        assert PASSWORD not in ok(client, "/api/runs").get_data(as_text=True)
    proc = start_llmload("-vv", "hub", "--db", url, "--bind", "127.0.0.1:0")  # logs every request
    try:
        line = proc.stdout.readline()
        base = line.split()[4]
        assert "postgresql://llmload:***@" in line and PASSWORD not in line, line
        with urllib.request.urlopen(f"{base}/leaderboard?model=tiny&context=256", timeout=30) as resp:
            assert PASSWORD not in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}/api/leaderboard?model=tiny&context=no", timeout=30)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "GET /leaderboard" in err and PASSWORD not in out + err and "Traceback" not in err, err[-2000:]
