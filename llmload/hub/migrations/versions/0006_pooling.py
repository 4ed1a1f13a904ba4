"""An embeddings or rerank cell's figures on a row of their own (`llmload.hub.schema.pooling_cells`),
so the leaderboard can rank such runs by inputs/s.

Revision ID: 0006_pooling
Revises: 0005_intervals

A table is added, never one recreated (as 0004). The runs stored before it with cells of
phase "pooling" get their rows from their stored documents: each such cell, its
position in the document's cells as `idx` (as publishing numbers them), its figures as
results.json holds them, the document read by llmload's one reader (`results_from_dict`); a
value that is not a number is stored as none (NULL), a document that cannot be read gives no
rows. The rows are this revision's own, not llmload's publishing, so the revision stays what
it was when publishing changes.
"""

import json

import sqlalchemy as sa
from alembic import op

from llmload.core.model.document import ResultsError, results_from_dict

revision = "0006_pooling"
down_revision = "0005_intervals"
branch_labels = None
depends_on = None

FIGURES = ("requests_per_s", "inputs_per_s", "input_tok_s", "latency_ms", "latency_p90_ms", "latency_p99_ms")


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _rows(run_id: str, document) -> list[dict]:
    """The run's pooling cells' rows, its stored document read as llmload reads one (none
    where it cannot be read: a run is never refused by a migration)."""
    if isinstance(document, str):  # a driver that hands JSON back as text
        document = json.loads(document)
    try:
        cells = results_from_dict(document, source=f"run {run_id}").cells
    except ResultsError:
        return []
    return [{"run_id": run_id, "idx": idx,
             "inputs_per_request": cell.pooling.inputs_per_request,
             **{name: _number(getattr(cell.pooling, name)) for name in FIGURES}}
            for idx, cell in enumerate(cells) if cell.phase == "pooling"]


def upgrade() -> None:
    table = op.create_table(
        "pooling_cells",
        sa.Column("run_id", sa.String(16), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("inputs_per_request", sa.Integer),
        *(sa.Column(name, sa.Float) for name in FIGURES),
        sa.ForeignKeyConstraint(["run_id", "idx"], ["cells.run_id", "cells.idx"], ondelete="CASCADE"),
    )
    runs = sa.table("runs", sa.column("id", sa.String), sa.column("results_json", sa.JSON))
    cells = sa.table("cells", sa.column("run_id", sa.String), sa.column("idx", sa.Integer),
                     sa.column("phase", sa.String))
    bind = op.get_bind()
    stored: dict[str, set[int]] = {}
    for row in bind.execute(sa.select(cells.c.run_id, cells.c.idx).where(cells.c.phase == "pooling")):
        stored.setdefault(row.run_id, set()).add(row.idx)
    for run_id, kept in sorted(stored.items()):  # one document at a time
        document = bind.execute(sa.select(runs.c.results_json).where(runs.c.id == run_id)).scalar_one()
        rows = [row for row in _rows(run_id, document) if row["idx"] in kept]
        if rows:
            bind.execute(sa.insert(table), rows)


def downgrade() -> None:
    op.drop_table("pooling_cells")
