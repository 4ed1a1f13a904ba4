"""Exact-length prompts with per-user nonces (measurement.md, "Prompts").

Pure: given a pool of token IDs (from the server's own tokenizer, so every ID is an ordinary
word piece, never a special token) a prompt of exactly C tokens is the user's nonce followed
by the pool repeated. The nonce is derived from a key unique to (run, context, user), so two
users never share a prefix-cache block, and no user shares one with an earlier run.
Text prompts (servers without token-ID prompts, the chat endpoint) use words instead; their
length is checked against the server's count by the caller.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

NONCE_TOKENS = 6
"""Tokens of nonce at the head of every prompt (pool of ~100 IDs: ~1e12 distinct nonces)."""

FILLER_TEXT = (
    "The history of measurement is a history of agreement between people who needed to trade "
    "build and travel together and who found that a shared unit saves more time than it costs "
    "to keep Engineers still rely on that agreement when they compare machines because a number "
    "without a definition tells nobody anything useful about what they will get when they run "
    "their own work on the same hardware under the same conditions next week or next year so "
    "every figure in a good report names the method the window the load and the version used"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptBuilder:
    pool_ids: tuple[int, ...] = ()
    """Ordinary token IDs of the served model; empty when the server takes no token IDs."""
    words: tuple[str, ...] = tuple(FILLER_TEXT.split())
    tokens_per_word: float = 1.0
    """Measured tokens per filler word, for text prompts."""
    overhead_tokens: int = 0
    """Tokens the server adds around a text prompt (chat template, BOS)."""

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
        """About n_tokens tokens of text (exact on servers with one token per word)."""
        target = max(n_tokens - self.overhead_tokens, 1)
        n_words = max(round(target / self.tokens_per_word), 1)
        nonce = [self.words[b % len(self.words)] for b in _digest(key, NONCE_TOKENS)]
        if n_words <= NONCE_TOKENS:
            return " ".join(nonce[:n_words])
        words = self.words
        body = (words * (1 + (n_words - NONCE_TOKENS) // len(words)))[: n_words - NONCE_TOKENS]
        return " ".join(nonce + list(body))


def _digest(key: str, n: int) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=max(n, 1)).digest()[:n]
