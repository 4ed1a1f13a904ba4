"""The hub operator's price per hour of each machine (`llmload.hub.schema.hardware_prices`,
`llmload hub price set HARDWARE USD`), what a run without a price of its own is priced at.

Revision ID: 0008_hardware_prices
Revises: 0007_images

A table is added, never one recreated (as 0004); it starts empty: a price is the operator's
to set, nothing a stored run could give.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_hardware_prices"
down_revision = "0007_images"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hardware_prices",
        sa.Column("hardware", sa.String(200), primary_key=True),
        sa.Column("price_per_hour", sa.Float, nullable=False),
        sa.Column("set_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hardware_prices")
