"""The store's tables (SQLAlchemy Core), one definition for SQLite and PostgreSQL.

- `runs`: one row per published run. `id` is the run's content id
  (`llmload.hub.publish.run_id`: the first 16 hex digits of the sha256 of its stored
  document), so a run published twice, from any machine, is one row. The columns besides
  `results_json` are what lists and filters read (model, engine, hardware, provenance,
  dates); `results_json` is the whole results document, scrubbed of secrets, from which
  `llmload.core.model.document.results_from_dict` gives the run back. The per-request records
  are not copied. Where the run came from, `publisher` (the publishing machine's host name)
  and `source_dir` (the results directory's absolute path there), is stored only where its
  publisher asked (`llmload publish --with-origin`); else both are NULL (revision
  0003_origin_optional cleared what earlier stores held).
- `cells`: one row per cell of a run (`idx`: its position in the document's cells), with its
  identity, status and the figures a leaderboard ranks by. Its identity includes `images`
  (revision 0007_images): the images each request carried (`CellResult.images`, 0 for none),
  so a run with an images axis (`--images 0,2`) has several decode cells at one (context, N),
  and the token board ranks the cells of one image count at a time.
- Submissions over HTTP (`llmload hub --accept-runs`, revision 0004_submissions): `tokens`
  (who may submit: a salted scrypt hash of each token's secret, never the token), a run's
  `submitter` (the token's name) and `tier` (`TIERS`), and `run_records` (the Parquet records
  files uploaded with a run).
- `pooling_cells` (revision 0006_pooling): an embeddings or rerank cell's figures (phase
  "pooling", `CellPooling`), one row beside its `cells` row (the same run_id and idx), what
  the leaderboard ranks such runs by (inputs/s). The revision filled it from the documents of
  the pooling runs stored before it.
- `hardware_prices` (revision 0008_hardware_prices): the hub operator's price per hour of a
  machine, by its hardware name as `runs.hardware` holds it (`llmload hub price set`,
  `llmload.hub.prices`): what a run's cost per token is priced at where the run has no price
  of its own (`llmload.hub.pricing`).

Times are ISO 8601 UTC text (as results.json writes them), which sorts and compares the
same way on both databases. The migrations in `llmload/hub/migrations/versions/` create
exactly these tables (tests/test_hub_store.py compares them).
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, ForeignKey, ForeignKeyConstraint, Index, Integer, LargeBinary, MetaData, String, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

RUN_STATUSES = ("complete", "interrupted", "failed")
"""A stored run's status: a run that ended without one (killed) is stored as interrupted."""

runs = Table(
    "runs", metadata,
    Column("id", String(16), primary_key=True),
    Column("published_at", String(32), nullable=False),
    Column("publisher", Text),
    Column("source_dir", Text),
    Column("status", String(16), nullable=False),
    Column("provenance", String(16), nullable=False),
    Column("workload", String(32), nullable=False),
    Column("model", Text),
    Column("model_root", Text),
    Column("engine", Text),
    Column("engine_version", Text),
    Column("hardware", Text),
    Column("gpu", Text),
    Column("llmload_version", Text),
    Column("started_at", String(32)),
    Column("finished_at", String(32)),
    Column("max_tokens", Integer),
    Column("duration_s", Float),
    Column("results_json", JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    Column("submitter", String(64)),
    Column("tier", String(16), nullable=False, server_default="here"),
    Index("ix_runs_model", "model"),
    Index("ix_runs_model_root", "model_root"),
    Index("ix_runs_started_at", "started_at"),
    Index("ix_runs_tier", "tier"),
    Index("ix_runs_submitter_published_at", "submitter", "published_at"),
)

cells = Table(
    "cells", metadata,
    Column("run_id", String(16), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("phase", String(16), nullable=False),
    Column("context_tokens", Integer, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("rate_rps", Float),
    Column("status", String(32), nullable=False),
    Column("total_tok_s", Float),
    Column("per_request_tok_s", Float),
    Column("ttft_ms", Float),
    Column("ttft_p99_ms", Float),
    Column("tbt_ms", Float),
    Column("tbt_p99_ms", Float),
    Column("prompt_tok_s", Float),
    Column("requests_scheduled", Integer),
    Column("requests_completed", Integer),
    Column("requests_failed", Integer),
    Column("requests_unfinished", Integer),
    Column("requests_not_sent", Integer),
    Column("requests_skipped", Integer),
    Column("total_tok_s_ci_low", Float),
    Column("total_tok_s_ci_high", Float),
    Column("ci_method", String(16)),
    Column("repeats", Integer),
    Column("images", Integer, nullable=False, server_default="0"),
    Index("ix_cells_phase_context_concurrency", "phase", "context_tokens", "concurrency"),
)

FIGURES = ("total_tok_s", "per_request_tok_s", "ttft_ms", "ttft_p99_ms", "tbt_ms", "tbt_p99_ms",
           "prompt_tok_s")
"""The figures a cell row keeps (the cell's own, as results.json holds them)."""
REQUEST_COUNTS = ("requests_scheduled", "requests_completed", "requests_failed", "requests_unfinished",
                  "requests_not_sent", "requests_skipped")
"""An open-loop cell's request counts a cell row keeps (None for the others)."""

INTERVALS = ("total_tok_s_ci_low", "total_tok_s_ci_high", "ci_method", "repeats")
"""A cell's headline interval a cell row keeps (`CellIntervals`; None where it has none)."""

pooling_cells = Table(
    "pooling_cells", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("inputs_per_request", Integer),
    Column("requests_per_s", Float),
    Column("inputs_per_s", Float),
    Column("input_tok_s", Float),
    Column("latency_ms", Float),
    Column("latency_p90_ms", Float),
    Column("latency_p99_ms", Float),
    ForeignKeyConstraint(["run_id", "idx"], ["cells.run_id", "cells.idx"], ondelete="CASCADE"),
)

POOLING_FIGURES = ("requests_per_s", "inputs_per_s", "input_tok_s", "latency_ms", "latency_p90_ms",
                   "latency_p99_ms")
"""The figures a pooling cell's row keeps (`CellPooling`'s, as results.json holds them)."""

TIERS = ("here", "pending", "approved")
"""A run's tier: published into the store by its operator ("here"), submitted over HTTP and
not yet approved ("pending": on no leaderboard), or submitted and approved."""

tokens = Table(
    "tokens", metadata,
    Column("name", String(64), primary_key=True),
    Column("token_id", String(16), nullable=False, unique=True),
    Column("salt", String(64), nullable=False),
    Column("hash", String(128), nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("revoked_at", String(32)),
)

run_records = Table(
    "run_records", metadata,
    Column("run_id", String(16), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

hardware_prices = Table(
    "hardware_prices", metadata,
    Column("hardware", String(200), primary_key=True),
    Column("price_per_hour", Float, nullable=False),
    Column("set_at", String(32), nullable=False),
)
