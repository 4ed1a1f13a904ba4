import pytest

from llmload.core.units import (
    format_duration_s,
    format_tokens,
    parse_duration,
    parse_int_list,
    parse_token_list,
    parse_tokens,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16K", 16_384),
        ("16k", 16_384),
        ("1M", 1_048_576),
        ("1m", 1_048_576),
        ("0", 0),
        ("8192", 8_192),
        ("8,192", 8_192),
        ("1,048,576", 1_048_576),
        (" 48K ", 49_152),
        ("1.5K", 1_536),
        ("3,073K", 3_073 * 1024),
        (8192, 8_192),
        (0, 0),
    ],
)
def test_parse_tokens(text, expected):
    assert parse_tokens(text) == expected


@pytest.mark.parametrize(
    "bad", ["-1", -1, "abc", "", "16Q", "1.3K", "8,19", "8,1920", "1.5", True, None, "K"]
)
def test_parse_tokens_rejects(bad):
    with pytest.raises(ValueError) as info:
        parse_tokens(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert "\n" not in message


def test_parse_token_list():
    assert parse_token_list("0,16K,32K") == [0, 16_384, 32_768]
    assert parse_token_list(" 0 , 16k ") == [0, 16_384]
    assert parse_token_list("") == []
    assert parse_token_list(["8K", 16384, "32K"]) == [8_192, 16_384, 32_768]
    with pytest.raises(ValueError, match="'x'"):
        parse_token_list("0,x")


def test_parse_int_list():
    assert parse_int_list("1,2,4") == [1, 2, 4]
    assert parse_int_list([1, "8"]) == [1, 8]
    assert parse_int_list("") == []
    with pytest.raises(ValueError, match="'0'"):
        parse_int_list("1,0")
    with pytest.raises(ValueError, match="'two'"):
        parse_int_list("1,two")
    assert parse_int_list("0,3", minimum=0) == [0, 3]


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 30.0),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1.5m", 90.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("2 min", 120.0),
        (30, 30.0),
        (0.25, 0.25),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["0", "0s", "-5s", "abc", "5x", "", 0, -1.0, True, float("inf")])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError) as info:
        parse_duration(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(
    "n, text",
    [
        (16_384, "16K"),
        (49_152, "48K"),
        (8_192, "8K"),
        (0, "0"),
        (1_000, "1,000"),
        (8_200, "8,200"),
        (1_048_576, "1M"),
        (1, "1"),
    ],
)
def test_format_tokens(n, text):
    assert format_tokens(n) == text


def test_format_tokens_round_trips():
    for n in (0, 1, 1_000, 8_192, 16_384, 57_344, 1_048_576, 3 * 1_048_576 + 1024):
        assert parse_tokens(format_tokens(n)) == n


@pytest.mark.parametrize(
    "seconds, text",
    [(0.5, "500 ms"), (30, "30 s"), (1.5, "1.5 s"), (150, "2 min 30 s"), (120, "2 min"),
     (3900, "1 h 05 min")],
)
def test_format_duration_s(seconds, text):
    assert format_duration_s(seconds) == text
