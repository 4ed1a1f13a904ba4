"""Request traces to replay (`llmload run --workload replay --trace FILE`), read and checked.

Two JSONL formats, told apart per line by their keys:
- Mooncake: `timestamp` (ms from the trace's start), `input_length`, `output_length`,
  `hash_ids` (ids of 512-token blocks: equal ids mean equal content, so the prompts are built
  with identical text for a shared block and the prefix cache sees the sharing;
  `llmload.core.traffic.prompts`).
- plain: `timestamp` (ms, optional: without one a request goes at the previous one's time),
  `prompt` (text) or `prompt_tokens` (a count), and `output_tokens`.
Blank lines are skipped. A line that is not a JSON object, lacks a field or holds a wrong
value is a `TraceError` naming the file and line (`FILE:LINE: problem`), before anything
runs. Timestamps must not go backwards. Pure but for `load_trace`'s one read of the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per Mooncake hash block."""
MAX_TRACE_REQUESTS = 1_000_000


class TraceError(ValueError):
    """A trace that cannot be replayed; the message is one line: FILE:LINE: problem."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRequest:
    """One request of a trace."""

    line: int
    """Its line in the file (1-based)."""
    t_s: float
    """When it is sent, seconds from the trace's start (before --speedup)."""
    input_tokens: int
    """Prompt tokens (for a `prompt` text: 0, the server counts)."""
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    """Mooncake block ids, in order; empty for the plain format."""
    prompt: str | None = None
    """The plain format's prompt text, when given as text."""
    images: tuple[str, ...] = ()
    """A dataset entry's images sent after its text (--dataset-images; `images.reference_url`)."""

    def cut_to(self, n_tokens: int) -> "TraceRequest":
        """This request with its prompt cut to n_tokens, the leading hash blocks that hold
        them kept (`fit_trace`'s clip, `--max-prompt-tokens`)."""
        return replace(self, input_tokens=n_tokens, hash_ids=self.hash_ids[:-(-n_tokens // MOONCAKE_BLOCK_TOKENS)])


def _int_field(d: dict, key: str, where: str, *, minimum: int) -> int:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {key} must be an integer, got {value!r}")
    if value < minimum:
        raise TraceError(f"{where}: {key} must be at least {minimum}, got {value!r}")
    return value


def _timestamp_s(d: dict, where: str, previous: float, *, required: bool) -> float:
    if "timestamp" not in d:
        if required:
            raise TraceError(f"{where}: no timestamp (ms)")
        return previous
    value = d["timestamp"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise TraceError(f"{where}: timestamp must be a number of milliseconds ≥ 0, got {value!r}")
    t = float(value) / 1000.0
    if t < previous:
        raise TraceError(f"{where}: timestamp {value!r} goes back in time (the line before is at "
                         f"{previous * 1000:g} ms)")
    return t


def parse_line(text: str, where: str, previous_s: float, line: int) -> TraceRequest:
    """One trace line (not blank) as a TraceRequest; TraceError naming `where`."""
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise TraceError(f"{where}: not JSON") from None
    if not isinstance(d, dict):
        raise TraceError(f"{where}: not a JSON object")
    if "hash_ids" in d or "input_length" in d:
        for key in ("input_length", "output_length", "hash_ids"):
            if key not in d:
                raise TraceError(f"{where}: no {key} (a Mooncake line has timestamp, input_length, "
                                 "output_length, hash_ids)")
        inputs = _int_field(d, "input_length", where, minimum=1)
        outputs = _int_field(d, "output_length", where, minimum=1)
        ids = d["hash_ids"]
        if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise TraceError(f"{where}: hash_ids must be a list of integers")
        if len(ids) * MOONCAKE_BLOCK_TOKENS < inputs:
            raise TraceError(f"{where}: {len(ids)} hash_ids hold {len(ids) * MOONCAKE_BLOCK_TOKENS} tokens, "
                             f"fewer than input_length {inputs}")
        return TraceRequest(line=line, t_s=_timestamp_s(d, where, previous_s, required=True),
                            input_tokens=inputs, output_tokens=outputs, hash_ids=tuple(ids))
    if "output_tokens" not in d:
        raise TraceError(f"{where}: no output_tokens (a plain line has prompt or prompt_tokens, "
                         "output_tokens and an optional timestamp)")
    outputs = _int_field(d, "output_tokens", where, minimum=1)
    t = _timestamp_s(d, where, previous_s, required=False)
    if "prompt" in d:
        if not isinstance(d["prompt"], str) or not d["prompt"]:
            raise TraceError(f"{where}: prompt must be a non-empty text")
        return TraceRequest(line=line, t_s=t, input_tokens=0, output_tokens=outputs, prompt=d["prompt"])
    if "prompt_tokens" not in d:
        raise TraceError(f"{where}: no prompt or prompt_tokens")
    return TraceRequest(line=line, t_s=t, input_tokens=_int_field(d, "prompt_tokens", where, minimum=1),
                        output_tokens=outputs)


def parse_trace(lines, name: str) -> tuple[TraceRequest, ...]:
    """The requests of a trace's lines (text, in order); `name` names it in errors."""
    out: list[TraceRequest] = []
    previous = 0.0
    for i, text in enumerate(lines, 1):
        if not text.strip():
            continue
        request = parse_line(text, f"{name}:{i}", previous, i)
        previous = request.t_s
        out.append(request)
        if len(out) > MAX_TRACE_REQUESTS:
            raise TraceError(f"{name}:{i}: more than {MAX_TRACE_REQUESTS:,} requests")
    if not out:
        raise TraceError(f"{name}: no requests in the trace")
    return tuple(out)


def load_trace(path: str | os.PathLike[str]) -> tuple[TraceRequest, ...]:
    """The trace file's requests; TraceError (one line) when it cannot be read or replayed."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            return parse_trace(f, name)
    except OSError as exc:
        raise TraceError(f"{name}: cannot read the trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def trace_duration_s(requests: tuple[TraceRequest, ...], speedup: float = 1.0) -> float:
    """Seconds from the first request's send to the last one's, at `speedup`."""
    return (requests[-1].t_s - requests[0].t_s) / speedup


REPLAY_TAIL_S = 0.001
"""A replay window ends this long after the trace's last request is due (the window holds it)."""


def replay_window_s(requests: tuple[TraceRequest, ...], speedup: float = 1.0) -> float:
    """A replay cell's window: the trace's span at its speedup, and REPLAY_TAIL_S."""
    return trace_duration_s(requests, speedup) + REPLAY_TAIL_S


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceFit:
    """A trace read against the server's per-sequence limit (`fit_trace`)."""

    requests: tuple[TraceRequest, ...]
    """The requests to send, in order (clipped ones shortened)."""
    lines: int
    """The trace's requests, all of them."""
    over: tuple[int, ...]
    """Line numbers whose prompt + output exceed the limit."""
    skipped: int
    """Of those, not sent."""
    clipped: int
    """Of those, sent with a shortened prompt."""
    mode: str

    def notice(self, limit: int | None, *, shown: int = 5, whose: str = "the trace's",
               where: str = "line(s)") -> str | None:
        """One line about the lines over the limit; None when there are none."""
        if not self.over:
            return None
        lines = ", ".join(map(str, self.over[:shown])) + (", ..." if len(self.over) > shown else "")
        what = {"skip": "skipped (--over-context skip)", "send": "sent all the same (--over-context send)",
                "clip": f"clipped to fit (--over-context clip; {self.skipped:,} whose output alone is over it skipped)"
                if self.skipped else "clipped to fit (--over-context clip)"}[self.mode]
        return (f"{len(self.over):,} of {whose} {self.lines:,} requests exceed the context "
                f"({limit:,} tokens, prompt + output) and are {what}: {where} {lines}")


def fit_trace(requests: tuple[TraceRequest, ...], limit: int | None, mode: str, *,
              whose: str = "the trace's") -> TraceFit:
    """The trace against a per-sequence limit of `limit` tokens (prompt + output; None:
    unknown, nothing checked). A line over it is skipped, clipped (its prompt cut to
    limit − output tokens, the leading hash blocks that hold them kept; skipped when the
    output alone reaches the limit) or sent, by `mode`. A text prompt (the plain format's
    `prompt`) has no count before the server's: it is never over. TraceError when no
    request is left to send, naming the requests `whose` they are (a dataset's, too)."""
    if limit is None:
        return TraceFit(requests=requests, lines=len(requests), over=(), skipped=0, clipped=0, mode=mode)
    keep: list[TraceRequest] = []
    over: list[int] = []
    skipped = clipped = 0
    for r in requests:
        if r.input_tokens + r.output_tokens <= limit:
            keep.append(r)
            continue
        over.append(r.line)
        room = limit - r.output_tokens
        if mode == "send":
            keep.append(r)
        elif mode == "clip" and room >= 1:
            keep.append(r.cut_to(room))
            clipped += 1
        else:
            skipped += 1
    if not keep:
        shortest = min(r.input_tokens + r.output_tokens for r in requests)
        raise TraceError(f"none of {whose} {len(requests):,} requests fits the server's context "
                         f"({limit:,} tokens, prompt + output): the shortest needs {shortest:,}")
    return TraceFit(requests=tuple(keep), lines=len(requests), over=tuple(over), skipped=skipped,
                    clipped=clipped, mode=mode)
