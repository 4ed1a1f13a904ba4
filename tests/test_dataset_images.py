"""A dataset's own images (`--dataset-images`, chat, rate): what an entry's images are read
as (files relative to the dataset, data URLs, LLaVA's ShareGPT layout, a Hugging Face Image
column), what is refused in one line, and a run on the simulator whose every request asks
the prompt tokens the server then counts, its images among them."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from llmload.core.traffic.dataset import DatasetError, jsonl_entry, load_dataset, sharegpt_entries
from tests_helpers import llmload, one_line_error


def png(path, size=(448, 448), colour=(200, 30, 30)):
    Image.new("RGB", size, colour).save(path, format="PNG")
    return path


def jpeg_url(size=(448, 448)) -> str:
    out = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(out, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.fixture
def dataset(tmp_path):
    """A JSONL dataset: one image (a file beside it), two images (files in a folder), a data
    URL, and an entry of text alone."""
    (tmp_path / "pics").mkdir()
    png(tmp_path / "one.png")
    png(tmp_path / "pics" / "wide.png", (896, 448))
    png(tmp_path / "pics" / "small.png", (300, 200))
    url = jpeg_url()
    rows = [{"prompt": "Describe this picture.", "output_tokens": 8, "images": ["one.png"]},
            {"prompt": "Compare the two.", "output_tokens": 8, "images": ["pics/wide.png", "pics/small.png"]},
            {"prompt": "What colour?", "output_tokens": 8, "image": url},
            {"prompt": "A haiku about the sea.", "output_tokens": 8}]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path, url


def test_a_jsonl_entrys_images(dataset, tmp_path):
    path, url = dataset
    entries = load_dataset(f"jsonl:{path}").entries
    assert entries[0].images == (str(tmp_path / "one.png"),)
    assert entries[1].images == (str(tmp_path / "pics" / "wide.png"), str(tmp_path / "pics" / "small.png"))
    assert entries[2].images == (url,) and entries[3].images == ()


@pytest.mark.parametrize("images, words", [
    (["http://example.com/a.png"], "give an image file or a data: URL (llmload fetches nothing)"),
    (["missing.png"], "missing.png: no such file"),
    (["notes.txt"], "notes.txt: not an image file"),
    (["data:text/plain;base64,aGk="], "a data URL of an image is data:image/<type>;base64"),
    ([3], "an image is a file path or a data: URL, got int"),
])
def test_a_bad_image_is_refused_naming_its_line(tmp_path, images, words):
    with pytest.raises(DatasetError) as err:
        jsonl_entry({"prompt": "p", "output_tokens": 1, "images": images}, "data.jsonl:7", str(tmp_path))
    assert str(err.value).startswith("data.jsonl:7: ") and words in str(err.value)
    assert "\n" not in str(err.value)


def test_llavas_sharegpt_layout(tmp_path):
    png(tmp_path / "coco.jpg.png")
    entries, dropped = sharegpt_entries([
        {"id": "1", "image": "coco.jpg.png", "conversations": [
            {"from": "human", "value": "<image>\nWhat is in the picture?"}, {"from": "gpt", "value": "A red square."}]},
        {"id": "2", "conversations": [{"from": "human", "value": "Hi <image> there"}, {"from": "gpt", "value": "Hello."}]},
    ], "llava.json", str(tmp_path))
    assert dropped == 0
    assert entries[0].prompt == "What is in the picture?" and entries[0].images == (str(tmp_path / "coco.jpg.png"),)
    assert entries[1].prompt == "Hi <image> there" and entries[1].images == ()  # no image: its text as it is


def test_a_hugging_face_image_column(tmp_path):
    datasets = pytest.importorskip("datasets")
    png(tmp_path / "a.png")
    data = datasets.Dataset.from_dict({"prompt": ["Describe it."], "output_tokens": [4],
                                       "image": [str(tmp_path / "a.png")]}).cast_column("image", datasets.Image())
    data.save_to_disk(str(tmp_path / "hf"))
    (entry,) = load_dataset(f"hf:{tmp_path / 'hf'}").entries
    (url,) = entry.images
    assert url.startswith("data:image/png;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (448, 448)


def test_options_refused(dataset, tmp_path):
    path, _ = dataset
    text_only = tmp_path / "text.jsonl"
    text_only.write_text(json.dumps({"prompt": "p", "output_tokens": 4}) + "\n")
    for args, words in [
        (["--workload", "rate", "--endpoint", "chat", "--dataset-images"], "--dataset-images sends a dataset's images: give --dataset"),
        (["--workload", "rate", "--dataset", f"jsonl:{path}", "--dataset-images"], "use --endpoint chat --workload rate"),
        (["--workload", "sessions", "--endpoint", "chat", "--dataset", f"jsonl:{path}", "--dataset-images"],
         "use --endpoint chat --workload rate"),
        (["--workload", "rate", "--endpoint", "chat", "--dataset", f"jsonl:{text_only}", "--dataset-images"],
         "no entry of jsonl:text.jsonl has an image"),
    ]:
        done = llmload("run", *args, "--out", str(tmp_path / "r"))
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert words in one_line_error(done), (args, done.stderr)


def test_a_rate_run_sends_each_entrys_images(sims, dataset, tmp_path):
    """The simulator counts an image as tiles of 448 pixels, 256 tokens each, and 2 markers:
    258 for 448 × 448, 514 for 896 × 448, 258 for 300 × 200. Every request asked the prompt
    tokens the server counted for it."""
    path, _ = dataset
    out = tmp_path / "run"
    done = llmload("run", "--host", sims().url, "--endpoint", "chat", "--workload", "rate", "--rates", "6",
                   "--dataset", f"jsonl:{path}", "--dataset-images", "--duration", "2s", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Dataset: 3 of the 4 entries taken send their images, each counted by the server with its text" in done.stdout
    rows = [json.loads(line) for line in llmload("export", str(out), "--format", "jsonl").stdout.splitlines()]
    sent = [r for r in rows if r["tag"] == "rate"]
    assert sent and all(r["status"] == "ok" for r in sent)
    assert all(r["prompt_tokens"] == r["asked_prompt_tokens"] for r in sent)
    lengths = sorted({r["prompt_tokens"] for r in sent})
    text_alone = min(lengths)
    assert text_alone < 40 and max(lengths) > 258 + 514  # the two images of the second entry
    page = (out / "report.md").read_text()
    assert "Images: each dataset entry's own, after its text" in page
    # without --dataset-images the same dataset sends its text alone
    plain = llmload("run", "--host", sims().url, "--endpoint", "chat", "--workload", "rate", "--rates", "6",
                    "--dataset", f"jsonl:{path}", "--duration", "1s", "--out", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr[-2000:]
    rows = [json.loads(line) for line in llmload("export", str(tmp_path / "plain"), "--format", "jsonl").stdout.splitlines()]
    assert max(r["prompt_tokens"] for r in rows if r["tag"] == "rate") < 40


def test_an_entry_whose_images_the_server_refuses_is_left_out_and_said(sims, dataset, tmp_path):
    """A context of 1,024 tokens: the second entry's two images (772 tokens) and its text fit,
    an entry with an image of 4 tiles (1,026 tokens) does not: the server's 400 when it is
    counted leaves it out, said with the server's words."""
    path, _ = dataset
    png(tmp_path / "big.png", (896, 896))
    with path.open("a") as f:
        f.write(json.dumps({"prompt": "Too big.", "output_tokens": 8, "images": ["big.png"]}) + "\n")
    out = tmp_path / "run"
    done = llmload("run", "--host", sims(max_model_len=1024).url, "--endpoint", "chat", "--workload", "rate",
                   "--rates", "4", "--dataset", f"jsonl:{path}", "--dataset-images", "--duration", "1s",
                   "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    line = next(ln for ln in done.stdout.splitlines() if "whose images it refused" in ln)
    assert "1 whose images it refused left out (first: " in line and "data.jsonl:5: HTTP 400" in line
    assert "maximum context length" in line
