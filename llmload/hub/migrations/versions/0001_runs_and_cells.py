"""The store's first schema: runs and their cells (`llmload.hub.schema`).

Revision ID: 0001
Revises: none
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("published_at", sa.String(32), nullable=False),
        sa.Column("publisher", sa.Text, nullable=False),
        sa.Column("source_dir", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("provenance", sa.String(16), nullable=False),
        sa.Column("workload", sa.String(32), nullable=False),
        sa.Column("model", sa.Text),
        sa.Column("model_root", sa.Text),
        sa.Column("engine", sa.Text),
        sa.Column("engine_version", sa.Text),
        sa.Column("hardware", sa.Text),
        sa.Column("gpu", sa.Text),
        sa.Column("llmload_version", sa.Text),
        sa.Column("started_at", sa.String(32)),
        sa.Column("finished_at", sa.String(32)),
        sa.Column("max_tokens", sa.Integer),
        sa.Column("duration_s", sa.Float),
        sa.Column("results_json", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    )
    op.create_index("ix_runs_model", "runs", ["model"])
    op.create_index("ix_runs_model_root", "runs", ["model_root"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_table(
        "cells",
        sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("context_tokens", sa.Integer, nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("rate_rps", sa.Float),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("total_tok_s", sa.Float),
        sa.Column("per_request_tok_s", sa.Float),
        sa.Column("ttft_ms", sa.Float),
        sa.Column("ttft_p99_ms", sa.Float),
        sa.Column("tbt_ms", sa.Float),
        sa.Column("tbt_p99_ms", sa.Float),
        sa.Column("prompt_tok_s", sa.Float),
    )
    op.create_index("ix_cells_phase_context_concurrency", "cells", ["phase", "context_tokens", "concurrency"])


def downgrade() -> None:
    op.drop_table("cells")
    op.drop_table("runs")
