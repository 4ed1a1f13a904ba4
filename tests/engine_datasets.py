"""A dataset rate run against a real engine (`tests/test_llama_cpp.py`, `tests/test_vllm.py`):
each request sends its entry's prompt and asks for its answer's length as the engine's own
tokenizer counts them (`probe.prompt_counter`, `probe.answer_counter`), and the engine's
usage reports exactly those counts back."""

from __future__ import annotations

import json
from pathlib import Path

from llmload.io.probe import answer_counter, probe_server
from llmload.output.rundir.records import read_cell
from tests_helpers import llmload_pinned

CONVERSATIONS = [
    ("What is the capital of France? Answer in one short sentence.", "The capital of France is Paris."),
    ("Name three primary colours.", "Red, yellow and blue are the three primary colours of paint."),
    ("Explain what a load generator does, briefly.",
     "A load generator sends many requests to a server at a chosen rate and measures how fast it answers."),
    ("Count from one to five in words.", "One, two, three, four, five."),
]


def check_dataset_run(url: str, tmp_path: Path, endpoint: str) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
                                for q, a in CONVERSATIONS]))
    out = tmp_path / "dataset"
    r = llmload_pinned("run", "--host", url, "--workload", "rate", "--dataset", f"sharegpt:{path}",
                       "--endpoint", endpoint, "--rates", "2", "--arrivals", "constant", "--duration", "2s",
                       "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text())
    [cell] = [c for c in doc["cells"] if c["phase"] == "rate"]
    records = [rec for rec in read_cell(out / cell["records_file"])[1] if rec.tag == "rate"]
    assert len(records) == 4 and all(rec.status == "ok" for rec in records), [rec.error for rec in records]
    count = answer_counter(probe_server(url), None)
    answers = sorted(count(a) for _, a in CONVERSATIONS)
    assert sorted(rec.asked_output_tokens for rec in records) == answers  # every answer, once
    for rec in records:
        assert rec.completion_tokens == rec.asked_output_tokens  # exactly the answer's length
        assert rec.prompt_tokens == rec.asked_prompt_tokens  # the prompt as the engine counted it
