"""Token timing from streamed chunks (TokenTimeline): sources, multi-token chunks, errors."""

import json

import pytest

from llmload.wire.stream import TokenTimeline, error_message_from_body


def chunk(text="x", n=None, finish=None, prompt=5, chat=False, role=False):
    if chat:
        delta = {"role": "assistant", "content": ""} if role else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    obj = {"id": "c", "choices": [choice]}
    if n is not None:
        obj["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n}
    return json.dumps(obj, separators=(",", ":")).encode()


def final_usage(n, prompt=5, cached=None):
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return json.dumps({"id": "c", "choices": [], "usage": usage}).encode()


def test_continuous_usage_counts_the_delta_not_chunks():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk(" a b", n=2)])
    tl.feed(1.1, [chunk(" c d e", n=5)])
    tl.feed(1.2, [chunk(" f", n=6, finish="length")])
    tl.feed(1.2, [final_usage(6, cached=3), b"[DONE]"])
    assert tl.finish() == "continuous_usage"
    assert list(tl.chunk_tokens) == [2, 3, 1]
    assert list(tl.chunk_times_s) == [1.0, 1.1, 1.2]
    assert (tl.finish_reason, tl.completion_tokens, tl.prompt_tokens, tl.cached_tokens) == ("length", 6, 5, 3)
    assert tl.done


def test_chat_role_only_chunk_is_not_a_token():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk(chat=True, role=True, n=0)])
    tl.feed(1.5, [chunk("hi", chat=True, n=1)])
    tl.feed(1.6, [chunk(" there", chat=True, n=2, finish="stop"), b"[DONE]"])
    tl.finish()
    assert list(tl.chunk_times_s) == [1.5, 1.6]
    assert tl.output_tokens == 2
    # No reasoning field: no reasoning count, and the answer began with the first token.
    assert tl.reasoning_tokens is None and tl.first_answer_s == 1.5


def test_chat_role_only_chunk_without_usage_is_not_a_token_either():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk(chat=True, role=True)])
    tl.feed(1.5, [chunk("hi", chat=True)])
    tl.feed(1.6, [chunk("", chat=True, finish="stop"), b"[DONE]"])
    assert tl.finish() == "chunks"
    assert list(tl.chunk_times_s) == [1.5]


def test_final_usage_is_kept_but_never_spread_over_chunks():
    # An even spread would invent 3-token chunks; the chunks are counted and flagged, and
    # the server's final count is kept beside them for the check.
    tl = TokenTimeline()
    for i in range(4):
        tl.feed(1.0 + i, [chunk("ab")])
    tl.feed(5.0, [chunk("", finish="length")])
    tl.feed(5.0, [final_usage(10)])
    assert tl.finish() == "chunks"
    assert list(tl.chunk_tokens) == [1, 1, 1, 1]
    assert tl.completion_tokens == 10


def llama_chunk(text, predicted_n, predicted_ms, finish=None, chat=False):
    """A llama.cpp chunk with `timings_per_token`: cumulative timings on every chunk."""
    if chat:
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish}
    timings = {"cache_n": 0, "prompt_n": 40, "prompt_ms": 20.0, "prompt_per_second": 2000.0,
               "predicted_n": predicted_n, "predicted_ms": predicted_ms,
               "predicted_per_token_ms": predicted_ms / max(predicted_n - 1, 1)}
    return json.dumps({"choices": [choice], "timings": timings}).encode()


def test_llama_cpp_timings_count_every_chunk_exactly():
    # Increments 1, 0 (a partial UTF-8 character: empty content, no new token), 2 (the
    # rest of it plus one) and 45 (a chat output parser flushing what it held back).
    tl = TokenTimeline(count_key="predicted_n")
    tl.feed(1.00, [llama_chunk("a", 1, 0.001, chat=True)])
    tl.feed(1.01, [llama_chunk("", 1, 8.0, chat=True)])
    tl.feed(1.02, [llama_chunk("\u00e9b", 3, 17.0, chat=True)])
    tl.feed(1.40, [llama_chunk("x" * 45, 48, 400.0, chat=True)])
    assert tl.finish() == "timings_per_token"
    assert list(tl.chunk_tokens) == [1, 2, 45]
    assert list(tl.chunk_times_s) == [1.00, 1.02, 1.40]
    assert tl.timings["predicted_n"] == 48 and tl.timings["predicted_ms"] == 400.0


def test_llama_cpp_empty_content_chunk_whose_count_grew_is_a_token():
    tl = TokenTimeline(count_key="predicted_n")
    tl.feed(1.0, [llama_chunk("a", 1, 0.001)])
    tl.feed(1.1, [llama_chunk("", 2, 10.0)])
    tl.finish()
    assert list(tl.chunk_tokens) == [1, 1]


def test_llama_cpp_final_chunk_timings_are_read():
    tl = TokenTimeline(count_key="predicted_n")
    tl.feed(1.0, [llama_chunk("a", 1, 0.001)])
    tl.feed(1.1, [llama_chunk("b", 2, 9.5, finish="length"), b"[DONE]"])
    assert tl.finish() == "timings_per_token"
    assert tl.output_tokens == 2
    assert tl.timings["predicted_ms"] == 9.5


def test_llama_cpp_chat_count_that_grows_only_in_the_final_chunk_is_counted():
    # As recorded from llama-server (chat, timings_per_token): the last content chunk says
    # 255, the finish chunk has no timings, and the choices-less final chunk says 256 (the
    # output parser held the last token's text back). The usage says 256 too.
    tl = TokenTimeline(count_key="predicted_n")
    tl.feed(1.00, [llama_chunk("a", 254, 900.0, chat=True)])
    tl.feed(1.01, [llama_chunk("b", 255, 905.0, chat=True)])
    finish = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}).encode()
    final = json.loads(llama_chunk("", 256, 910.0))
    final["choices"] = []
    final["usage"] = {"prompt_tokens": 40, "completion_tokens": 256, "total_tokens": 296}
    tl.feed(1.02, [finish, json.dumps(final).encode(), b"[DONE]"])
    tl.finish()
    assert tl.output_tokens == 256 == tl.completion_tokens
    assert list(tl.chunk_tokens)[-1] == 1 and list(tl.chunk_times_s)[-1] == 1.02


def test_a_token_whose_text_llama_cpp_held_back_arrives_with_its_count():
    # As recorded from llama-server (chat, max_tokens 1, a random-weight model): the one
    # token is a partial UTF-8 character, so no chunk carries text; the finish chunk has an
    # empty delta and the final chunk the counts. The token arrived with them.
    tl = TokenTimeline(count_key="predicted_n")
    finish = json.dumps({"choices": [{"finish_reason": "length", "index": 0, "delta": {}}]}).encode()
    final = json.loads(llama_chunk("", 1, 0.5))
    final["choices"] = []
    final["usage"] = {"completion_tokens": 1, "prompt_tokens": 1327, "total_tokens": 1328}
    tl.feed(2.5, [finish, json.dumps(final).encode()])
    tl.feed(2.6, [b"[DONE]"])
    tl.finish()
    assert list(tl.chunk_times_s) == [2.5] and tl.output_tokens == 1 == tl.completion_tokens
    # an answer of no tokens stays empty
    empty = TokenTimeline()
    empty.feed(1.0, [chunk("", finish="stop"), final_usage(0), b"[DONE]"])
    assert empty.output_tokens == 0 and not empty.chunk_times_s


def test_a_final_total_is_not_counted_again_on_a_stream_counted_by_chunks():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk("a")])
    tl.feed(1.1, [chunk("b", finish="length")])
    tl.feed(1.1, [final_usage(2), b"[DONE]"])
    assert tl.finish() == "chunks" and tl.output_tokens == 2


def test_no_usage_at_all_counts_content_chunks_and_says_so():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk("a")])
    tl.feed(2.0, [chunk("b", finish="stop"), b"[DONE]"])
    assert tl.finish() == "chunks"
    assert tl.output_tokens == 2
    assert tl.finish_reason == "stop"


def test_single_chunk_with_finish_and_usage_counts_once():
    # max_tokens 1 on the completions endpoint: the only token comes with its finish reason.
    tl = TokenTimeline()
    tl.feed(1.0, [chunk("a", n=1, finish="length"), final_usage(1), b"[DONE]"])
    tl.finish()
    assert tl.output_tokens == 1


def test_chunks_read_together_are_one_arrival():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk("a", n=1), chunk("b", n=2)])
    tl.feed(1.0, [chunk("c", n=3)])
    tl.finish()
    assert list(tl.chunk_times_s) == [1.0]
    assert list(tl.chunk_tokens) == [3]


def test_in_stream_error_is_recorded():
    tl = TokenTimeline()
    tl.feed(1.0, [chunk("a", n=1)])
    tl.feed(1.1, [b'{"error": {"message": "engine died", "code": 500}}'])
    tl.finish()
    assert tl.error == "engine died"


def test_flat_vllm_error_object():
    tl = TokenTimeline()
    tl.feed(1.0, [b'{"object": "error", "message": "bad things", "code": 400}'])
    assert tl.error == "bad things"


def test_text_that_mentions_keys_does_not_fool_the_fast_path():
    tricky = json.dumps({"choices": [{"index": 0, "text": '"completion_tokens": 99 "finish_reason": "stop"',
                                      "finish_reason": None}],
                         "usage": {"prompt_tokens": 1, "total_tokens": 2, "completion_tokens": 1}}).encode()
    tl = TokenTimeline()
    tl.feed(1.0, [tricky])
    assert tl.output_tokens == 1
    assert tl.finish_reason is None


def test_error_body_message():
    body = b'{"error":{"message":"This model\'s maximum context length is 100 tokens.","type":"BadRequestError","code":400}}'
    assert error_message_from_body(body, 400) == "HTTP 400: This model's maximum context length is 100 tokens."
    assert error_message_from_body(b"<html>nope</html>", 502) == "HTTP 502: <html>nope</html>"


# --------------------------------------------------------------------------- thinking and answering

from llmload.wire.sse import SSEDecoder  # noqa: E402
from llmload.wire.stream import ANSWER_FIELDS, REASONING_FIELDS  # noqa: E402


def think_chunk(delta: dict, n=None, finish=None) -> bytes:
    """A chat chunk with this delta, in vLLM's compact form; usage when n is given."""
    obj = {"id": "c", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if n is not None:
        obj["usage"] = {"prompt_tokens": 5, "total_tokens": 5 + n, "completion_tokens": n}
    return json.dumps(obj, separators=(",", ":")).encode()


def thinking_stream(field: str, *, counted: bool = True) -> list[tuple[float, bytes]]:
    """Role chunk, three reasoning chunks, then three answer chunks (the last finishes)."""
    u = (lambda n: n) if counted else (lambda n: None)
    return [(1.0, think_chunk({"role": "assistant", "content": ""}, n=u(0))),
            (1.1, think_chunk({field: "Okay,"}, n=u(1))),
            (1.2, think_chunk({field: " the user"}, n=u(2))),
            (1.3, think_chunk({field: " asks."}, n=u(3))),
            (1.4, think_chunk({"content": "Hello"}, n=u(4))),
            (1.5, think_chunk({"content": " there"}, n=u(5))),
            (1.6, think_chunk({"content": "!"}, n=u(6), finish="length")),
            (1.6, b"[DONE]")]


def fed(events) -> TokenTimeline:
    tl = TokenTimeline()
    for t, payload in events:
        tl.feed(t, [payload])
    tl.finish()
    return tl


def test_the_recognised_field_names_are_data():
    assert set(REASONING_FIELDS) == {"reasoning", "reasoning_content"}
    assert set(ANSWER_FIELDS) == {"text", "content"}


@pytest.mark.parametrize("field", REASONING_FIELDS)
@pytest.mark.parametrize("counted", [True, False], ids=["continuous_usage", "chunks"])
def test_reasoning_chunks_are_told_from_answer_chunks(field, counted):
    tl = fed(thinking_stream(field, counted=counted))
    assert list(tl.chunk_times_s) == [1.1, 1.2, 1.3, 1.4, 1.5, 1.6]  # TTFT: the first thought
    assert tl.output_tokens == 6 and tl.reasoning_tokens == 3
    assert tl.first_answer_s == 1.4
    assert tl.finish_reason == "length"


@pytest.mark.parametrize("field", REASONING_FIELDS)
def test_the_same_through_the_sse_layer_whole_and_one_byte_at_a_time(field):
    wire = b"".join(b"data: " + p + b"\n\n" for _, p in thinking_stream(field))
    for step in (len(wire), 1, 7):
        dec, tl = SSEDecoder(), TokenTimeline()
        for i in range(0, len(wire), step):
            tl.feed(float(i), dec.feed(wire[i:i + step]))
        tl.finish()
        assert (tl.output_tokens, tl.reasoning_tokens) == (6, 3)
        # Stamped with the read that completed the first answer event (times here are offsets).
        event_end = wire.index(b"\n\n", wire.index(b'"content":"Hello"')) + 1
        assert tl.first_answer_s == event_end // step * step


def test_a_plain_stream_has_no_reasoning_and_answers_with_its_first_token():
    # (the chat case: test_chat_role_only_chunk_is_not_a_token)
    completions = fed([(2.0, chunk(" a", n=1)), (2.1, chunk(" b", n=2, finish="length"))])
    assert completions.reasoning_tokens is None and completions.first_answer_s == 2.0


@pytest.mark.parametrize("field", REASONING_FIELDS)
def test_a_chunk_with_both_is_the_first_answer_chunk(field):
    tl = fed([(1.0, think_chunk({field: "Hmm."}, n=2)),
              (1.1, think_chunk({field: " Done.", "content": "Yes"}, n=4)),
              (1.2, think_chunk({"content": "."}, n=5, finish="stop")), (1.2, b"[DONE]")])
    assert tl.reasoning_tokens == 2 and tl.first_answer_s == 1.1 and tl.output_tokens == 5


@pytest.mark.parametrize("field", REASONING_FIELDS)
def test_empty_strings_carry_no_text_and_keep_the_phase(field):
    tl = fed([(1.0, think_chunk({field: "", "content": ""}, n=0)),  # nothing: not a token
              (1.1, think_chunk({field: "Let"}, n=1)),
              (1.2, think_chunk({field: ""}, n=2)),  # a thought ending inside a UTF-8 character
              (1.3, think_chunk({"content": ""}, n=3)),  # still thinking: no answer text yet
              (1.4, think_chunk({field: "", "content": "A"}, n=4)),
              (1.5, think_chunk({"content": ""}, n=5)),  # answering now
              (1.6, think_chunk({field: None, "content": "B"}, n=6, finish="length")), (1.6, b"[DONE]")])
    assert list(tl.chunk_times_s) == [1.1, 1.2, 1.3, 1.4, 1.5, 1.6]
    assert tl.reasoning_tokens == 3 and tl.first_answer_s == 1.4


def test_empty_strings_are_no_tokens_without_a_count():
    tl = fed([(1.0, think_chunk({"reasoning": ""})), (1.1, think_chunk({"reasoning_content": ""})),
              (1.2, think_chunk({"content": ""})), (1.3, think_chunk({"reasoning": "x"}, finish="length"))])
    assert list(tl.chunk_times_s) == [1.3] and tl.reasoning_tokens == 1 and tl.first_answer_s is None


def test_a_stream_cut_while_thinking_has_no_answer():
    tl = fed(thinking_stream("reasoning")[:4])
    assert tl.output_tokens == 3 and tl.reasoning_tokens == 3 and tl.first_answer_s is None


def test_reasoning_and_answer_in_one_read_are_one_arrival_counted_apart():
    s = thinking_stream("reasoning")
    tl = TokenTimeline()
    tl.feed(1.0, [p for _, p in s[:3]])
    tl.feed(1.3, [s[3][1], s[4][1]])  # the last thought and the first answer together
    tl.feed(1.6, [p for _, p in s[5:]])
    tl.finish()
    assert list(tl.chunk_tokens) == [2, 2, 2]
    assert tl.reasoning_tokens == 3 and tl.first_answer_s == 1.3


def test_text_that_mentions_a_field_does_not_fool_the_fast_or_the_full_parse():
    quoted = 'I could answer "content": "yes" {or not}'  # escaped quotes and braces: full parse
    plain = "thinking about content and text"
    tl = fed([(1.0, think_chunk({"reasoning": plain}, n=1)), (1.1, think_chunk({"reasoning": quoted}, n=2)),
              (1.2, think_chunk({"content": "ok"}, n=3, finish="stop")), (1.2, b"[DONE]")])
    assert tl.reasoning_tokens == 2 and tl.first_answer_s == 1.2


def test_a_final_chunk_counted_while_thinking_is_thinking():
    # llama.cpp-style: a count that grows only in the choices-less final chunk (held-back text).
    def llama(delta, n, finish=None, choices=True):
        obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
               "timings": {"predicted_n": n, "predicted_ms": 1.0 * n}}
        return json.dumps(obj).encode()
    tl = TokenTimeline("predicted_n")
    tl.feed(1.0, [llama({"reasoning_content": "a"}, 1)])
    tl.feed(1.1, [llama({}, 1, finish="length")])
    tl.feed(1.2, [llama({}, 2, choices=False), b"[DONE]"])
    assert tl.finish() == "timings_per_token"
    assert tl.output_tokens == 2 and tl.reasoning_tokens == 2 and tl.first_answer_s is None


def test_what_orjson_refuses_and_the_standard_library_takes_still_counts():
    # A lone surrogate escape (a byte-level token cut inside a character) and a NaN: orjson
    # refuses both, json.loads takes them, and so does the timeline; garbage still fails.
    tl = TokenTimeline()
    tl.feed(1.0, [b'{"choices":[{"index":0,"text":"\\ud800","finish_reason":null}],"usage":{"completion_tokens":1}}'])
    tl.feed(1.1, [b'{"choices":[{"index":0,"text":"x","logprobs":NaN,"finish_reason":null}],"usage":{"completion_tokens":2}}'])
    assert list(tl.chunk_tokens) == [1, 1] and tl.error is None
    tl.feed(1.2, [b'{"choices":[{"index":0,"text":"x",'])
    assert tl.error and tl.error.startswith("malformed event data")
