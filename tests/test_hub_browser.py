"""The hub's pages in headless Chromium (tests/test_browser.py's browser, fixtures and skip
rule): `llmload hub` on port 0 over a SQLite store of four runs of one model on four
"machines" (tests/test_hub_app.py's `machines`); the leaderboard and a run page render
without a JavaScript error (a style the Content-Security-Policy refused is one), their tables
in the DOM, and a report page's every element is styled as the same report.html opened from a
file (the hub turns its style attributes into classes, llmload/hub/security.py); a leaderboard row's hardware
link and launch command (a details element), and its hardware filter. The leaderboard's screenshot is saved as
docs/img/hub-leaderboard.png when LLMLOAD_DOCS_IMAGES=1 (docs/hub.md shows it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_browser import CHROMEDRIVER, CHROMIUM, MISSING, assert_not_blank, browser, screenshot, shots  # noqa: F401
from test_hub_app import LAUNCH, machines, sim_run  # noqa: F401  (sim_run: a fixture)
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


STYLED = ("display", "color", "background-color", "fill", "fill-opacity", "stroke", "stroke-width",
          "stroke-dasharray", "stroke-linecap", "stroke-linejoin", "stroke-opacity", "opacity", "font-size",
          "font-family", "font-weight", "font-style", "text-anchor", "text-align", "white-space", "clip-path",
          "border-top-width", "padding-left", "width", "height")


def computed_styles(driver) -> list[list[str]]:
    """Every element under the body but the hub's bar: its tag and computed STYLED values."""
    return driver.execute_script(
        "const out = []; for (const e of document.body.querySelectorAll('*')) {"
        " if (e.closest('nav.hub-bar')) continue; const s = getComputedStyle(e);"
        " out.push([e.tagName, ...arguments[0].map(p => s.getPropertyValue(p))]); } return out;", list(STYLED))


def same_styles_as_the_report(driver, hub_page: str, report_html: str, tmp: Path) -> int:
    """The hub's page and the same report.html from a file, element by element; returns how
    many elements were compared."""
    driver.get(hub_page)
    assert driver.execute_script("return document.querySelectorAll('[style]').length") == 0
    got = computed_styles(driver)
    assert js_errors(driver) == []  # no style refused by the policy
    (tmp / "report.html").write_text(report_html)
    driver.get((tmp / "report.html").as_uri())
    want = computed_styles(driver)
    assert len(got) == len(want) and got == want
    return len(got)


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
    # each row's hardware links its runs; its launch command opens from a details element (no script)
    first = "document.querySelector('table.leaderboard tbody tr')"
    assert browser.execute_script(f"return {first}.querySelector('a.hardware').getAttribute('href')") == \
        "/runs?hardware=H100+80GB"
    pre = f"{first}.querySelector('details.launch pre')"
    assert browser.execute_script(f"return [{pre}.parentElement.open, {pre}.checkVisibility()]") == [False, False]
    browser.execute_script(f"{first}.querySelector('details.launch summary').click()")
    assert browser.execute_script(f"return [{pre}.parentElement.open, {pre}.checkVisibility()]") == [True, True]
    assert browser.execute_script(f"return {pre}.textContent") == LAUNCH
    options = browser.execute_script(
        "return [...document.querySelectorAll('select[name=hardware] option')].map(o => o.textContent)")
    assert options[0] == "any" and {"H100 80GB", "RTX 3090 24GB"} <= set(options) and len(options) == 4
    browser.execute_script("const s = document.querySelector('select[name=hardware]'); s.value = 'RTX 3090 24GB';"
                           "s.form.submit()")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('table.leaderboard tbody tr')].map(r => r.cells[2].textContent)")
    assert [r.split(" (")[0] for r in rows] == ["RTX 3090 24GB"] and js_errors(browser) == []


def test_a_run_page_in_chromium(browser, hub_url, shots, tmp_path):  # noqa: F811
    import json
    import urllib.request
    from llmload.core.model.document import results_from_dict
    from llmload.output.pages.report import render_html
    with urllib.request.urlopen(f"{hub_url}/api/leaderboard?model=tiny&context=256", timeout=30) as resp:
        best = json.loads(resp.read())[0]
    with urllib.request.urlopen(f"{hub_url}/api/runs/{best['id']}", timeout=30) as resp:
        report = render_html(results_from_dict(json.loads(resp.read()), source="hub"))
    assert report.count('style="') > 100  # matplotlib's SVG
    assert same_styles_as_the_report(browser, f"{hub_url}{best['url']}", report, tmp_path) > 500
    browser.set_window_size(1280, 1000)
    browser.get(f"{hub_url}{best['url']}")
    assert browser.title.startswith("Speed test matrix")
    assert browser.execute_script("return document.querySelectorAll('table').length") > 0
    assert browser.execute_script("return document.querySelector('nav.hub-bar a').getAttribute('href')") == "/runs"
    charts = browser.execute_script("return document.querySelectorAll('svg.chart').length")
    assert charts >= 3 and js_errors(browser) == []
    assert_not_blank(screenshot(browser, shots / "hub-run.png"))


def test_two_runs_compared_in_chromium(browser, hub_url, shots, tmp_path):  # noqa: F811
    import json
    import urllib.request
    from llmload.core.model.document import results_from_dict
    from llmload.output.pages.report import compare_runs as compare
    from llmload.output.pages.comparepage import render_html
    with urllib.request.urlopen(f"{hub_url}/api/leaderboard?model=tiny&context=256", timeout=30) as resp:
        rows = json.loads(resp.read())
    a, b = rows[0]["id"], rows[1]["id"]
    docs = []
    for rid in (a, b):
        with urllib.request.urlopen(f"{hub_url}/api/runs/{rid}", timeout=30) as resp:
            docs.append(results_from_dict(json.loads(resp.read()), source=rid))
    page = render_html(compare(docs, [f"run {a}", f"run {b}"]))
    assert same_styles_as_the_report(browser, f"{hub_url}/compare?a={a}&b={b}", page, tmp_path) > 500
    browser.set_window_size(1280, 1000)
    browser.get(f"{hub_url}/compare?a={a}&b={b}")
    assert browser.execute_script("return document.querySelectorAll('table.runs tbody tr, table.runs tr').length") >= 2
    assert browser.execute_script("return document.querySelectorAll('svg.chart').length") >= 3
    assert browser.execute_script("return document.querySelector('nav.hub-bar a').getAttribute('href')") == "/runs"
    assert js_errors(browser) == []
    assert_not_blank(screenshot(browser, shots / "hub-compare.png"))


def test_the_policy_holds_in_chromium(browser, hub_url):  # noqa: F811
    """The hub's own pages take their styles from its static files; a style or script that
    a page did not come with (as markup slipping past the escaping would be) is refused."""
    browser.get(f"{hub_url}/calculator")
    header = browser.execute_script("return getComputedStyle(document.querySelector('header')).backgroundColor")
    assert header == "rgb(31, 42, 55)" and js_errors(browser) == []  # /static/hub.css
    browser.execute_script(
        "document.head.insertAdjacentHTML('beforeend', '<style>body { color: rgb(255, 0, 0) }</style>');"
        "document.body.setAttribute('style', 'background: rgb(0, 255, 0)');"
        "const s = document.createElement('script'); s.textContent = 'window.injected = 1';"
        "document.body.appendChild(s);")
    styles = browser.execute_script(
        "const b = getComputedStyle(document.body); return [b.color, b.backgroundColor, window.injected || 0]")
    assert styles == ["rgb(26, 26, 26)", "rgba(0, 0, 0, 0)", 0]
    refused = js_errors(browser)
    assert len(refused) == 3 and all("Content Security Policy" in line for line in refused), refused
