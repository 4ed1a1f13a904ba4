"""The hub with many runs (benchmarks/hub_load.py measures it under load; docs/hub.md): lists
come a page at a time, a run's page is rendered once while its tier and records stay the
same, and the store's lists and leaderboards are read again only when it lists more runs."""

from __future__ import annotations

import json

import pytest

from llmload.core.model.document import results_from_dict
from llmload.hub.app import PAGE_RUNS, create_app
from llmload.hub.publish import RunToPublish, publish, read_run, run_id
from llmload.hub.store import open_store
from tests_helpers import llmload

RUNS = 250


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    base = tmp_path_factory.mktemp("scale")
    r = llmload("predict", "tiny", "--contexts", "0,1K", "--concurrency", "1,2", "--prefill-contexts", "",
                "--max-tokens", "32", "--duration", "5s", "--out", base / "template")
    assert r.returncode == 0, r.stdout + r.stderr
    template = read_run(base / "template")
    url = f"sqlite:///{base / 'hub.sqlite'}"
    with open_store(url, write=True) as store:
        for i in range(RUNS):
            doc = json.loads(json.dumps(template.document))
            doc["server"]["model"] = f"model-{i % 5}"
            doc["started_at"] = f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00+00:00"
            publish(store, RunToPublish(folder=template.folder, results=results_from_dict(doc), document=doc,
                                        id=run_id(doc)))
    with open_store(url) as store:
        yield store


def test_runs_come_a_page_at_a_time(many):
    client = create_app(many).test_client()
    first = client.get("/api/runs").get_json()
    assert len(first) == PAGE_RUNS == 100
    pages = [first] + [client.get(f"/api/runs?page={n}").get_json() for n in (2, 3, 4)]
    assert [len(p) for p in pages] == [100, 100, 50, 0]
    ids = [r["id"] for p in pages for r in p]
    assert len(set(ids)) == RUNS  # every run once, newest first across the pages
    started = [r["started_at"] for p in pages for r in p]
    assert started == sorted(started, reverse=True)
    html = client.get("/runs?model=model-1&page=2").get_data(as_text=True)
    assert "50 runs" in html and "page 2" not in html  # 50 of model-1: one page
    html = client.get("/runs?page=2").get_data(as_text=True)
    assert "250 runs: 101–200 (page 2 of 3)" in html
    assert 'href="?page=1" rel="prev"' in html and 'href="?page=3" rel="next"' in html
    assert client.get("/api/runs?page=0").status_code == 400


def test_a_run_page_is_rendered_once(many, monkeypatch):
    from llmload.output.pages import build
    calls = []
    real = build.build_page
    monkeypatch.setattr(build, "build_page", lambda results: calls.append(1) or real(results))
    client = create_app(many).test_client()
    rid = client.get("/api/runs").get_json()[0]["id"]
    first, second = client.get(f"/runs/{rid}"), client.get(f"/runs/{rid}")
    assert first.status_code == second.status_code == 200 and first.data == second.data
    assert first.headers["Content-Security-Policy"] == second.headers["Content-Security-Policy"]
    assert len(calls) == 1


def test_lists_of_the_whole_store_are_read_again_only_when_it_lists_more_runs(many, monkeypatch):
    """A list or a leaderboard is kept while the store lists as many runs at the same prices:
    the second ask costs one query (the runs' count and the prices' fingerprint), not the
    scan; a run added (published or approved) or a price set reads it again."""
    reads = []
    real = many.rows
    monkeypatch.setattr(many, "rows", lambda query: reads.append(str(query)) or real(query))
    many._aggregates.clear()
    first = many.models()
    assert len(reads) == 2 and sum(m.runs for m in first) == RUNS  # the check and the scan
    board = many.leaderboard("tiny", 256)
    scanned = len(reads)  # the check, the scan and the prices it ranks with
    again, board_again = many.models(), many.leaderboard("tiny", 256)
    assert (again, board_again) == (first, board) and len(reads) == scanned + 2
    assert all("count" in q.lower() and "hardware_prices" in q for q in reads[-2:])
    generation = many._generation_now()  # one more read
    monkeypatch.setattr(many, "_generation_now", lambda: (generation[0] + 1, *generation[1:]))  # a run published
    assert many.models() == first and len(reads) == scanned + 3 + 1  # read again: the scan


def test_alike_reads_under_way_are_made_once_and_threads_are_bounded():
    """Fifty visitors asking the same list at once make one read of the store; and no more
    than offloop.THREADS reads run in threads at once (the loop keeps its share of Python)."""
    import threading
    import time

    import gevent

    from llmload.hub import offloop

    class Slow:
        def __init__(self):
            self.calls, self.running, self.most = 0, 0, 0
            self.lock = threading.Lock()

        def models(self):
            return self.work()

        def hardware(self, which):
            return self.work()

        def work(self):
            with self.lock:
                self.calls += 1
                self.running += 1
                self.most = max(self.most, self.running)
            time.sleep(0.1)
            with self.lock:
                self.running -= 1
            return ["answer"]

    slow = Slow()
    reads = offloop.OffLoop(slow)
    alike = [gevent.spawn(reads.models) for _ in range(50)]
    gevent.joinall(alike)
    assert [g.value for g in alike] == [["answer"]] * 50 and slow.calls == 1
    different = [gevent.spawn(reads.hardware, i) for i in range(12)]
    gevent.joinall(different)
    assert slow.calls == 13 and slow.most == offloop.THREADS
