"""A cell's headline interval on its row (`llmload.hub.schema.INTERVALS`): total tok/s's
confidence interval, how it was made ("batch_means" or "repeats") and the repeats, so the
leaderboard can show each run's spread and call runs whose intervals overlap tied.

Revision ID: 0005_intervals
Revises: 0004_submissions

Columns are added, never a table recreated (as 0004). Runs stored before have none (NULL):
they rank as before, never tied.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_intervals"
down_revision = "0004_submissions"
branch_labels = None
depends_on = None

COLUMNS = (("total_tok_s_ci_low", sa.Float), ("total_tok_s_ci_high", sa.Float), ("ci_method", sa.String(16)),
           ("repeats", sa.Integer))


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("cells", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
