#!/usr/bin/env python3
"""Write a tiny random-weight GGUF model that llama.cpp's llama-server can serve.

No download: a `llama` architecture with random F16 weights (seeded, so the file is the same
every time) and a SentencePiece-style vocabulary of <unk>, <s>, </s>, the 256 byte-fallback
tokens <0x00>..<0xFF>, and one word piece (with every prefix on the way, so the merges can
reach it) for each word of llmload's filler text: every filler word is exactly one token.
With `--pieces N` each word piece is cut into pieces of N characters instead, so a word is
one to several tokens (a tokenizer that is not one token per word, for the tests of text
prompts fitted to the server's count). With `--rerank` the model is a reranker shaped like
Qwen3-Reranker: the `qwen3` architecture (llama's, plus per-head q/k norms) with rank pooling
and a two-label ("yes", "no") classifier head `cls.output.weight`, and an EOS token after
each text, so `llama-server --rerank` scores `<s> query </s> document </s>` as P(yes) of its
last token. (The `llama` architecture loads no classifier head, and llama.cpp reads a
head-less rank score right only for the first sequence of a batch.) Its random output is
full of partial UTF-8 (byte tokens), so the server merges tokens into one chunk and sends
empty-content chunks: exactly what a benchmark must count right.

With `--mmproj` the script writes, instead of a model, a multimodal projector for the models
of that `--hidden` size, for `llama-server -m MODEL --mmproj PROJ`: a random-weight
LLaVA-1.5-style CLIP (`clip.projector_type = "mlp"`: a one-layer ViT on 56x56 images in
14x14 patches, then a two-layer MLP onto the text model's embeddings). The server then takes
chat messages with image parts (`{"type": "image_url", "image_url": {"url": "data:..."}}`)
and resizes every image to 56x56, so each image is (56/14)^2 = 16 prompt tokens whatever its
size. This projector has no begin/end-of-image tokens, but llama.cpp tokenizes the text after
an image on its own, with the SentencePiece space prefix (3 byte tokens here): an image at
the end of a message adds 19 tokens to the prompt, each further image right after it 16.
`/apply-template` renders an image as a `<__media_...__>` marker text that `/tokenize`
counts as text (44 tokens here), not as the image's tokens.

    python scripts/make_gguf_model.py [OUT.gguf] [--hidden 384 --layers 4 --pieces 3 --rerank ...]
    python scripts/make_gguf_model.py [OUT.gguf] --mmproj [--hidden 384]

Without OUT the file goes to the cache ($LLMLOAD_CACHE or ~/.cache/llmload/models/) under
a name made of its shape; an existing file is reused. Prints the path.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmload.core.traffic.prompts import FILLER_TEXT  # noqa: E402

SPACE = "\u2581"
CHAT_TEMPLATE = (
    "{% for message in messages %}[{{ message['role'] }}]: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]:{% endif %}"
)


def vocabulary(piece_chars: int = 0) -> tuple[list[str], list[float], list[int]]:
    """(pieces, scores, token types) of the SentencePiece-style vocabulary: a piece per word
    (piece_chars 0), or per piece_chars characters of a word."""
    import gguf
    normal, byte, control, unknown = (gguf.TokenType.NORMAL, gguf.TokenType.BYTE,
                                      gguf.TokenType.CONTROL, gguf.TokenType.UNKNOWN)
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [unknown, control, control] + [byte] * 256
    words: dict[str, None] = {}
    for word in FILLER_TEXT.split() + ["user", "assistant"]:
        whole = SPACE + word
        step = piece_chars or len(whole)
        for piece in (whole[i:i + step] for i in range(0, len(whole), step)):
            for end in range(min(2, len(piece)), len(piece) + 1):
                words.setdefault(piece[:end])
    pieces += list(words)
    types += [normal] * len(words)
    # Longer pieces win the merges (scores are merge priorities in SPM).
    scores = [0.0] * 259 + [float(len(p)) for p in words]
    return pieces, scores, [int(t) for t in types]


def write_model(path: Path, *, hidden: int, layers: int, heads: int, ffn: int, context: int,
                pieces: int = 0, rerank: bool = False, seed: int = 0) -> None:
    import gguf
    pieces, scores, types = vocabulary(pieces)
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "qwen3" if rerank else "llama")
    w.add_name("llmload-tiny-random")
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(rerank)
    if rerank:
        w.add_pooling_type(gguf.PoolingType.RANK)
        w.add_classifier_output_labels(["yes", "no"])
    w.add_chat_template(CHAT_TEMPLATE)

    def weight(*shape: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    vocab = len(pieces)
    w.add_tensor("token_embd.weight", weight(vocab, hidden, scale=1.0))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        if rerank:
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", np.ones(hidden // heads, dtype=np.float32))
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", np.ones(hidden // heads, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    w.add_tensor("output.weight", weight(vocab, hidden, scale=1.0))
    if rerank:
        # logits of about unit spread (the hidden state is RMS-normed), so P(yes) is not all 0 or 1
        w.add_tensor("cls.output.weight", weight(2, hidden, scale=hidden ** -0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


IMAGE_SIZE = 56
PATCH_SIZE = 14


def write_mmproj(path: Path, *, hidden: int, seed: int = 0) -> None:
    """A LLaVA-1.5-style CLIP projector whose output has the text model's `hidden` size."""
    import gguf
    embd, ffn, proj = 64, 128, 128
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "clip")
    w.add_name("llmload-tiny-random-mmproj")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_clip_projector_type("mlp")
    w.add_clip_has_vision_encoder(True)
    w.add_vision_embedding_length(embd)
    w.add_vision_feed_forward_length(ffn)
    w.add_vision_block_count(1)
    w.add_vision_head_count(2)
    w.add_vision_attention_layernorm_eps(1e-6)
    w.add_vision_projection_dim(hidden)
    w.add_vision_image_size(IMAGE_SIZE)
    w.add_vision_patch_size(PATCH_SIZE)
    w.add_vision_image_mean([0.5, 0.5, 0.5])
    w.add_vision_image_std([0.5, 0.5, 0.5])
    w.add_vision_use_gelu(True)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float16)

    def const(size: int, value: float = 0.0) -> np.ndarray:
        return np.full(size, value, dtype=np.float32)

    w.add_tensor("v.patch_embd.weight", weight(embd, 3, PATCH_SIZE, PATCH_SIZE))
    w.add_tensor("v.patch_embd.bias", const(embd))
    w.add_tensor("v.position_embd.weight", weight((IMAGE_SIZE // PATCH_SIZE) ** 2, embd))
    for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
        w.add_tensor(f"v.blk.0.{name}.weight", weight(embd, embd))
        w.add_tensor(f"v.blk.0.{name}.bias", const(embd))
    for name in ("ln1", "ln2"):
        w.add_tensor(f"v.blk.0.{name}.weight", const(embd, 1.0))
        w.add_tensor(f"v.blk.0.{name}.bias", const(embd))
    w.add_tensor("v.blk.0.ffn_up.weight", weight(ffn, embd))
    w.add_tensor("v.blk.0.ffn_up.bias", const(ffn))
    w.add_tensor("v.blk.0.ffn_down.weight", weight(embd, ffn))
    w.add_tensor("v.blk.0.ffn_down.bias", const(embd))
    w.add_tensor("mm.0.weight", weight(proj, embd))
    w.add_tensor("mm.0.bias", const(proj))
    w.add_tensor("mm.2.weight", weight(hidden, proj))
    w.add_tensor("mm.2.bias", const(hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def cache_dir() -> Path:
    return Path(os.environ.get("LLMLOAD_CACHE") or Path.home() / ".cache" / "llmload") / "models"


def default_path(hidden: int, layers: int, heads: int, ffn: int, context: int, pieces: int = 0,
                 rerank: bool = False) -> Path:
    cut = f"-p{pieces}" if pieces else ""
    kind = "-rerank" if rerank else ""
    return cache_dir() / f"tiny-random-h{hidden}-l{layers}-a{heads}-f{ffn}-c{context}{cut}{kind}.gguf"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="where to write (default: the cache)")
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--context", type=int, default=4096, help="training context (caps each slot's n_ctx)")
    parser.add_argument("--pieces", type=int, default=0,
                        help="cut each word piece into pieces of this many characters (0: a piece per word)")
    parser.add_argument("--rerank", action="store_true",
                        help="a reranker (qwen3 architecture, rank pooling, yes/no head) for llama-server --rerank")
    parser.add_argument("--mmproj", action="store_true",
                        help="instead of a model, an image projector for the models of this --hidden "
                             "(llama-server --mmproj)")
    args = parser.parse_args(argv)
    shape = dict(hidden=args.hidden, layers=args.layers, heads=args.heads, ffn=args.ffn, context=args.context,
                 pieces=args.pieces, rerank=args.rerank)
    if args.mmproj:
        path = Path(args.out) if args.out else cache_dir() / f"tiny-random-h{args.hidden}-mmproj.gguf"
    else:
        path = Path(args.out) if args.out else default_path(**shape)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if args.mmproj:
            write_mmproj(path, hidden=args.hidden)
        else:
            write_model(path, **shape)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
