"""The hub's pages in headless Chromium (tests/test_browser.py's browser, fixtures and skip
rule): `llmload hub` on port 0 over a SQLite store of four runs of one model on four
"machines" (tests/test_hub_app.py's `machines`); the leaderboard and a run page render
without a JavaScript error, their tables in the DOM. The leaderboard's screenshot is saved as
docs/img/hub-leaderboard.png when LLMLOAD_DOCS_IMAGES=1 (docs/hub.md shows it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_browser import CHROMEDRIVER, CHROMIUM, MISSING, assert_not_blank, browser, screenshot, shots  # noqa: F401
from test_hub_app import machines, sim_run  # noqa: F401  (sim_run: a fixture)
from tests_helpers import llmload, start_llmload

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)
DOCS_IMAGE = Path(__file__).resolve().parent.parent / "docs" / "img" / "hub-leaderboard.png"


@pytest.fixture(scope="module")
def hub_url(sim_run, tmp_path_factory):  # noqa: F811
    base = tmp_path_factory.mktemp("hubweb")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    runs = machines(sim_run, base)
    assert llmload("publish", *runs.values(), "--db", url).returncode == 0
    proc = start_llmload("hub", "--db", url, "--bind", "127.0.0.1:0")
    try:
        line = proc.stdout.readline()
        assert line.startswith("llmload hub listening on "), line + proc.stderr.read()
        yield line.split()[4]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def js_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_the_leaderboard_in_chromium(browser, hub_url, shots):  # noqa: F811
    browser.set_window_size(1280, 700)
    browser.get(f"{hub_url}/leaderboard?model=tiny&context=256")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('table.leaderboard tbody tr')].map(r => r.cells[2].textContent)")
    assert [r.split(" (")[0] for r in rows] == ["H100 80GB", rows[1].split(" (")[0], "RTX 3090 24GB"]
    assert browser.execute_script("return document.querySelectorAll('script').length") == 0
    assert js_errors(browser) == []
    path = screenshot(browser, shots / "hub-leaderboard.png", full_page=False)
    assert_not_blank(path)
    if os.environ.get("LLMLOAD_DOCS_IMAGES") == "1":
        DOCS_IMAGE.write_bytes(path.read_bytes())


def test_a_run_page_in_chromium(browser, hub_url, shots):  # noqa: F811
    import json
    import urllib.request
    with urllib.request.urlopen(f"{hub_url}/api/leaderboard?model=tiny&context=256", timeout=30) as resp:
        best = json.loads(resp.read())[0]
    browser.set_window_size(1280, 1000)
    browser.get(f"{hub_url}{best['url']}")
    assert browser.title.startswith("Speed test matrix")
    assert browser.execute_script("return document.querySelectorAll('table').length") > 0
    assert browser.execute_script("return document.querySelector('nav.hub-bar a').getAttribute('href')") == "/runs"
    charts = browser.execute_script("return document.querySelectorAll('svg.chart').length")
    assert charts >= 3 and js_errors(browser) == []
    assert_not_blank(screenshot(browser, shots / "hub-run.png"))


def test_two_runs_compared_in_chromium(browser, hub_url, shots):  # noqa: F811
    import json
    import urllib.request
    with urllib.request.urlopen(f"{hub_url}/api/leaderboard?model=tiny&context=256", timeout=30) as resp:
        rows = json.loads(resp.read())
    a, b = rows[0]["id"], rows[1]["id"]
    browser.set_window_size(1280, 1000)
    browser.get(f"{hub_url}/compare?a={a}&b={b}")
    assert browser.execute_script("return document.querySelectorAll('table.runs tbody tr, table.runs tr').length") >= 2
    assert browser.execute_script("return document.querySelector('nav.hub-bar a').getAttribute('href')") == "/runs"
    assert js_errors(browser) == []
    assert_not_blank(screenshot(browser, shots / "hub-compare.png"))
