"""Plain Locust with --html: the companion PREFIX_llm.html (table and charts over time),
in one process and merged from workers."""

import re
from pathlib import Path

from html_check import external_urls, parse
from test_locust_mode import SHORT, distributed, locust, sim  # noqa: F401  (sim: a fixture)


def companion_of(out: str, html: Path) -> tuple[str, object]:
    companion = html.with_name(html.stem + "_llm.html")
    assert f"LLM figures and charts (beside Locust's report): {companion}" in out, out[-2000:]
    page = companion.read_text()
    return page, parse(page)


def requests_in(root) -> int:
    (table,) = root.find_all("table", **{"class": "llm"})
    rows = {tr.find_all("td")[0].all_text(): tr.find_all("td")[1].all_text()
            for tr in table.find_all("tr")[1:]}
    return int(rows["requests"].replace(",", ""))


def test_headless_run_writes_the_llm_page_beside_locusts_report(sim, tmp_path):
    html = tmp_path / "run.html"
    p = locust("--headless", "-u", "4", "-r", "4", "-t", "7s", "--host", sim.url, *SHORT,
               "--html", str(html))
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out[-3000:]
    assert html.exists()  # Locust's own report is untouched
    page, root = companion_of(out, html)
    assert external_urls(root, page) == [] and not root.find_all("script")
    (chart,) = root.find_all("svg", **{"data-chart": "live"})
    texts = chart.texts()
    assert {"Output tok/s", "TTFT", "Time between tokens", "Requests in flight (users)"} <= set(texts)
    requests = int(re.search(r"requests ([\d,]+) \(failed", out).group(1).replace(",", ""))
    assert requests_in(root) == requests > 10


def test_distributed_llm_page_merges_the_workers(sim, tmp_path):
    html = tmp_path / "dist.html"
    master, workers = distributed("-u", "4", "-r", "4", "-t", "8s", "--host", sim.url, *SHORT, "--html", str(html))
    try:
        out, _ = master.communicate(timeout=120)
        worker_out = [w.communicate(timeout=30)[0] for w in workers]
    finally:
        for proc in [master, *workers]:
            if proc.poll() is None:
                proc.kill()
    assert master.returncode == 0, out[-3000:]
    per_worker = [int(re.search(r"llmload worker totals: ([\d,]+) requests", o).group(1).replace(",", ""))
                  for o in worker_out]
    assert all(n > 0 for n in per_worker)
    page, root = companion_of(out, html)
    # The master runs no user: every request on its page came in the workers' reports. (Its
    # sum can miss a worker's last report, which Locust's headless master may quit before
    # reading; the page shows exactly what the master's table shows.)
    printed = int(re.search(r"requests ([\d,]+) \(failed", out).group(1).replace(",", ""))
    assert requests_in(root) == printed
    assert sum(per_worker) / 2 < printed <= sum(per_worker)
    assert root.find_all("svg", **{"data-chart": "live"}), "the master drew points from the workers' reports"
