"""What the store's read API answers (`llmload.hub.store`): frozen dataclasses, one per
kind of answer, built from the store's rows."""

from __future__ import annotations

from dataclasses import dataclass

from llmload.hub.pricing import Pricing


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """Which runs to list (None: any). `model` matches the served name or the model root;
    `since` and `until` compare with the run's started_at as ISO 8601 text (`until` is
    exclusive: "2026-12-02" keeps runs started on 1 December and before)."""

    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    hardware: str | None = None
    provenance: str | None = None
    since: str | None = None
    until: str | None = None
    pending: bool = False
    """Also the runs submitted and not yet approved (tier "pending"), which lists,
    leaderboards and counts leave out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """A stored run without its document (the `runs` row)."""

    id: str
    published_at: str
    publisher: str | None
    """The publishing machine's host name, only where stored with `publish --with-origin`."""
    source_dir: str | None
    """The results directory's absolute path there, likewise."""
    status: str
    provenance: str
    workload: str
    model: str | None
    model_root: str | None
    engine: str | None
    engine_version: str | None
    hardware: str | None
    gpu: str | None
    llmload_version: str | None
    started_at: str | None
    finished_at: str | None
    max_tokens: int | None
    duration_s: float | None
    submitter: str | None = None
    """The name of the token that submitted it over HTTP; None: published into the store."""
    tier: str = "here"
    """`schema.TIERS`: published here, pending approval, or approved."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderCell:
    """A run's decode cell at the leaderboard's context."""

    concurrency: int
    status: str
    total_tok_s: float
    per_request_tok_s: float | None
    ttft_ms: float | None
    ttft_p99_ms: float | None
    tbt_ms: float | None
    total_tok_s_ci_low: float | None = None
    """Total tok/s's confidence interval, where the run carries one (`CellIntervals`)."""
    total_tok_s_ci_high: float | None = None
    repeats: int | None = None
    """How many times the run measured the cell (None: once)."""
    usd_per_1m_output_tokens: float | None = None
    """Its cost at the run's pricing (`LeaderRow.pricing`; None: no price)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderRow:
    """One run on a leaderboard: ranked by `total_tok_s` at `concurrency` (the one asked
    for, else the run's best), with every concurrency it measured at that context."""

    run: RunSummary
    context_tokens: int
    concurrency: int
    total_tok_s: float
    per_request_tok_s: float | None
    ttft_ms: float | None
    cells: tuple[LeaderCell, ...]
    """By concurrency, lowest first."""
    launch_command: str | None = None
    """The server's launch command, from the run's document (None: not recorded)."""
    total_tok_s_ci_low: float | None = None
    """The ranked cell's total tok/s interval (None: the run carries none)."""
    total_tok_s_ci_high: float | None = None
    repeats: int | None = None
    rank: int = 0
    """1 for the best; a run whose interval overlaps the one ranked above it shares its rank.
    Ranked by cost (`rank="cost"`): 0 for a run without a price, listed after the priced."""
    tied: bool = False
    """Its interval overlaps the run's above: the difference is within the noise."""
    images: int = 0
    """The images each request of its cells carried (their tokens in the context; 0: none):
    the board's (`Store.leaderboard`'s `images`)."""
    pricing: Pricing = Pricing()
    """What the run's cost per token is priced at (`llmload.hub.pricing.price_of`)."""
    usd_per_1m_output_tokens: float | None = None
    """The ranked cell's cost per 1M output tokens at `pricing` (None: no price)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingCell:
    """A run's embeddings or rerank cell (phase "pooling") at the leaderboard's input length."""

    concurrency: int
    status: str
    inputs_per_s: float
    input_tok_s: float | None
    requests_per_s: float | None
    latency_ms: float | None
    latency_p99_ms: float | None
    inputs_per_request: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingRow:
    """One run on an embeddings or rerank leaderboard: ranked by `inputs_per_s` at
    `concurrency` (the one asked for, else the run's best), with every concurrency it
    measured at that input length. Its figures are `cell`'s; no run is tied (a pooling cell
    has no interval)."""

    run: RunSummary
    endpoint: str | None
    """"embeddings" or "rerank" (the run's `--endpoint`)."""
    context_tokens: int
    """The input length (tokens of each input; rerank: of each document)."""
    concurrency: int
    cell: PoolingCell
    """The ranked cell."""
    cells: tuple[PoolingCell, ...]
    """By concurrency, lowest first."""
    launch_command: str | None = None
    rank: int = 0
    tied: bool = False
    """Never: a pooling cell has no interval to overlap another's."""

    @property
    def inputs_per_s(self) -> float:
        return self.cell.inputs_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelEntry:
    model: str | None
    model_root: str | None
    runs: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareEntry:
    hardware: str | None
    gpu: str | None
    runs: int
    price_per_hour: float | None = None
    """The hub operator's price per hour for it (`llmload hub price set`; None: none)."""
