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

    python scripts/make_vllm_model.py [OUT_DIR]

Without OUT_DIR the model goes to the cache ($LLMLOAD_CACHE or ~/.cache/llmload) as
vllm-model-<version>; an existing complete directory is reused. Prints the path.
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
VOCAB_SIZE = 320
SPECIAL = ["<s>", "</s>", "<unk>", "<think>", "</think>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, show_progress=False,
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


def main(argv: list[str]) -> int:
    cache = Path(os.environ.get("LLMLOAD_CACHE") or Path.home() / ".cache" / "llmload")
    out = Path(argv[0]) if argv else cache / f"vllm-model-{VERSION}"
    if not (out / "config.json").exists():
        write_model(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
