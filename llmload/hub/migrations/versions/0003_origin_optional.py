"""Where a run was published from is no longer stored unless its publisher asks
(`llmload publish --with-origin`): `runs.publisher` and `runs.source_dir` become nullable,
and the values stored before are cleared, so that the hub stops showing every visitor a
host name and a path on the publisher's machine as soon as it is upgraded.

Revision ID: 0003_origin_optional
Revises: 0002

On SQLite the column change recreates `runs` (alembic's batch mode): dropping the old table
runs an implicit DELETE, whose ON DELETE CASCADE would empty `cells` while foreign keys
are on (they are, `llmload.hub.database`, and cannot be turned off inside the migration's
transaction), so the cells are copied aside first and put back after.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_origin_optional"
down_revision = "0002"
branch_labels = None
depends_on = None

ORIGIN = ("publisher", "source_dir")


def _set_nullable(nullable: bool) -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("PRAGMA secure_delete = ON")  # the cleared values are overwritten, not left in free pages
        op.execute("CREATE TEMP TABLE _cells_kept AS SELECT * FROM cells")
    with op.batch_alter_table("runs") as batch:
        for name in ORIGIN:
            batch.alter_column(name, existing_type=sa.Text(), nullable=nullable)
    if sqlite:
        op.execute("DELETE FROM cells")  # none left, unless the table was not recreated
        op.execute("INSERT INTO cells SELECT * FROM _cells_kept")
        op.execute("DROP TABLE _cells_kept")


def upgrade() -> None:
    _set_nullable(True)
    op.execute("UPDATE runs SET publisher = NULL, source_dir = NULL")


def downgrade() -> None:
    op.execute("UPDATE runs SET publisher = '' WHERE publisher IS NULL")
    op.execute("UPDATE runs SET source_dir = '' WHERE source_dir IS NULL")
    _set_nullable(False)
