"""The pages in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`,
driven by Selenium through the system chromedriver; nothing is downloaded).

Opens report.html and the compare page from disk and the web UI's LLM tab during a short
Locust run against the simulator; saves a screenshot of each (in the test's temporary
directory, or in $LLMLOAD_SCREENSHOTS when set) and checks that it is not blank and that
the charts are in the DOM, drawn at a real size. `.ci/run` installs Chromium when missing;
without it these tests skip, loudly.
"""

import os
import shutil
import time
from pathlib import Path

import pytest

from llmload.output.rundir.comparedirs import compare_dirs
from test_locust_mode import SHORT, free_port, locust, sim  # noqa: F401  (sim: a fixture)

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and os.path.exists(p)), None)
CHROMEDRIVER = next((p for p in (shutil.which("chromedriver"), "/usr/bin/chromedriver",
                                 "/usr/lib/chromium/chromedriver") if p and os.path.exists(p)), None)
MISSING = ("!!! HEADLESS CHROMIUM IS NOT INSTALLED: the browser tests of report.html, the compare "
           "page and the web UI did NOT run. Install Debian's `chromium` and `chromium-driver` "
           "(`.ci/run` does) !!!")

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--hide-scrollbars", "--no-first-run",
                "--disable-background-networking", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    where = os.environ.get("LLMLOAD_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        return Path(where)
    return tmp_path_factory.mktemp("screenshots")


def screenshot(driver, path: Path, *, full_page: bool = True) -> Path:
    if full_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(int(height), 600), 6000))
    assert driver.save_screenshot(str(path)), path
    return path


def assert_not_blank(path: Path) -> None:
    from matplotlib.image import imread

    pixels = imread(str(path))[:, :, :3]
    assert pixels.shape[0] >= 300 and pixels.shape[1] >= 800, pixels.shape
    ink = (pixels.min(axis=2) < 0.85).mean()  # share of pixels that are not (near) white
    colours = len({tuple(p) for p in (pixels[::7, ::7] * 255).astype(int).reshape(-1, 3)})
    assert ink > 0.02, f"{path.name}: {ink:.1%} of the page is not white"
    assert colours > 40, f"{path.name}: only {colours} colours"
    assert pixels.std() > 0.05


def drawn_charts(driver, selector: str) -> dict[str, tuple[int, int]]:
    """Chart id → rendered (width, height) in CSS pixels."""
    return driver.execute_script(
        "const out = {}; for (const s of document.querySelectorAll(arguments[0])) {"
        " const r = s.getBoundingClientRect(); out[s.dataset.chart] = [r.width, r.height]; }"
        " return out;", selector)


def network_resources(driver) -> list[str]:
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => !n.startsWith('data:') && !n.startsWith('file:'))")


def test_report_html_in_chromium(browser, two_sim_runs, shots):
    out, _ = two_sim_runs["A"]
    browser.set_window_size(1280, 1000)
    browser.get((out / "report.html").resolve().as_uri())
    assert browser.title.startswith("Speed test matrix")
    charts = drawn_charts(browser, "svg.chart")
    for key in ("heatmap", "scaling", "latency", "prefill"):
        width, height = charts[key]
        assert width > 300 and height > 120, (key, charts[key])
    word = browser.execute_script(
        "const w = document.querySelector('.simulated .word'), h = document.querySelector('h1');"
        " return [w.textContent, getComputedStyle(w).fontSize, getComputedStyle(h).fontSize]")
    assert word[0] == "Simulated" and word[1] == word[2]
    assert network_resources(browser) == []
    assert_not_blank(screenshot(browser, shots / "report.png"))


def test_compare_page_in_chromium(browser, two_sim_runs, shots, tmp_path):
    page = tmp_path / "compare.html"
    compare_dirs([str(two_sim_runs["A"][0]), str(two_sim_runs["B"][0])], html_path=str(page))
    browser.set_window_size(1280, 1000)
    browser.get(page.resolve().as_uri())
    charts = drawn_charts(browser, "svg.chart")
    for key in ("compare_ratio", "compare_curves", "compare_prefill"):
        assert charts[key][0] > 300 and charts[key][1] > 120, (key, charts)
    ratios = browser.execute_script(
        "return [...document.querySelectorAll('table.compare-decode td.ratio')].map(t => t.textContent)")
    assert any(r.startswith("0.5") for r in ratios)
    assert network_resources(browser) == []
    assert_not_blank(screenshot(browser, shots / "compare.png"))


def test_web_ui_llm_tab_draws_charts_during_a_run(browser, sim, shots):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = free_port()
    p = locust("--host", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
               "-u", "4", "-r", "4", "-t", "60s", *SHORT)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 60
        while True:
            try:
                browser.get(url)
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(1)
        browser.set_window_size(1280, 1000)
        # The user's way in: click the tab.
        WebDriverWait(browser, 30).until(
            lambda d: [t for t in d.find_elements(By.CSS_SELECTOR, "[role=tab]") if t.text.strip() == "LLM"])
        tab = next(t for t in browser.find_elements(By.CSS_SELECTOR, "[role=tab]") if t.text.strip() == "LLM")
        tab.click()
        lines = "#llmload-live svg path.llmload-line"
        # Six lines (tok/s, TTFT p50/p99, TBT p50/p99, users), each through three points or more.
        WebDriverWait(browser, 60, poll_frequency=1).until(
            lambda d: d.execute_script(
                "const p = [...document.querySelectorAll(arguments[0])];"
                " return p.length >= 6 && p.every(e => (e.getAttribute('d').match(/L/g) || []).length >= 2)",
                lines))
        charts = drawn_charts(browser, "#llmload-live svg")
        assert set(charts) == {"tok", "ttft", "tbt", "users"}
        assert all(w > 300 and h > 100 for w, h in charts.values()), charts
        # Under the LLM table, in the page's flow.
        assert browser.execute_script(
            "const t = [...document.querySelectorAll('th')].find(h => h.textContent.trim() === 'LLM figure');"
            " const s = document.getElementById('llmload-live');"
            " return !!t && s.style.display === 'block' &&"
            " s.getBoundingClientRect().top >= t.closest('table').getBoundingClientRect().bottom - 1")
        screenshot(browser, shots / "webui-llm-tab.png", full_page=False)
        assert_not_blank(shots / "webui-llm-tab.png")
        # Another tab hides the charts; back on the LLM tab they are there again.
        stats = next(t for t in browser.find_elements(By.CSS_SELECTOR, "[role=tab]")
                     if t.text.strip().upper() == "STATISTICS")
        stats.click()
        WebDriverWait(browser, 10).until(
            lambda d: d.execute_script("return document.getElementById('llmload-live').style.display") == "none")
        next(t for t in browser.find_elements(By.CSS_SELECTOR, "[role=tab]") if t.text.strip() == "LLM").click()
        WebDriverWait(browser, 10).until(
            lambda d: d.execute_script("return document.getElementById('llmload-live').style.display") == "block")
    finally:
        p.terminate()
        p.wait(timeout=30)
