"""Plain Locust: `locust -f locustfiles/llm.py` headless, distributed, and the web UI tab.
Locust's master and web UI are given port 0 and the tests read the port each chose
(`tests_helpers.listening_ports`)."""

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests_helpers import free_port, listening_ports  # noqa: F401  (free_port: test_browser's)

LOCUSTFILE = str(Path(__file__).resolve().parent.parent / "locustfiles" / "llm.py")
SHORT = ["--llm-prompt-tokens", "64", "--llm-max-tokens", "64"]


@pytest.fixture(scope="module")
def sim(sim_tiny):
    return sim_tiny


def locust(*args):
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", LOCUSTFILE, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def distributed(*master_args) -> tuple[subprocess.Popen, list[subprocess.Popen]]:
    """A headless master on the port it chose (port 0) and two workers connected to it."""
    master = locust("--headless", "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                    "--master-bind-port", "0", *master_args)
    (port,) = listening_ports(master.pid)
    return master, [locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port)) for _ in range(2)]


def web_ui(*args) -> tuple[subprocess.Popen, str]:
    """Locust with its web UI on the port it chose (port 0), and the UI's base URL."""
    p = locust("--web-host", "127.0.0.1", "--web-port", "0", *args)
    (port,) = listening_ports(p.pid)
    return p, f"http://127.0.0.1:{port}"


def table_tokens(output: str) -> int:
    m = re.search(r"output tokens ([\d,]+)", output)
    assert m, output[-3000:]
    return int(m.group(1).replace(",", ""))


def test_headless_run_prints_the_llm_table_and_writes_its_csv(sim, tmp_path):
    p = locust("--headless", "-u", "4", "-r", "4", "-t", "6s", "--host", sim.url, *SHORT,
               "--csv", str(tmp_path / "run"))
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out[-3000:]
    assert "TTFT (ms)" in out and "time between tokens (ms)" in out
    tokens = table_tokens(out)
    assert tokens > 1000
    rows = (tmp_path / "run_llm.csv").read_text()
    assert f"output_tokens,{tokens}" in rows


@pytest.mark.parametrize("endpoint", ["responses", "messages"])
def test_headless_run_on_the_typed_endpoints(sim, endpoint):
    """`--llm-endpoint` takes every protocol: the requests go to its path, and the LLM table
    counts the tokens of its events."""
    p = locust("--headless", "-u", "2", "-r", "2", "-t", "4s", "--host", sim.url, *SHORT, "--llm-endpoint", endpoint)
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out[-3000:]
    assert f"/v1/{endpoint}" in out and "TTFT (ms)" in out
    assert table_tokens(out) > 500


@pytest.mark.parametrize("endpoint", ["embeddings", "rerank"])
def test_headless_run_on_the_pooling_endpoints(sim, endpoint):
    """On an embeddings or rerank endpoint the LLM table has the answers' latency, their
    inputs and input tokens, and no token times."""
    p = locust("--headless", "-u", "2", "-r", "2", "-t", "4s", "--host", sim.url, *SHORT, "--llm-endpoint", endpoint)
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out[-3000:]
    assert f"/v1/{endpoint}" in out and "latency (ms)" in out and "TTFT (ms)" not in out
    m = re.search(r"inputs ([\d,]+) \(.*\) · input tokens ([\d,]+)", out)
    assert m and int(m.group(1).replace(",", "")) > 10, out[-3000:]
    assert int(m.group(2).replace(",", "")) >= 64 * int(m.group(1).replace(",", ""))  # 64 tokens an input


def test_distributed_run_merges_the_workers_figures(sim):
    master, workers = distributed("-u", "4", "-r", "4", "-t", "6s", "--host", sim.url, *SHORT)
    try:
        out, _ = master.communicate(timeout=120)
        worker_out = [w.communicate(timeout=30)[0] for w in workers]
    finally:
        for proc in [master, *workers]:
            if proc.poll() is None:
                proc.kill()
    assert master.returncode == 0, out[-3000:]
    per_worker = [int(re.search(r"llmload worker totals: [\d,]+ requests, (\d+) output tokens", o).group(1))
                  for o in worker_out]
    assert all(t > 0 for t in per_worker)
    # Every token in the master's table came in the workers' reports; it can miss a worker's
    # last report (3 s of its tokens), which Locust's headless master may quit before reading.
    assert sum(per_worker) / 2 < table_tokens(out) <= sum(per_worker)


def count(row: dict) -> int:
    return int(str(row.get("count", "0")).replace(",", "") or 0)


def test_web_ui_has_an_llm_tab_with_live_figures(sim):
    p, base = web_ui("--host", sim.url, "--autostart", "-u", "2", "-r", "2", "-t", "20s", *SHORT)
    try:
        deadline = time.time() + 60
        data = None
        while time.time() < deadline:
            time.sleep(1)
            try:
                with urllib.request.urlopen(f"{base}/stats/requests", timeout=5) as r:
                    data = json.load(r)
            except OSError:
                continue
            rows = {row["figure"]: row for ext in data.get("extended_stats", []) for row in ext["data"]}
            if count(rows.get("TTFT (ms)", {})) > 5:
                break
        assert data is not None, "web UI never answered"
        rows = {row["figure"]: row for ext in data["extended_stats"] for row in ext["data"]}
        assert count(rows["TTFT (ms)"]) > 5
        assert rows["time between tokens (ms)"]["p50"] not in ("—", None)
        # The LLM figures stay out of Locust's own "Aggregated" request table.
        assert all("TTFT" not in s["name"] for s in data["stats"])
        with urllib.request.urlopen(f"{base}/", timeout=5) as r:
            assert "LLM" in r.read().decode()
        with urllib.request.urlopen(f"{base}/llmload/llm.csv", timeout=5) as r:
            assert r.read().decode().startswith("figure,p50,p90,p99,count")
    finally:
        p.terminate()
        p.wait(timeout=30)


@pytest.mark.fault("plain Locust with credentials in --host (`locust -f locustfiles/llm.py --host "
                   "http://u:PASSWORD@HOST/?key=sk-...`, web UI and --html)",
                   "masked as *** in Locust's own pages (`/`, `/stats/report`, the --html report) and output, "
                   "said once; requests still reach HOST (llmload never sends a URL's user, password or query)")
def test_credentials_in_host_never_reach_locusts_own_pages(sim, tmp_path):
    password, key = "pwLLMsecret42", "sk-llmloadHOSTkey0123456789abcd"
    host = sim.url.replace("http://", f"http://user:{password}@") + f"/?key={key}"
    html = tmp_path / "loc.html"
    # The pages stay up 3 s after the run (--autoquit 3): on a busy machine the first render of
    # /stats/report can take most of a 4-s run.
    p, base = web_ui("--host", host, "--autostart", "--autoquit", "3", "-u", "2", "-r", "2", "-t", "4s",
                     "--html", str(html), *SHORT)
    pages = {}
    try:
        deadline = time.time() + 30
        while time.time() < deadline and len(pages) < 2:
            time.sleep(0.5)
            for path in ("/", "/stats/report"):
                try:
                    with urllib.request.urlopen(f"{base}{path}", timeout=5) as r:
                        pages[path] = r.read().decode()
                except OSError:
                    pass
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    assert set(pages) == {"/", "/stats/report"}, out[-2000:]
    pages["--html"] = html.read_text()
    for name, text in [*pages.items(), ("output", out)]:
        assert password not in text and key not in text, f"a credential in {name}"
    assert "key=***" in pages["/"] and "key=***" in pages["--html"]
    assert out.count("credentials in the host are masked") == 1, out[-2000:]
    assert table_tokens(out) > 0  # the masked host still reaches the server


def test_credentials_typed_into_the_start_form_are_masked_too(sim):
    password, key = "pwFORMsecret77", "sk-llmloadFORMkey0123456789abcd"
    p, base = web_ui(*SHORT)
    try:
        swarm(base, {"user_count": 1, "spawn_rate": 1, "run_time": "3s",
                     "host": sim.url.replace("http://", f"http://u:{password}@") + f"?key={key}"})
        time.sleep(1.5)
        for path in ("/", "/stats/report"):
            with urllib.request.urlopen(f"{base}{path}", timeout=5) as r:
                text = r.read().decode()
            assert password not in text and key not in text, f"a credential in {path}"
            assert "key=***" in text, path
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=30)
    assert password not in out and key not in out


def swarm(base: str, fields: dict) -> None:
    """Start a test from the web UI's form (the llmload options are fields of it)."""
    form = urllib.parse.urlencode(fields)
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{base}/swarm", data=form.encode(), timeout=5) as r:
                assert json.load(r)["success"]
            return
        except OSError:
            assert time.time() < deadline, "web UI never answered"
            time.sleep(0.3)


def stats_rows(base: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"{base}/stats/requests", timeout=5) as r:
        return {row["name"]: row for row in json.load(r)["stats"] if row["name"] != "Aggregated"}


@pytest.mark.parametrize("workload, fields, names", [
    ("sessions", {"llm_system_prompt_tokens": 256, "llm_turns": 2, "llm_turn_tokens": 32, "llm_max_tokens": 16},
     {"session turn 1", "session turn 2"}),
    ("rate", {"llm_rate": 4, "llm_arrivals": "constant", "llm_max_tokens": 16}, {"/v1/completions"}),
])
def test_the_web_ui_form_runs_each_workload(sim, workload, fields, names):
    p, base = web_ui(*SHORT)
    try:
        swarm(base, {"user_count": 2, "spawn_rate": 2, "host": sim.url, "llm_workload": workload, **fields})
        deadline = time.time() + 30
        rows: dict = {}
        while time.time() < deadline:
            time.sleep(0.5)
            rows = stats_rows(base)
            if names <= set(rows) and all(rows[n]["num_requests"] >= 2 for n in names):
                break
        assert names <= set(rows), rows.keys()
        assert all(rows[n]["num_failures"] == 0 for n in names), rows
        if workload == "rate":  # 2 users × 4 requests/s each: 8/s on schedule, not one at a time
            first = rows["/v1/completions"]["num_requests"]
            time.sleep(6.0)  # the UI's table is refreshed every couple of seconds
            sent = stats_rows(base)["/v1/completions"]["num_requests"] - first
            assert 8 * 3 <= sent <= 8 * 9, sent
    finally:
        p.terminate()
        p.communicate(timeout=30)
