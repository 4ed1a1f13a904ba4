"""Exact-length prompts with per-user nonces (measurement.md, "Prompts").

Pure: given a pool of token IDs (from the server's own tokenizer, so every ID is an ordinary
word piece, never a special token) a prompt of exactly C tokens is the user's nonce followed
by the pool repeated. The nonce is derived from a key unique to (run, context, user), so two
users never share a prefix-cache block, and no user shares one with an earlier run.

Text prompts (servers without token-ID prompts, the chat endpoint) use words instead: a lead
word, the nonce, then the filler text repeated. Their nonce is an ordering, unique to the
key, of the same NONCE_WORDS words, so every key's text holds the same words and a tokenizer
that does not merge tokens across words counts every key's prompt alike (the lead word keeps
the nonce off the first position, where a word may be tokenized differently). That lets one
search per context, against the server's count (`llmload.core.traffic.textfit`), fit every user's
prompt: its result is a `TextFit` (how many words, and which tail word) that the builder
keeps; without one, the length comes from the measured tokens per word, and the caller
checks it against the server's count.

Block prompts (trace replay, `llmload.core.traffic.trace`): a prompt made of numbered blocks, where
equal block ids mean equal content, so the prefix cache sees the sharing a trace describes.
Block b of a replay is the prompt of the key (salt, b) at the block's length (token IDs:
its nonce then the pool; text: lead, nonce ordering, filler), the blocks in order, the whole
cut to the request's length. The salt (run and cell) keeps a replay from sharing blocks
with an earlier one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

NONCE_TOKENS = 6
"""Tokens of nonce at the head of every token-ID prompt (pool of ~100 IDs: ~1e12 nonces)."""
NONCE_WORDS = 16
"""Words ordered by the key at the head of a text prompt (16! ≈ 2e13 distinct nonces)."""

FILLER_TEXT = (
    "The history of measurement is a history of agreement between people who needed to trade "
    "build and travel together and who found that a shared unit saves more time than it costs "
    "to keep Engineers still rely on that agreement when they compare machines because a number "
    "without a definition tells nobody anything useful about what they will get when they run "
    "their own work on the same hardware under the same conditions next week or next year so "
    "every figure in a good report names the method the window the load and the version used"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextFit:
    """The shape of the text prompt of one length, found against the server's count."""

    prompt_tokens: int
    """The length asked for."""
    words: int
    """Words of text: lead, nonce, then filler."""
    tail: int = -1
    """Index in `PromptBuilder.tail_words()` of one word appended after them (-1: none)."""
    counted_tokens: int | None = None
    """The server's count of the fitted text (None: it could not count)."""
    exact: bool = False
    """The server counted exactly prompt_tokens, for other nonces too."""
    note: str = ""
    """Why the fit is not exact (empty when it is)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptBuilder:
    pool_ids: tuple[int, ...] = ()
    """Ordinary token IDs of the served model; empty when the server takes no token IDs."""
    words: tuple[str, ...] = tuple(FILLER_TEXT.split())
    tokens_per_word: float = 1.0
    """Measured tokens per filler word, for text prompts."""
    overhead_tokens: int = 0
    """Tokens the server adds around a text prompt (chat template, BOS)."""
    fits: tuple[TextFit, ...] = ()
    """Text prompt shapes fitted to the server's count, by length."""

    def token_ids(self, key: str, n_tokens: int) -> list[int]:
        """Exactly max(n_tokens, 1) IDs, starting with the nonce of `key`."""
        if not self.pool_ids:
            raise ValueError("no token pool: the server does not take token-ID prompts")
        n = max(n_tokens, 1)
        pool = self.pool_ids
        nonce = [pool[b % len(pool)] for b in _digest(key, NONCE_TOKENS)]
        if n <= NONCE_TOKENS:
            return nonce[:n]
        body = (pool * (1 + (n - NONCE_TOKENS) // len(pool)))[: n - NONCE_TOKENS]
        return nonce + list(body)

    def prompt(self, key: str, n_tokens: int) -> list[int] | str:
        """Token IDs where the server takes them (a pool was found), else text."""
        return self.token_ids(key, n_tokens) if self.pool_ids else self.text(key, n_tokens)

    def text(self, key: str, n_tokens: int) -> str:
        """Text of n_tokens tokens: exact where a fit for that length was found, else sized
        from tokens_per_word and overhead_tokens."""
        fit = self.fit_for(n_tokens)
        if fit is not None:
            return self.text_of(key, fit.words, fit.tail)
        return self.text_of(key, self.estimate_words(n_tokens))

    def block_prompt(self, salt: str, block_ids, n_tokens: int, *, block_tokens: int) -> list[int] | str:
        """A prompt of n_tokens made of the blocks `block_ids` (block_tokens each): token IDs
        where the server takes them, else text."""
        if self.pool_ids:
            return self.block_token_ids(salt, block_ids, n_tokens, block_tokens=block_tokens)
        return self.block_text(salt, block_ids, n_tokens, block_tokens=block_tokens)

    def block_token_ids(self, salt: str, block_ids, n_tokens: int, *, block_tokens: int) -> list[int]:
        """Exactly n_tokens IDs: the blocks' IDs in order, the last one cut. ValueError when
        the blocks hold fewer than n_tokens."""
        n = max(n_tokens, 1)
        _check_blocks(block_ids, n, block_tokens)
        out: list[int] = []
        for block in block_ids[:-(-n // block_tokens)]:
            out += self.token_ids(f"{salt}/block/{block}", block_tokens)
        return out[:n]

    def block_text(self, salt: str, block_ids, n_tokens: int, *, block_tokens: int) -> str:
        """Text of about n_tokens tokens (sized from tokens_per_word and overhead_tokens): the
        blocks' words in order, the last one cut."""
        _check_blocks(block_ids, max(n_tokens, 1), block_tokens)
        n_words = self.estimate_words(n_tokens)
        per_block = max(round(block_tokens / self.tokens_per_word), 1)
        words: list[str] = []
        for block in block_ids[:-(-n_words // per_block)]:
            words += self.text_of(f"{salt}/block/{block}", per_block).split(" ")
        return " ".join(words[:n_words])

    def fit_for(self, n_tokens: int) -> TextFit | None:
        return next((f for f in self.fits if f.prompt_tokens == n_tokens), None)

    def exact_for(self, n_tokens: int) -> bool:
        """Whether prompts of n_tokens come out exact: token IDs, or an exact text fit."""
        fit = self.fit_for(n_tokens)
        return bool(self.pool_ids) or (fit is not None and fit.exact)

    def estimate_words(self, n_tokens: int) -> int:
        """Words of text for about n_tokens tokens, from the measured ratio and overhead."""
        target = max(n_tokens - self.overhead_tokens, 1)
        return max(round(target / self.tokens_per_word), 1)

    def text_of(self, key: str, n_words: int, tail: int = -1) -> str:
        """n_words words (lead, the nonce of `key`, filler), then tail word number `tail`."""
        lead, nonce_set = _nonce_words(self.words)
        head = [lead, *_ordered(nonce_set, key)]
        n = max(n_words, 1)
        if n <= len(head):
            chosen = head[:n]
        else:
            words = self.words
            chosen = head + list((words * (1 + (n - len(head)) // len(words)))[: n - len(head)])
        if tail >= 0:
            chosen.append(self.tail_words()[tail])
        return " ".join(chosen)

    def tail_words(self) -> tuple[str, ...]:
        """Candidate last words for a fine adjustment, shortest first."""
        return _tail_words(self.words)


def _check_blocks(block_ids, n_tokens: int, block_tokens: int) -> None:
    if block_tokens < 1 or len(block_ids) * block_tokens < n_tokens:
        raise ValueError(f"{len(block_ids)} blocks of {block_tokens} tokens hold fewer than {n_tokens} tokens")


@lru_cache(maxsize=8)
def _nonce_words(words: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(lead word, the NONCE_WORDS distinct words the nonce orders)."""
    lead = words[0]
    distinct = [w for w in dict.fromkeys(words) if w != lead]
    return lead, tuple(distinct[:NONCE_WORDS])


@lru_cache(maxsize=8)
def _tail_words(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(dict.fromkeys(words), key=lambda w: (len(w), w)))


def _ordered(words: tuple[str, ...], key: str) -> list[str]:
    """`words` in an order drawn from `key` (a Fisher-Yates shuffle driven by its digest)."""
    out = list(words)
    digest = _digest(key, 2 * len(out))
    for i in range(len(out) - 1, 0, -1):
        j = int.from_bytes(digest[2 * i:2 * i + 2], "big") % (i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def _digest(key: str, n: int) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=max(min(n, 64), 1)).digest()[:n]
