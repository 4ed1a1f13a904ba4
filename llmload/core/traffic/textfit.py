"""Fitting a text prompt to an exact length with the server's own count: render, count,
adjust, repeat (bounded).

Pure: the caller passes `count(text) -> tokens | None`, the server's count of a prompt whose
text is `text` as a request would be counted (chat template included); this module owns the
search. The server's count of a concatenation is not the sum of its parts (a word costs a
different number of tokens in different places, and some tokenizers merge across words), so
one measurement of tokens per word is not enough on most tokenizers.

The search runs once per prompt length, not once per user: every user's text holds the same
words (`llmload.core.traffic.prompts`: the nonce is an ordering of fixed words), so the fitted shape
serves every key. It counts the shape under CHECK_KEYS too, and calls the fit inexact where a
nonce changes the count.

1. Whole words: from the estimate (tokens per word, template overhead), step by the
   remaining difference over the observed tokens per word, keeping the closest word counts
   below and above the target, until the count is the target or they are one word apart.
2. One word apart (the next word costs more than the tokens still missing): append a tail
   word, searched by length (a longer word costs more tokens) for one that costs exactly the
   difference.
Every count is one render; at most MAX_COUNTS per length, then CHECK_KEYS.
"""

from __future__ import annotations

from typing import Callable

from llmload.core.traffic.prompts import PromptBuilder, TextFit

MAX_COUNTS = 16
"""Counts at most in the search for one length (the check keys come on top)."""
FIT_KEY = "llmload/fit"
CHECK_KEYS = ("llmload/fit/check-1", "llmload/fit/check-2")
"""Other nonces the fitted shape is counted with: the count must not depend on the nonce."""
SLOPE_BASE_WORDS = 8
"""Observed tokens per word are taken over at least this many words; closer, the estimate."""

Counter = Callable[[str], "int | None"]


class _OutOfCounts(Exception):
    pass


class _Search:
    def __init__(self, count: Counter, builder: PromptBuilder, target: int, max_counts: int) -> None:
        self.count, self.builder, self.target, self.max_counts = count, builder, target, max_counts
        self.seen: dict[tuple[int, int], int] = {}
        self.below: int | None = None
        """Most whole words counted under the target."""
        self.above: int | None = None
        """Fewest whole words counted over the target."""

    def measure(self, words: int, tail: int = -1) -> int:
        shape = (words, tail)
        if shape not in self.seen:
            if len(self.seen) >= self.max_counts:
                raise _OutOfCounts(f"no exact length within {self.max_counts} counts")
            counted = self.count(self.builder.text_of(FIT_KEY, words, tail))
            if counted is None:
                raise _OutOfCounts("the server did not count the prompt")
            self.seen[shape] = counted
        return self.seen[shape]

    def whole_words(self) -> tuple[int, int] | None:
        target = self.target
        n = first = self.builder.estimate_words(target)
        while True:
            c = self.measure(n)
            if c == target:
                return n, -1
            if c < target:
                self.below = n if self.below is None else max(self.below, n)
            else:
                self.above = n if self.above is None else min(self.above, n)
            lo = 1 if self.below is None else self.below + 1
            hi = self.above - 1 if self.above is not None else None
            if hi is not None and hi < lo:
                return None
            step = round((target - c) / self._slope(n, first)) or (1 if c < target else -1)
            n = max(n + step, lo) if hi is None else min(max(n + step, lo), hi)

    def _slope(self, n: int, first: int) -> float:
        if abs(n - first) >= SLOPE_BASE_WORDS:
            observed = (self.seen[(n, -1)] - self.seen[(first, -1)]) / (n - first)
            if observed > 0:
                return observed
        return max(self.builder.tokens_per_word, 0.05)

    def with_tail(self) -> tuple[int, int] | None:
        """A tail word after `below` words that costs exactly the missing tokens."""
        if self.below is None:
            return None
        base, need = self.below, self.target - self.seen[(self.below, -1)]
        lo, hi = 0, len(self.builder.tail_words()) - 1
        while lo <= hi:
            mid = lo if not any(t >= 0 for _, t in self.seen) else (lo + hi) // 2
            cost = self.measure(base, mid) - self.seen[(base, -1)]
            if cost == need:
                return base, mid
            lo, hi = (mid + 1, hi) if cost < need else (lo, mid - 1)
        return None

    def closest(self, why: str) -> TextFit:
        """The best shape seen: nearest count, and not over the target on a tie."""
        if not self.seen:
            return TextFit(prompt_tokens=self.target, words=self.builder.estimate_words(self.target), note=why)
        (words, tail), c = min(self.seen.items(), key=lambda kv: (abs(kv[1] - self.target), kv[1] > self.target))
        return TextFit(prompt_tokens=self.target, words=words, tail=tail, counted_tokens=c,
                       note=f"{why}; the closest text counts {c:,} tokens")


def fit_text(count: Counter, builder: PromptBuilder, prompt_tokens: int, *,
             max_counts: int = MAX_COUNTS) -> TextFit:
    """The shape of the text prompt of prompt_tokens tokens by the server's count: exact,
    or the closest found, with a note saying why it is not exact."""
    search = _Search(count, builder, prompt_tokens, max_counts)
    try:
        shape = search.whole_words() or search.with_tail()
    except _OutOfCounts as exc:
        return search.closest(str(exc))
    if shape is None:
        why = ("the shortest text is longer" if search.below is None
               else "no word or tail word reaches it exactly")
        return search.closest(why)
    words, tail = shape
    for key in CHECK_KEYS:
        other = count(builder.text_of(key, words, tail))
        if other != prompt_tokens:
            why = ("the server did not count another user's prompt" if other is None
                   else f"the count depends on the nonce ({other:,} tokens for another user's prompt)")
            return TextFit(prompt_tokens=prompt_tokens, words=words, tail=tail, counted_tokens=prompt_tokens,
                           note=why)
    return TextFit(prompt_tokens=prompt_tokens, words=words, tail=tail, counted_tokens=prompt_tokens, exact=True)
