"""An open-loop cell's request counts on its row (`llmload.hub.schema.REQUEST_COUNTS`).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = ("requests_scheduled", "requests_completed", "requests_failed", "requests_unfinished",
           "requests_not_sent", "requests_skipped")


def upgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
