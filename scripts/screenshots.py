"""The README's screenshots: the seed scenario's report on the simulator, and a compare page.

    python scripts/screenshots.py                       # runs everything (about 7 minutes)
    python scripts/screenshots.py --seed-results DIR    # reuse a finished seed run

Runs `llmload run scenarios/seed-3090.yaml` against the embedded simulator (unless given a
finished run), and the quick demo twice on the `tiny` profile, the second time with a
slower decode step and twice the KV cache (`tiny-slow-bigkv`), compares them with
`llmload compare`, and photographs report.html and the compare page in headless Chromium
(Debian's `chromium` + `chromium-driver`, through Selenium — install with `pip install
-e '.[test]'`; nothing is downloaded). Writes docs/img/report-seed-sim.png and
docs/img/compare-quick.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
WIDTH = 1280
#: The slower server of the compare example: 1.5× the decode step, twice the KV cache.
SLOW_BIG_KV = {"base": "tiny", "step_base_ms": 3.0, "num_gpu_blocks": 4096}


def llmload(*args: str, cwd: Path = ROOT) -> None:
    print("$ llmload", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "llmload", *args], check=True, cwd=cwd)


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},1000", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def photograph(driver, page: Path, png: Path, *, until_selector: str | None, max_height: int) -> None:
    """The page from its top down to the bottom of `until_selector` (or all of it)."""
    driver.set_window_size(WIDTH, 1000)
    driver.get(page.resolve().as_uri())
    height = driver.execute_script("return document.documentElement.scrollHeight")
    if until_selector:
        height = driver.execute_script(
            "const e = document.querySelector(arguments[0]);"
            " return e ? Math.ceil(e.getBoundingClientRect().bottom + window.scrollY + 24) : arguments[1]",
            until_selector, height)
    chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
    driver.set_window_size(WIDTH, min(int(height), max_height) + int(chrome))
    png.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(png))
    print(f"wrote {png.relative_to(ROOT)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed-results", help="a finished `llmload run scenarios/seed-3090.yaml` directory")
    parser.add_argument("--work", help="where to keep the runs (default: a temporary directory)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="llmload-shots-"))
    work.mkdir(parents=True, exist_ok=True)

    seed = Path(args.seed_results) if args.seed_results else work / "seed"
    if not args.seed_results:
        llmload("run", "scenarios/seed-3090.yaml", "--out", str(seed))
    llmload("report", str(seed))  # the page as this llmload draws it

    profile = work / "tiny-slow-bigkv.json"
    profile.write_text(json.dumps(SLOW_BIG_KV))
    llmload("run", "scenarios/quick.yaml", "--out", str(work / "quick-tiny"))
    llmload("run", "scenarios/quick.yaml", "--sim-profile", str(profile), "--out", str(work / "quick-slow-bigkv"))
    compare_page = work / "compare.html"
    # From the work directory, so the page names the runs by their short names.
    llmload("compare", "quick-tiny", "quick-slow-bigkv", "--html", str(compare_page), cwd=work)

    driver = browser()
    try:
        photograph(driver, seed / "report.html", OUT / "report-seed-sim.png",
                   until_selector="#chart-scaling", max_height=3200)
        photograph(driver, compare_page, OUT / "compare-quick.png",
                   until_selector="#chart-compare_curves", max_height=3200)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
