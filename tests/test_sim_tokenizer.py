"""The simulator's tokenizer and output model: exact, deterministic, documented."""

import pytest

from llmload.sim.tokenizer import (EOS_ID, GENERATION_PROMPT_ID, NUM_SPECIAL, ROLE_IDS,
                                   SPECIAL_TOKENS, OutputModel, Tokenizer)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(32000)


def test_vocabulary_words_are_distinct_and_round_trip(tok):
    words = [tok.word(i) for i in range(32000)]
    assert len(set(words)) == 32000
    assert words[:NUM_SPECIAL] == list(SPECIAL_TOKENS)
    ids = list(range(NUM_SPECIAL, 32000, 97))
    assert tok.encode(tok.decode(ids)) == ids


def test_count_is_the_number_of_whitespace_pieces(tok):
    text = "The quick  brown\tfox\njumps   héllo <|user|> <|eos|>"
    ids = tok.encode(text)
    assert len(ids) == len(text.split()) == 8
    assert ids[-2:] == [ROLE_IDS["user"], EOS_ID]
    assert tok.encode("") == [] and tok.encode("   \n") == []


@pytest.mark.parametrize("word", ["hello", "World", "x", "ÿ€", "42", "kaka!"])
def test_unknown_words_hash_stably_into_the_regular_ids(word):
    a, b = Tokenizer(32000), Tokenizer(1000)
    (ia,), (ib,) = a.encode(word), b.encode(word)
    assert a.encode(word) == [ia] and NUM_SPECIAL <= ia < 32000 and NUM_SPECIAL <= ib < 1000


def test_out_of_vocabulary_ids_are_refused(tok):
    with pytest.raises(ValueError, match="out of vocabulary"):
        tok.decode([5, 32000])
    assert tok.is_valid_id(31999) and not tok.is_valid_id(-1) and not tok.is_valid_id(True)


def test_chat_template_is_role_token_then_content_then_assistant(tok):
    ids = tok.apply_chat_template([("system", "be brief"), ("user", "hi there"), ("bot", "x")])
    assert ids == ([ROLE_IDS["system"], *tok.encode("be brief"), ROLE_IDS["user"],
                    *tok.encode("hi there"), 6, *tok.encode("x"), GENERATION_PROMPT_ID])
    no_prompt = tok.apply_chat_template([("user", "hi")], add_generation_prompt=False)
    assert no_prompt == [ROLE_IDS["user"], *tok.encode("hi")]


def test_output_is_a_deterministic_function_of_the_prompt():
    model = OutputModel(vocab_size=32000, eos_min_tokens=8, eos_max_tokens=64)
    seed = model.seed([10, 11, 12])
    assert seed == model.seed([10, 11, 12]) != model.seed([10, 11, 13])
    tokens = [model.token(seed, i) for i in range(200)]
    assert tokens == [model.token(seed, i) for i in range(200)]
    assert all(NUM_SPECIAL <= t < 32000 for t in tokens) and len(set(tokens)) > 150


def test_plan_length_stop_and_min_tokens():
    model = OutputModel(vocab_size=32000, eos_min_tokens=8, eos_max_tokens=64)
    naturals = {model.natural_length(s) for s in range(0, 100000, 997)}
    assert min(naturals) >= 8 and max(naturals) <= 64 and len(naturals) > 20
    seed = next(s for s in range(1000) if model.natural_length(s) < 40)
    natural = model.natural_length(seed)
    assert model.plan(seed, max_tokens=100, min_tokens=0, ignore_eos=True) == (100, "length")
    assert model.plan(seed, max_tokens=100, min_tokens=0, ignore_eos=False) == (natural, "stop")
    assert model.plan(seed, max_tokens=natural - 1, min_tokens=0, ignore_eos=False) == (
        natural - 1, "length")
    # EOS may come only after min_tokens tokens; min_tokens = max_tokens forces the length.
    assert model.plan(seed, max_tokens=100, min_tokens=50, ignore_eos=False) == (51, "stop")
    assert model.plan(seed, max_tokens=50, min_tokens=50, ignore_eos=False) == (50, "length")


def test_word_pieces_make_a_tokenizer_that_is_not_one_token_per_word():
    tok = Tokenizer(32000, piece_chars=3)
    assert len(tok.encode("a of The history measurement")) == 1 + 1 + 1 + 3 + 4
    vocabulary_word = Tokenizer(32000).word(NUM_SPECIAL + 5000)
    assert tok.encode(f"{vocabulary_word} <|user|>") == [NUM_SPECIAL + 5000, ROLE_IDS["user"]]
    assert tok.encode("history") == tok.encode("his tor y")  # pieces hash like words
