"""The matrix cell protocol between the controller (`llmload.matrix.runmatrix`) and the Locust
processes that run users (`llmload.loadgen.cellworker`, `llmload.loadgen.user`): message names and their typed,
frozen payloads, each with the one place that turns it into Locust message data
(`to_wire`, plain msgpack-able values) and back (`from_wire`).

    controller -> processes: CELL CellSpec, GO Go, COLLECT Collect
    processes -> controller: READY Ready, RECORDS Records

The same messages travel in one process (a LocalRunner delivers messages to itself) and
between a master and its workers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from llmload.core.model.cellfacts import LoadSample
from llmload.core.capacity.clientload import IntervalSample
from llmload.core.model.records import RequestRecord

CELL = "llmload_cell"
GO = "llmload_go"
COLLECT = "llmload_collect"
READY = "llmload_ready"
RECORDS = "llmload_records"
MESSAGE_TYPES = (CELL, GO, COLLECT, READY, RECORDS)
RECORDS_BATCH = 256
"""A process sends its records of a running cell to the controller in batches of this many
(`Records.more`): it holds no more than that, however long the cell runs."""


class _Message:
    __slots__ = ()
    TYPE: ClassVar[str]

    def to_wire(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_wire(cls, data: dict[str, Any]):
        return _from_fields(cls, data)


def _from_fields(cls, data: dict[str, Any]):
    unknown = set(data) - {f.name for f in fields(cls)}
    if unknown:
        raise ValueError(f"{cls.TYPE}: unknown fields {sorted(unknown)}")
    return cls(**data)


@dataclass(frozen=True, slots=True, kw_only=True)
class CellSpec(_Message):
    """What every user of a cell needs to run it ("idle": park until the next cell)."""

    TYPE: ClassVar[str] = CELL
    id: str
    kind: str
    """"idle", "prefill" or "decode"."""
    run_id: str = ""
    name: str = ""
    context: int = 0
    prompt_tokens: int = 0
    concurrency: int = 0
    max_tokens: int = 0
    endpoint: str = "completions"
    path: str = ""
    model: str = ""
    engine: str = ""
    base_url: str = ""
    timeout_s: float = 600.0
    warmup: bool = True
    repeats: int = 1
    fixed_output: bool = True
    temperature: float = 0.0
    pool_ids: tuple[int, ...] = ()
    """The prompt builder's token-ID pool (empty: text prompts)."""
    tokens_per_word: float = 1.0
    overhead_tokens: int = 0
    text_words: int = 0
    """Words of the text prompt fitted to prompt_tokens by the server's count (0: none,
    sized from tokens_per_word)."""
    text_tail: int = -1
    """The fitted text's tail word (`PromptBuilder.tail_words`; -1: none)."""
    # The workloads beyond the matrix (kind "session", "rate", "replay"; `llmload.core.traffic.workloads`).
    system_prompt_tokens: int = 0
    """Session: the shared system prompt's tokens (same text for every user)."""
    turns: int = 0
    """Session: turns per conversation (then a new conversation starts)."""
    turn_tokens: int = 0
    think_time: str = "0"
    rate_rps: float = 0.0
    """Rate: requests per second over all pacing users (each sends its share)."""
    arrivals: str = "poisson"
    schedule: str = ""
    """Rate: a rate that changes over the window (`llmload.core.traffic.schedule`); decode and
    session: users that ramp (`schedule.parse_users_ramp`, each joins at its slot's time); ""
    for none."""
    processes: int = 1
    """The processes that run the cell's users: a users ramp's slots are dealt over them."""
    max_in_flight: int = 0
    """Rate and replay: requests in flight at most over all pacing users (each its share)."""
    pacers: int = 0
    """Rate and replay: the pacing users of the cell, over all processes."""
    trace: tuple[tuple, ...] = ()
    """Replay: (t_s after t0, input_tokens, output_tokens, hash_ids tuple, prompt text or "")
    per request, already divided by the speedup; pacer i of P sends every P-th from the i-th."""
    drain_s: float = 0.0
    """Rate and replay: how long after t1 requests sent in the window may run on (then cancelled)."""
    prompt_lengths: str = ""
    """Rate: the prompt lengths' distribution (`core.lengths` DIST; "": prompt_tokens each)."""
    output_lengths: str = ""
    """Rate: the output lengths' distribution ("": max_tokens each)."""
    seed: int = 0
    """Rate: the scenario's seed for the drawn lengths."""
    cancel: float = 0.0
    """Rate and session: the share of requests the client closes before their end (`core.cancels`)."""
    cancel_after: str = ""
    """When they are closed: a `core.cancels` DIST ("": no cancel)."""
    dataset: tuple[tuple[str, int, int, tuple[str, ...]], ...] = ()
    """Rate with a dataset: (prompt text, its tokens by the server's count, output tokens, its
    images: files or data URLs, sent with --dataset-images) per entry, in order; pacer i of P sends entry i + k·P at its k-th arrival (from the first
    again past the last)."""
    conversations: tuple[tuple[tuple[str, int, int], ...], ...] = ()
    """Session with a dataset: its conversations, each (user message, its tokens, the answer's
    tokens) per turn (`llmload.loadgen.sessions`)."""
    seq_limit: int = 0
    """Rate: the server's per-sequence tokens, drawn lengths' ceiling (0: unknown)."""
    inputs: int = 1
    """Pooling (embeddings, rerank): inputs (rerank: documents) per request."""
    images: int = 0
    """Images in each request's user message (`llmload.core.traffic.images`); then
    prompt_tokens is the text's part."""
    image_size: str = ""
    image_dir: str = ""
    window_s: float = 0.0
    """Rate and replay: the window's length t1 − t0 (a rate cell's arrivals are drawn over it
    before the window starts, so their bodies can be built ahead)."""

    @classmethod
    def idle(cls, cell_id: str) -> "CellSpec":
        return cls(id=cell_id, kind="idle")

    def to_wire(self) -> dict[str, Any]:
        d = asdict(self)
        d["pool_ids"] = list(self.pool_ids)
        d["trace"] = [[t, i, o, list(h), p] for t, i, o, h, p in self.trace]
        return d

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "CellSpec":
        trace = tuple((t, i, o, tuple(h), p) for t, i, o, h, p in data.get("trace") or ())
        dataset = tuple((p, i, o, tuple(m)) for p, i, o, m in data.get("dataset") or ())
        conversations = tuple(tuple((t, n, o) for t, n, o in c) for c in data.get("conversations") or ())
        return _from_fields(cls, {**data, "pool_ids": tuple(data.get("pool_ids") or ()), "trace": trace,
                                  "dataset": dataset, "conversations": conversations})


@dataclass(frozen=True, slots=True, kw_only=True)
class Go(_Message):
    """The common window [t0_s, t1_s] of a decode cell (`llmload.core.clock` seconds)."""

    TYPE: ClassVar[str] = GO
    id: str
    t0_s: float
    t1_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Collect(_Message):
    """Send the cell's records; t0_s/t1_s (None for prefill) bound the load samples."""

    TYPE: ClassVar[str] = COLLECT
    id: str
    t0_s: float | None = None
    t1_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready(_Message):
    """n users of the process warmed up (or finished a prefill cell)."""

    TYPE: ClassVar[str] = READY
    id: str
    n: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Records(_Message):
    """One process's records of a cell, its monitor samples in the window
    (`cellfacts.LoadSample`: CPU, loop lag, freezes) and
    what its hot path saw per monitor interval (reads, events, read backlog:
    `clientload.IntervalSample`), from which the added-delay estimate is made. With `more`:
    a batch of the records sent while the cell runs (`RECORDS_BATCH` of them, no samples);
    the process's reply to the collect message comes after its batches, without `more`."""

    TYPE: ClassVar[str] = RECORDS
    id: str
    records: tuple[RequestRecord, ...] = ()
    load_samples: tuple[LoadSample, ...] = ()
    read_samples: tuple[IntervalSample, ...] = ()
    more: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "records": [r.to_wire() for r in self.records],
                "load_samples": [s.to_wire() for s in self.load_samples],
                "read_samples": [s.to_wire() for s in self.read_samples], "more": self.more}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Records":
        return cls(id=data["id"], records=tuple(RequestRecord.from_wire(r) for r in data.get("records") or ()),
                   more=bool(data.get("more")),
                   load_samples=tuple(LoadSample.from_wire(s) for s in data.get("load_samples") or ()),
                   read_samples=tuple(IntervalSample.from_wire(s) for s in data.get("read_samples") or ()))
