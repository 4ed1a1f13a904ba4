"""The simulator's own tokenizer: deterministic, word-level, exact.

Rules (clients may rely on them; tests do):
- The vocabulary has `vocab_size` ids. Ids 0..7 are special tokens, written `<|name|>`:
  `<|eos|>`, `<|system|>`, `<|user|>`, `<|assistant|>`, `<|tool|>`, `<|developer|>`,
  `<|other|>`, `<|pad|>`. Every other id is a word spelled from syllables: id i is the
  syllables of (i − 8) in base 64, most significant first, two at least ("kaka", "kake", …).
- `encode(text)` splits the text on whitespace; each piece that is a vocabulary word or a
  special token maps to its id, any other piece to `8 + crc32(piece) mod (vocab_size − 8)`.
  So token count = number of whitespace-separated pieces, always, unless `piece_chars`
  (the profile's `word_piece_chars`) is n > 0: then a piece that is neither a vocabulary word
  nor a special token is one token per n characters (each hashed the same way), a tokenizer
  that is not one token per word, like the subword tokenizers of real models.
- `decode(ids)` joins the words of the ids with single spaces. A text built from vocabulary
  words round-trips exactly; other words come back as the vocabulary word they hash to.
- Chat template: each message contributes its role token (`<|system|>`, `<|user|>`, …;
  an unknown role gives `<|other|>`) followed by its content's tokens (text parts joined
  by newlines; an image's tokens where its part is, `llmload.sim.images`); the prompt ends
  with `<|assistant|>` (the generation prompt, unless add_generation_prompt is false). No
  BOS is added to any prompt.
- Output: the model's output is a deterministic function of the prompt (`OutputModel`):
  the same prompt always yields the same tokens and the same natural stopping point.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

SPECIAL_TOKENS = (
    "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|tool|>", "<|developer|>", "<|other|>", "<|pad|>",
)
NUM_SPECIAL = len(SPECIAL_TOKENS)
EOS_ID = 0
ROLE_IDS = {"system": 1, "user": 2, "assistant": 3, "tool": 4, "developer": 5}
OTHER_ROLE_ID = 6
GENERATION_PROMPT_ID = ROLE_IDS["assistant"]

_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvwxz" for v in "aeio")  # 64 syllables
_BASE = len(_SYLLABLES)


def _spell(index: int) -> str:
    digits = []
    while True:
        index, digit = divmod(index, _BASE)
        digits.append(_SYLLABLES[digit])
        if index == 0:
            break
    while len(digits) < 2:
        digits.append(_SYLLABLES[0])
    return "".join(reversed(digits))


@lru_cache(maxsize=4)
def _vocabulary(vocab_size: int) -> tuple[tuple[str, ...], dict[str, int]]:
    words = SPECIAL_TOKENS + tuple(_spell(i) for i in range(vocab_size - NUM_SPECIAL))
    return words, {word: i for i, word in enumerate(words)}


class Tokenizer:
    """Word-level tokenizer over a generated vocabulary of `vocab_size` ids."""

    __slots__ = ("vocab_size", "piece_chars", "_words", "_ids", "_num_regular")

    def __init__(self, vocab_size: int, *, piece_chars: int = 0) -> None:
        self.vocab_size = vocab_size
        self.piece_chars = piece_chars
        self._words, self._ids = _vocabulary(vocab_size)
        self._num_regular = vocab_size - NUM_SPECIAL

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        if not self.piece_chars:
            return [ids.get(piece) or self._hash_id(piece) for piece in text.split()]
        n, out = self.piece_chars, []
        for piece in text.split():
            known = ids.get(piece)
            if known is not None:
                out.append(known)
            else:
                out.extend(self._hash_id(piece[i:i + n]) for i in range(0, len(piece), n))
        return out

    def _hash_id(self, piece: str) -> int:
        if piece == SPECIAL_TOKENS[EOS_ID]:
            return EOS_ID  # `ids.get` above reads id 0 as "missing"
        return NUM_SPECIAL + zlib.crc32(piece.encode("utf-8")) % self._num_regular

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.word(i) for i in ids)

    def word(self, token_id: int) -> str:
        """The text of one token id (its vocabulary word); raises ValueError when out of range."""
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is out of vocabulary (size {self.vocab_size})")
        return self._words[token_id]

    def is_valid_id(self, token_id: object) -> bool:
        return type(token_id) is int and 0 <= token_id < self.vocab_size

    def apply_chat_template(self, messages: Sequence[tuple[str, str]], *,
                            add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a chat: role token + content tokens per message, then `<|assistant|>`."""
        return self.render_chat([(role, (content,)) for role, content in messages],
                                add_generation_prompt=add_generation_prompt)[0]

    def render_chat(self, messages: Sequence[tuple[str, Sequence[str | Sequence[int]]]], *,
                    add_generation_prompt: bool = True) -> tuple[list[int], list[int]]:
        """The chat template over contents given as segments, each a text (encoded) or a run
        of token ids placed as they are (an image's): the prompt's ids, and the position where
        each run of ids starts."""
        ids: list[int] = []
        starts: list[int] = []
        for role, segments in messages:
            ids.append(ROLE_IDS.get(role, OTHER_ROLE_ID))
            for segment in segments:
                if isinstance(segment, str):
                    ids.extend(self.encode(segment))
                else:
                    starts.append(len(ids))
                    ids.extend(segment)
        if add_generation_prompt:
            ids.append(GENERATION_PROMPT_ID)
        return ids, starts


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputModel:
    """What the simulated model says after a prompt: deterministic from the prompt ids.

    Token k of the output is a regular (non-special) id drawn from a multiplicative hash of
    the prompt's seed and k. The natural length (where the model would emit EOS when
    ignore_eos is off) is drawn from the same seed in [eos_min_tokens, eos_max_tokens].
    """

    vocab_size: int
    eos_min_tokens: int
    eos_max_tokens: int

    def seed(self, prompt_ids: Sequence[int]) -> int:
        return zlib.crc32(array("q", prompt_ids).tobytes())

    def token(self, seed: int, index: int) -> int:
        mixed = (seed * 0x9E3779B1 + (index + 1) * 0x85EBCA77) & 0xFFFFFFFF
        mixed ^= mixed >> 15
        return NUM_SPECIAL + mixed % (self.vocab_size - NUM_SPECIAL)

    def natural_length(self, seed: int) -> int:
        span = self.eos_max_tokens - self.eos_min_tokens + 1
        return self.eos_min_tokens + (seed >> 7) % span

    def plan(self, seed: int, *, max_tokens: int, min_tokens: int, ignore_eos: bool) -> tuple[int, str]:
        """(number of output tokens, finish_reason) for a request.

        With ignore_eos the output is exactly max_tokens ("length"). Otherwise the model stops
        at its natural length, and EOS comes no earlier than after min_tokens tokens: the last
        token is then EOS, which is counted in completion_tokens and carries no text
        ("stop"), as on vLLM.
        """
        if ignore_eos:
            return max_tokens, "length"
        natural = max(self.natural_length(seed), min_tokens + 1)
        if natural > max_tokens:
            return max_tokens, "length"
        return natural, "stop"
