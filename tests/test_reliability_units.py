"""Pure parts of issue 9: the secret scrubber, stall detection, exit codes, the ETA clock."""

import logging

from dataclasses import replace

import pytest

from llmload.core.model.cell import CellResult
from llmload.core.figures.status import STALL_MIN_S, longest_stall, stall_bound_s
from llmload.core.exitcodes import cell_error_rate, cells_over_error_rate
from llmload.core.model.records import RequestRecord
from llmload.core.redact import MASK, Scrubber, SecretFilter
from llmload.core.model.document import cell_to_dict
from llmload.core.model.results import new_results
from llmload.matrix.console import eta_clock
from tests_helpers import cell_of, record

KEY = "sk-abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize("text, expected", [
    ("vllm serve m --api-key abc123def", "vllm serve m --api-key ***"),
    ("vllm serve m --api_key abc123def --port 8000", "vllm serve m --api_key *** --port 8000"),
    ("--api-key=abc123def", "--api-key=***"),
    ("--hf-token hf_abcdefghijklmnopqrstu", "--hf-token ***"),
    ("OPENAI_API_KEY=abc123def HF_TOKEN=xyz789xyz llmload run", "OPENAI_API_KEY=*** HF_TOKEN=*** llmload run"),
    ("curl -H 'Authorization: Bearer abc.def-ghi'", "curl -H 'Authorization: Bearer ***'"),
    ("http://h:8000/v1?api_key=abc123&x=1", "http://h:8000/v1?api_key=***&x=1"),
    ("https://h/v1?access_token=abc#f", "https://h/v1?access_token=***#f"),
    ("https://user:pa55word@h/v1", "https://user:***@h/v1"),
    ("quantization=AWQ,token=abc123,backend=cuda", "quantization=AWQ,token=***,backend=cuda"),
    ('{"api_key": "abc123"}', '{"api_key": "***"}'),
    ("leaked ghp_abcdefghijklmnopqrstuvwxyz0123 here", "leaked *** here"),
])
def test_usual_key_patterns_are_masked(text, expected):
    assert Scrubber().scrub(text) == expected


@pytest.mark.parametrize("text", [
    "--max-tokens 256 --max_tokens 8192", "max_tokens=256", '{"prompt_tokens": 12, "token_source": "chunks"}',
    "decode 16K × 4: 1,234 tok/s total", "--kv-cache-tokens 100000", "HTTP 500: engine died",
])
def test_figures_are_not_secrets(text):
    assert Scrubber().scrub(text) == text


def test_known_keys_are_masked_anywhere_also_url_encoded():
    s = Scrubber(["my key/with+odd=chars"])
    assert s.scrub("got my key/with+odd=chars!") == f"got {MASK}!"
    assert s.scrub("q=my%20key%2Fwith%2Bodd%3Dchars") == f"q={MASK}"
    s.add_known_from_url("http://h/v1?signature=zz-top-secret&model=x")
    assert s.scrub("echo zz-top-secret") == f"echo {MASK}"
    s.add_known("abc")  # too short to mask by value without masking ordinary words
    assert s.scrub("abcdef") == "abcdef"


def test_documents_drop_secret_keys_and_mask_secret_named_values():
    doc = {"headers": {"Authorization": "x"}, "server": {"token": "t0k", "token_source": "chunks"},
           "launch_command": f"--api-key {KEY}", "cells": [{"error_samples": [f"bad key {KEY}"]}], "n": 3}
    out = Scrubber().scrub_obj(doc)
    assert out == {"server": {"token": MASK, "token_source": "chunks"}, "launch_command": f"--api-key {MASK}",
                   "cells": [{"error_samples": [f"bad key {MASK}"]}], "n": 3}


def test_the_log_filter_masks_messages_and_tracebacks():
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "request with %s failed", (f"Bearer {KEY}",), None)
    try:
        raise RuntimeError(f"key {KEY}")
    except RuntimeError:
        import sys
        record.exc_info = sys.exc_info()
    assert SecretFilter(Scrubber([KEY])).filter(record)
    text = logging.Formatter().format(record)
    assert KEY not in text and "request with Bearer *** failed" in text and "key ***" in text


def rec(times, *, end, status="cancelled", finish=None, user="u"):
    """A request sent 50 ms before its first token, one token per chunk at `times`."""
    return record(user, times[0] - 0.05, [(t, 1) for t in times], end, status=status, finish=finish)


def test_longest_stall_counts_silence_after_the_first_token_inside_the_window():
    t0, t1 = 100.0, 110.0
    steady = rec([100.1 + 0.02 * i for i in range(400)], end=t1)
    frozen = rec([100.2, 100.22, 100.24], end=t1, user="frozen")  # open, silent till the window end
    stall = longest_stall([steady, frozen], t0, t1)
    assert stall.user_id == "frozen" and stall.gap_s == pytest.approx(110.0 - 100.24)
    # A request that finished normally is not silent after its last token.
    done = rec([100.2, 100.22], end=100.23, status="ok", finish="length")
    assert longest_stall([done], t0, t1).gap_s == pytest.approx(0.02)
    # Silence before t0 does not count; nothing streamed at all is not a stall.
    early = rec([90.0, 100.5], end=100.6, status="ok", finish="length")
    assert longest_stall([early], t0, t1).gap_s == pytest.approx(0.5)
    assert longest_stall([RequestRecord(user_id="q", send_s=100.0, end_s=t1, status="cancelled")], t0, t1) is None


def test_stall_bound_is_a_multiple_of_tbt_but_never_below_the_floor():
    assert stall_bound_s(None) == STALL_MIN_S
    assert stall_bound_s(20.0) == STALL_MIN_S
    assert stall_bound_s(200.0) == pytest.approx(10.0)


def test_error_rate_and_the_cells_that_fail_a_run():
    cell = dict(context_tokens=0, concurrency=1)
    ok = CellResult(phase="decode", status="valid", errors=0, requests_sent=10, **cell)
    some = CellResult(phase="decode", status="errors", errors=1, requests_sent=10, **cell)
    lost = CellResult(phase="decode", status="errors", errors=0, requests_sent=None, **cell)
    cold = CellResult(phase="prefill", status="errors", errors=1, completed_requests=0, **cell)
    skipped = CellResult(phase="decode", status="over_capacity", errors=0, **cell)
    assert [cell_error_rate(c) for c in (ok, some, lost, cold, skipped)] == [0.0, 0.1, 1.0, 1.0, 0.0]
    doc = new_results(provenance="measured", started_at=None, cells=[ok, some, lost, cold, skipped])
    assert cells_over_error_rate(doc, 0.0) == [some, lost, cold]
    assert cells_over_error_rate(doc, 0.1) == [lost, cold]
    assert cells_over_error_rate(doc, 1.0) == []


def test_eta_clock_shows_hours_past_an_hour():
    assert eta_clock(59) == "0:59" and eta_clock(3599) == "59:59"
    assert eta_clock(4 * 3600 + 20 * 60) == "4:20:00" and eta_clock(3601) == "1:00:01"


def test_prose_that_mentions_tokens_is_not_masked():
    from llmload.core.redact import scrub
    for text in ("generated-token counter delta", "Token source: chunks", "max_tokens=256",
                 "server timings (predicted_n, predicted_ms)"):
        assert scrub(text) == text
    assert scrub("llama-server --api-key abcdef --token xyz") == "llama-server --api-key *** --token ***"


@pytest.mark.fault("llmload's own messages that name a key's flag: 'use --api-key or the environment', "
                   "'a Bearer token'", "printed unchanged: the scrubber masks values, never words")
@pytest.mark.parametrize("text", ["host must not contain credentials; use --api-key or the environment",
                                  "pass it with --api-key or the environment", "set OPENAI_API_KEY or --api-key",
                                  "Require this Bearer key on /v1/*", "send a Bearer token with --token to the server"])
def test_the_scrubber_masks_values_never_words(text):
    assert Scrubber().scrub(text) == text
    assert Scrubber().scrub(text + " --api-key abc123def") == text + " --api-key ***"


def _decode_cell_of(warm_ok: bool, window_ok: bool) -> CellResult:
    from llmload.core.capacity.plan import PlannedCell
    from llmload.core.model.cellfacts import CellFacts
    from llmload.core.figures.cells import assemble_cell
    t0 = 100.0

    def request(user, tag, send, ok):
        return record(user, send, [(send + 0.02, 1), (send + 0.03, 1)] if ok else [], send + 0.04,
                      status="ok" if ok else "error", finish="length" if ok else None, tag=tag,
                      first_byte_s=send + 0.01 if ok else None, error=None if ok else "HTTP 500: boom")
    records = [request(f"u{u}", "warmup", t0 - 1.0, warm_ok) for u in range(4)]
    records += [request(f"u{u}", "decode", t0 + 0.1 * k, window_ok) for u in range(4) for k in range(3)]
    planned = PlannedCell(phase="decode", context_tokens=0, concurrency=4, status="run", reason="",
                          prompt_tokens=10, max_tokens=2)
    return assemble_cell(planned, records, CellFacts(t0_s=t0, t1_s=t0 + 2.0))


@pytest.mark.fault("failed warm-ups (N = 4) beside 12 requests sent in the window",
                   "the error rate is over requests attempted, warm-ups on both sides: all failing is "
                   "16 of 16 (never 16 of 12), 4 failed warm-ups are 4 of 16")
def test_the_error_rate_counts_warmups_on_both_sides():
    every = _decode_cell_of(warm_ok=False, window_ok=False)
    assert (every.errors, every.requests_sent, every.requests_attempted) == (16, 12, 16)
    assert cell_error_rate(every) == 1.0
    warm_only = _decode_cell_of(warm_ok=False, window_ok=True)
    assert (warm_only.errors, warm_only.requests_attempted) == (4, 16)
    assert cell_error_rate(warm_only) == pytest.approx(0.25)
    assert cells_over_error_rate(new_results(provenance="measured", started_at=None, cells=[warm_only]),
                                 0.3) == []  # 4/12 = 0.33 would fail it
    assert _decode_cell_of(warm_ok=True, window_ok=True).errors == 0


def _stall_cell(*, window_s: float, stall_s: float, cpu_pct: float = 0.4, late_ms: float | None = None,
                froze_ms: tuple[float, ...] = ()) -> dict:
    """A decode cell of 4 users whose server froze `stall_s` after the first token of every
    second request; the client's samples say `cpu_pct`, with `late_ms` its queue ages say it
    read that late (an estimate over the 2 ms bound), and its event loop froze `froze_ms`
    (one freeze an interval, each spent waiting for a CPU, one major fault each)."""
    from collections import Counter

    from llmload.core.capacity.plan import PlannedCell
    from llmload.core.model.cellfacts import CellFacts, LoadSample
    from llmload.core.figures.cells import assemble_cell
    from llmload.core.capacity.clientload import ADDED_DELAY_BIN_MS, IntervalSample
    t0, t1 = 100.0, 100.0 + window_s
    records = []
    for u in range(4):
        send, k = t0, 0
        while send < t1:
            first = send + 0.01
            chunks = [first] + [first + (stall_s if k % 2 else 0.0) + 0.005 * (i + 1) for i in range(19)]
            done = chunks[-1] <= t1
            records.append(record(f"u{u}", send, [(c, 1) for c in chunks if c <= t1], min(chunks[-1], t1),
                                  status="ok" if done else "cancelled", finish="length" if done else None,
                                  tag="decode", first_byte_s=first))
            send, k = chunks[-1], k + 1
    ages = Counter({0: 5, round(late_ms / ADDED_DELAY_BIN_MS): 5}) if late_ms else Counter({0: 10})
    reads = tuple(IntervalSample(t_s=t0 + 0.25 * i, reads=10, events=12, bytes_=2400, streams=4, ages=ages)
                  for i in range(int(window_s * 4)))
    samples = tuple(LoadSample(t_s=t0 + 0.25 * i, cpu_pct=cpu_pct, lag_ms=0.1, major_faults=0, cpu_wait_ms=0.5)
                    for i in range(int(window_s * 4)))
    samples = samples[:1] + tuple(replace(s, freezes=((s.t_s - 0.01, ms),), major_faults=1, cpu_wait_ms=ms)
                                  for s, ms in zip(samples[1:], froze_ms)) + samples[1 + len(froze_ms):]
    planned = PlannedCell(phase="decode", context_tokens=0, concurrency=4, status="run", reason="",
                          prompt_tokens=10, max_tokens=20)
    facts = CellFacts(t0_s=t0, t1_s=t1, client_samples=(samples,), client_reads=(reads,))
    return cell_to_dict(assemble_cell(planned, records, facts))


@pytest.mark.fault("a server stalling 10 s on every second request (N = 4, 6 s window, 20 tokens) while the "
                   "client's added-delay estimate reads 5 ms (over its 2 ms bound) at 0.4% CPU",
                   "stalled, not client_bound: a silence seen outranks an estimated delay; a client measured "
                   "at 95% CPU is still client_bound")
def test_a_seen_stall_outranks_an_estimated_client_delay():
    cell = _stall_cell(window_s=6.0, stall_s=10.0, late_ms=5.0)
    assert cell["client_added_delay_ms_p99"] > 2.0 and cell["longest_stall_s"] > 5.5
    assert cell["status"] == "stalled", cell["reason"]
    assert cell["reason"].startswith("a request received no token for")
    assert _stall_cell(window_s=6.0, stall_s=0.0, late_ms=5.0)["status"] == "client_bound"  # no stall: the estimate
    busy = _stall_cell(window_s=6.0, stall_s=10.0, cpu_pct=95.0, late_ms=5.0)
    assert busy["status"] == "client_bound" and "CPU or event-loop lag" in busy["reason"]


@pytest.mark.fault("the load generator's event loop frozen 0.4 s of a 6 s window (two freezes, waiting for a CPU)",
                   "client_bound: the reason gives the freezes, the longest, their sum and the CPU wait; frozen "
                   "0.2 s (under 5% of the window) stays valid and the report's Checks list the freeze")
def test_a_client_that_froze_over_its_bound_is_client_bound_and_says_why():
    from llmload.output.pages.tables import check_items
    froze = _stall_cell(window_s=6.0, stall_s=0.0, froze_ms=(150.0, 250.0))
    assert froze["client_freezes"] == 2
    assert (froze["client_freeze_ms_max"], froze["client_freeze_ms_total"]) == (pytest.approx(250.0), pytest.approx(400.0))
    assert froze["client_major_faults"] == 2 and froze["client_cpu_wait_ms"] == pytest.approx(400.0 + 22 * 0.5)
    assert froze["status"] == "client_bound", froze["reason"]
    assert froze["reason"] == ("the load generator was the bottleneck: it froze 2 time(s) (its event loop ran nothing "
                               "for 50 ms or more), the longest 250 ms, 400 ms in all; in the window 2 major page "
                               "fault(s), 411 ms waiting for a CPU (bound 5% of the window)")
    brief = _stall_cell(window_s=6.0, stall_s=0.0, froze_ms=(200.0,))
    assert brief["status"] == "valid", brief["reason"]
    notes = [i.text for i in check_items([cell_of(brief)])]
    assert any(n.startswith("Sustained decode 0 × 4: the load generator froze 1 time(s)") for n in notes), notes
    assert _stall_cell(window_s=6.0, stall_s=0.0)["client_freezes"] == 0


@pytest.mark.fault("a 3 s decode window (never longer than the stall bound, at least 3 s)",
                   "the cell says the stall check did not apply (stall_check_note), and the report's Checks "
                   "list it; a 6 s window says nothing")
def test_a_window_no_longer_than_the_stall_bound_says_the_stall_check_did_not_apply():
    from llmload.output.pages.tables import check_items
    short = _stall_cell(window_s=3.0, stall_s=10.0)
    assert short["stall_check_note"] == ("stall check did not apply: the 3.0 s window is not longer than the "
                                         "stall bound (3.0 s)")
    assert short["status"] != "stalled"
    assert f"Sustained decode 0 × 4: {short['stall_check_note']}" in [i.text for i in check_items([cell_of(short)])]
    assert _stall_cell(window_s=6.0, stall_s=10.0)["stall_check_note"] is None
