"""Runs submitted over HTTP (`llmload hub --accept-runs`): the tokens that may submit, who
submitted each run and its tier, and the records uploaded with a run.

Revision ID: 0004_submissions
Revises: 0003_origin_optional

- `tokens`: one row per token `llmload hub-token add NAME` made: its name, the public id the
  token starts with, and a salted scrypt hash of its secret (never the token); revoked_at
  set by `hub-token revoke`.
- `runs.submitter` (the token's name; NULL for a run published into the store directly) and
  `runs.tier`: "here" (published into the store by its operator), "pending" (submitted,
  not on the leaderboard until approved) or "approved". Existing runs are "here".
- `run_records`: the Parquet records files uploaded with a run (`publish --to --with-records`).
Columns are added, never a table recreated: on SQLite that keeps `cells` out of a cascade.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_submissions"
down_revision = "0003_origin_optional"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("token_id", sa.String(16), nullable=False, unique=True),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("revoked_at", sa.String(32)),
    )
    op.add_column("runs", sa.Column("submitter", sa.String(64)))
    op.add_column("runs", sa.Column("tier", sa.String(16), nullable=False, server_default="here"))
    op.create_index("ix_runs_tier", "runs", ["tier"])
    op.create_index("ix_runs_submitter_published_at", "runs", ["submitter", "published_at"])
    op.create_table(
        "run_records",
        sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_records")
    op.drop_index("ix_runs_submitter_published_at", "runs")
    op.drop_index("ix_runs_tier", "runs")
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:  # the batch recreates runs: its cells are kept aside from the cascade (as 0003 does)
        op.execute("CREATE TEMP TABLE _cells_kept AS SELECT * FROM cells")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("tier")
        batch.drop_column("submitter")
    if sqlite:
        op.execute("DELETE FROM cells")
        op.execute("INSERT INTO cells SELECT * FROM _cells_kept")
        op.execute("DROP TABLE _cells_kept")
    op.drop_table("tokens")
