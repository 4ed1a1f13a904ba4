"""Datasets of real prompts (`llmload.core.traffic.dataset`, `--workload rate --dataset SPEC`): what is
read, dropped and refused, the seeded order, and end to end on the simulator: each request
sends its entry's prompt and asks for exactly its answer's length by the server's count (a
ShareGPT file written by the test), a JSONL file's lengths, a local Hugging Face dataset
directory (never a download), and entries over the context planned like trace lines."""

from __future__ import annotations

import json
import random
import urllib.request
from pathlib import Path

import pytest

from llmload.core.traffic.dataset import (DatasetError, dataset_order, jsonl_entry, load_dataset, parse_dataset_spec,
                                  sharegpt_entries)
from llmload.output.rundir.records import read_cell
from tests_helpers import llmload, one_line_error

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def sharegpt_file(path: Path, n: int = 30, *, seed: int = 3) -> list[tuple[str, str]]:
    """n conversations of 20-600-word prompts and 5-200-word answers (and one without an
    answer, dropped); (prompt, answer) of each kept one, in file order."""
    rng = random.Random(seed)
    pairs = [(text(rng, rng.randint(20, 600)), text(rng, rng.randint(5, 200))) for _ in range(n)]
    convs = [{"id": str(i), "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": p},
                                               {"from": "gpt", "value": a}, {"from": "human", "value": "more"}]}
             for i, (p, a) in enumerate(pairs)]
    convs.insert(5, {"id": "no answer", "conversations": [{"from": "human", "value": "hello?"}]})
    path.write_text(json.dumps(convs))
    return pairs


# --------------------------------------------------------------------------- reading


def test_a_sharegpt_entry_is_the_first_human_turn_and_the_answer_after_it():
    entries, dropped = sharegpt_entries([
        {"conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": "Q1"},
                           {"from": "gpt", "value": "A1"}, {"from": "human", "value": "Q2"},
                           {"from": "gpt", "value": "A2"}]},
        {"conversations": [{"from": "human", "value": "Q"}, {"from": "human", "value": "Q again"}]},
        {"conversations": [{"from": "human", "value": "  "}, {"from": "gpt", "value": "A"}]},
        {"no": "conversations"}, "not an object"], "sg.json")
    assert [(e.prompt, e.answer, e.output_tokens) for e in entries] == [("Q1", "A1", None)]
    assert dropped == 4 and entries[0].where == "sg.json entry 1"


@pytest.mark.parametrize("line, says", [
    ("{not json", "not JSON"),
    ('{"output_tokens": 5}', "no prompt"),
    ('{"prompt": "hi", "output_tokens": 0}', "output_tokens must be an integer of at least 1"),
    ('{"prompt": "hi", "output_tokens": "5"}', "output_tokens must be"),
])
def test_a_bad_jsonl_line_is_named_by_file_and_line(tmp_path, line, says):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "fine", "output_tokens": 3}\n\n' + line + "\n")
    with pytest.raises(DatasetError) as exc:
        load_dataset(f"jsonl:{path}")
    assert str(exc.value).startswith(f"{path}:3: ") and says in str(exc.value)


@pytest.mark.parametrize("spec", ["sharegpt", "csv:x.csv", "jsonl:", "sharegpt/x.json"])
def test_a_bad_spec_is_refused(spec):
    with pytest.raises(ValueError):
        parse_dataset_spec(spec)


def test_a_dataset_without_a_usable_entry_or_file_is_one_line(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "no answer"}]}]))
    with pytest.raises(DatasetError, match=r"no usable entry \(1 conversation"):
        load_dataset(f"sharegpt:{path}")
    with pytest.raises(DatasetError, match="cannot read it"):
        load_dataset(f"sharegpt:{tmp_path / 'missing.json'}")
    path.write_text('{"a ShareGPT file": "is a list"}')
    with pytest.raises(DatasetError, match="JSON list"):
        load_dataset(f"sharegpt:{path}")


def test_the_order_is_a_seeded_shuffle_and_a_changed_file_is_read_again(tmp_path):
    assert dataset_order(50, 1) == dataset_order(50, 1) != dataset_order(50, 2)
    assert sorted(dataset_order(50, 1)) == list(range(50))
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "one", "output_tokens": 1}) + "\n")
    assert len(load_dataset(f"jsonl:{path}").entries) == 1
    path.write_text("".join(json.dumps({"prompt": w, "output_tokens": 2}) + "\n" for w in WORDS))
    assert len(load_dataset(f"jsonl:{path}").entries) == len(WORDS)
    with pytest.raises(DatasetError, match="not a JSON object"):
        jsonl_entry(["a list"], "here")


@pytest.mark.parametrize("args, says", [
    (("--workload", "replay", "--dataset", "jsonl:x.jsonl"), "--dataset is for --workload rate and sessions"),
    (("--workload", "rate", "--dataset", "jsonl:x.jsonl", "--prompt-tokens", "100"), "leave out --prompt-tokens"),
    (("--workload", "rate", "--dataset", "jsonl:x.jsonl", "--over-context", "clip"), "use skip or send"),
    (("--workload", "rate", "--dataset", "parquet:x"), "sharegpt:PATH, jsonl:PATH or hf:NAME"),
    (("--workload", "rate", "--dataset", "jsonl:/nonexistent/x.jsonl"), "cannot read it"),
])
def test_bad_dataset_options_are_one_line_before_anything_runs(tmp_path, args, says):
    r = llmload("run", *args, "--out", tmp_path / "out")
    assert says in one_line_error(r)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- end to end


def server_count(url: str, text: str) -> int:
    """The simulator's own count of a text (its /tokenize), independently of llmload."""
    req = urllib.request.Request(f"{url}/tokenize", data=json.dumps({"model": "tiny", "prompt": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["count"]


def rate_cell(out: Path):
    [cell] = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == "rate"]
    records = sorted((r for r in read_cell(out / cell["records_file"])[1] if r.tag == "rate"),
                     key=lambda r: r.scheduled_s)
    return cell, records


def test_a_sharegpt_file_sends_each_prompt_with_its_answers_length_exactly(sim_tiny, tmp_path):
    pairs = sharegpt_file(tmp_path / "sg.json")
    out = tmp_path / "run"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--dataset", f"sharegpt:{tmp_path / 'sg.json'}",
                "--rates", "10", "--arrivals", "constant", "--duration", "4s", "--seed", "4", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Dataset: sharegpt:sg.json: 30 entries (1 conversation(s) without a human turn" in r.stdout
    cell, records = rate_cell(out)
    assert cell["status"] == "valid" and len(records) == cell["requests_completed"] == 40
    assert (cell["prompt_lengths"], cell["output_lengths"]) == ("sharegpt:sg.json", "sharegpt:sg.json answers")
    order = dataset_order(len(pairs), 4)
    for k, rec in enumerate(records):  # one pacer: the k-th request is the k-th entry, from the first again
        prompt, answer = pairs[order[k % len(pairs)]]
        assert rec.completion_tokens == rec.asked_output_tokens == server_count(sim_tiny.url, answer)
        assert rec.prompt_tokens == rec.asked_prompt_tokens == server_count(sim_tiny.url, prompt)
    assert "sharegpt:sg.json" in (out / "report.md").read_text()


def test_a_jsonl_dataset_with_an_entry_over_the_context_skips_it_and_natural_lengths_may_stop(sim_tiny, tmp_path):
    rng = random.Random(5)
    rows = [{"prompt": text(rng, 50 + 10 * i), "output_tokens": 20 + i} for i in range(8)]
    rows.insert(2, {"prompt": text(rng, 5000), "output_tokens": 8})  # over tiny's 4,096 tokens
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "run"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--dataset", f"jsonl:{path}", "--rates", "8",
                "--arrivals", "constant", "--duration", "2s", "--output-length", "natural", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 of the 9 requests exceed the context (4,096 tokens, prompt + output) and are skipped" in r.stdout
    assert "entries 3" in r.stdout
    cell, records = rate_cell(out)
    assert cell["requests_completed"] == 16 and cell["output_lengths"] == "jsonl:d.jsonl answers (natural)"
    assert {rec.asked_output_tokens for rec in records} == {row["output_tokens"] for row in rows if row["output_tokens"] > 8}
    assert all(rec.completion_tokens <= rec.asked_output_tokens for rec in records)
    # every entry over the context: refused before anything runs
    path.write_text(json.dumps(rows[2]) + "\n")
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--dataset", f"jsonl:{path}",
                "--out", tmp_path / "none")
    assert "none of the jsonl:d.jsonl's 1 requests fits the server's context" in one_line_error(r)


def test_a_local_hugging_face_dataset_directory_runs_without_a_download(sim_tiny, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pairs = sharegpt_file(tmp_path / "sg.json", n=6)
    folder = tmp_path / "hfdata"
    datasets.Dataset.from_list([{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": a}]}
                                for p, a in pairs]).save_to_disk(str(folder))
    out = tmp_path / "run"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--dataset", f"hf:{folder}", "--rates", "4",
                "--arrivals", "constant", "--duration", "2s", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    cell, records = rate_cell(out)
    assert cell["prompt_lengths"] == "hf:hfdata" and len(records) == 8
    answers = {server_count(sim_tiny.url, a) for _, a in pairs}
    assert {rec.completion_tokens for rec in records} <= answers
    # a DatasetDict directory: the split asked for, or one line naming the ones it has
    datasets.DatasetDict({"train": datasets.Dataset.from_list([{"prompt": "hi there", "output_tokens": 3}])}
                         ).save_to_disk(str(tmp_path / "dict"))
    r = llmload("run", "--host", sim_tiny.url, "--workload", "rate", "--dataset", f"hf:{tmp_path / 'dict'}:test",
                "--out", tmp_path / "nosplit")
    assert "no split 'test' (it has train)" in one_line_error(r)


# --------------------------------------------------------------------------- sessions


def test_a_conversations_turns_are_its_human_and_gpt_pairs_while_they_follow_one_another():
    [entry], _ = sharegpt_entries([{"conversations": [
        {"from": "system", "value": "s"}, {"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"},
        {"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}, {"from": "human", "value": "Q3"},
        {"from": "human", "value": "Q3 again"}, {"from": "gpt", "value": "A3"}]}], "sg.json")
    assert entry.turns == (("Q1", "A1"), ("Q2", "A2"))


def multi_turn_file(path: Path, n: int = 12) -> list[list[tuple[str, str]]]:
    rng = random.Random(9)
    talks = [[(text(rng, rng.randint(10, 120)), text(rng, rng.randint(5, 60))) for _ in range(rng.randint(1, 5))]
             for _ in range(n)]
    path.write_text(json.dumps([{"conversations": [m for q, a in talk for m in
                                                   ({"from": "human", "value": q}, {"from": "gpt", "value": a})]}
                                for talk in talks]))
    return talks


def test_a_session_holds_a_datasets_conversations_turn_by_turn(sim_tiny, tmp_path):
    talks = multi_turn_file(tmp_path / "multi.json")
    out = tmp_path / "run"
    r = llmload("run", "--host", sim_tiny.url, "--workload", "sessions", "--dataset", f"sharegpt:{tmp_path / 'multi.json'}",
                "--system-prompt-tokens", "256", "--concurrency", "4", "--turns", "4", "--duration", "3s", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Dataset: sharegpt:multi.json: 12 conversations" in r.stdout
    [cell] = [c for c in json.loads((out / "results.json").read_text())["cells"] if c["phase"] == "session"]
    assert cell["status"] == "valid" and cell["errors"] == 0
    records = [rec for rec in read_cell(out / cell["records_file"])[1] if rec.tag == "session" and rec.status == "ok"]
    # each turn asks for a recorded answer of that turn's place in some conversation, exactly
    answers_at = {k: {server_count(sim_tiny.url, talk[k][1]) for talk in talks if len(talk) > k} for k in range(4)}
    assert all(rec.completion_tokens == rec.asked_output_tokens and rec.asked_output_tokens in answers_at[rec.turn - 1]
               for rec in records)
    assert max(rec.turn for rec in records) == 4 and any(rec.turn == 1 for rec in records)
    # users holding the same conversation share the system prompt, not their turns
    assert cell["cached_prompt_ratio"] < 0.9


def test_a_jsonl_dataset_has_no_conversations_for_sessions(sim_tiny, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "hello there", "output_tokens": 4}) + "\n")
    r = llmload("run", "--host", sim_tiny.url, "--workload", "sessions", "--dataset", f"jsonl:{path}",
                "--out", tmp_path / "out")
    assert "no conversations (a JSONL dataset holds single prompts" in one_line_error(r)
