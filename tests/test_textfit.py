"""Text prompts fitted to an exact length by the server's count (llmload.core.traffic.textfit), with
counting functions that are deliberately not one token per word."""

import pytest

from llmload.core.traffic.prompts import FILLER_TEXT, PromptBuilder
from llmload.core.traffic.textfit import MAX_COUNTS, fit_text

MERGED = {("a", "shared"), ("the", "same"), ("same", "hardware")}
"""Word pairs the awkward tokenizer merges into one token fewer (all outside the nonce)."""
OVERHEAD = 7


def awkward(text: str) -> int:
    """A token per 3 characters of each word (1 to 4 per word), a token less for each merged
    pair of neighbours, and a template of OVERHEAD tokens."""
    words = text.split()
    merges = sum(1 for pair in zip(words, words[1:]) if pair in MERGED)
    return OVERHEAD + sum(-(-len(w) // 3) for w in words) - merges


class Counting:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, text):
        self.calls += 1
        return self.fn(text)


def measured_builder(fn) -> PromptBuilder:
    # What the probe measures: tokens per word over the filler, and the template's overhead.
    words = len(FILLER_TEXT.split())
    per_word = (fn(FILLER_TEXT) - OVERHEAD) / words
    return PromptBuilder(tokens_per_word=per_word, overhead_tokens=OVERHEAD)


@pytest.mark.parametrize("target", [60, 100, 511, 512, 513, 2048, 2049, 16384])
def test_the_fit_is_exact_for_every_users_prompt(target):
    builder = measured_builder(awkward)
    counter = Counting(awkward)
    fit = fit_text(counter, builder, target)
    assert fit.exact and fit.note == "" and fit.counted_tokens == target, fit
    assert counter.calls <= MAX_COUNTS + 2
    fitted = PromptBuilder(tokens_per_word=builder.tokens_per_word, overhead_tokens=OVERHEAD, fits=(fit,))
    assert fitted.exact_for(target) and not builder.exact_for(target)
    prompts = {fitted.text(f"run/c1/u{i}", target) for i in range(40)}
    assert len(prompts) == 40 and {awkward(p) for p in prompts} == {target}


def test_the_estimate_alone_is_not_exact_on_this_tokenizer():
    """Without the search the lengths miss (the test above would prove nothing otherwise)."""
    builder = measured_builder(awkward)
    misses = [t for t in (100, 511, 512, 513, 2048, 2049) if awkward(builder.text("k", t)) != t]
    assert len(misses) >= 4, misses


def test_a_tail_word_reaches_a_length_whole_words_jump_over():
    builder = measured_builder(awkward)
    tails = [fit_text(awkward, builder, t).tail for t in range(1000, 1060)]
    assert any(t >= 0 for t in tails)


def test_a_count_that_depends_on_the_nonce_is_not_called_exact():
    def ordered(text):  # a token more after every word longer than the next
        words = text.split()
        return awkward(text) + sum(1 for a, b in zip(words, words[1:]) if len(a) > len(b))
    builder = measured_builder(awkward)
    fit = fit_text(ordered, builder, 1024)
    assert not fit.exact and "depends on the nonce" in fit.note
    assert not PromptBuilder(fits=(fit,)).exact_for(1024)


def test_no_exact_length_says_why_and_gives_the_closest():
    even = Counting(lambda text: 2 * len(text.split()))  # every word and tail costs 2: odd lengths are out
    fit = fit_text(even, PromptBuilder(tokens_per_word=2.0), 1001)
    assert not fit.exact and fit.counted_tokens == 1000 and "no word or tail word" in fit.note
    assert even.calls <= MAX_COUNTS
    short = fit_text(awkward, measured_builder(awkward), OVERHEAD - 2)
    assert not short.exact and "shortest text is longer" in short.note and short.words == 1


def test_a_server_that_cannot_count_keeps_the_estimate():
    builder = measured_builder(awkward)
    fit = fit_text(lambda text: None, builder, 2048)
    assert not fit.exact and fit.counted_tokens is None and "did not count" in fit.note
    assert fit.words == builder.estimate_words(2048)
