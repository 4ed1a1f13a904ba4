"""A cell's images per request on its row (`llmload.hub.schema.cells.images`), so the token
leaderboard ranks text-only cells apart from cells whose requests carried images.

Revision ID: 0007_images
Revises: 0006_pooling

A column is added (NOT NULL, 0 by default: every row stored before reads as no images), never
a table recreated (as 0004). A run stored before it whose cells carried images (a run of
`--images`, published by an llmload that stored no images) gets them from its stored document:
each cell's `images`, its position in the document's cells as `idx` (as publishing numbers
them), the document read by llmload's one reader (`results_from_dict`); a document that cannot
be read keeps 0. Only the documents whose text holds an image count above 0 are read (a
text match first, so a store of text runs is not read whole). The rows are this revision's
own, not llmload's publishing, so the revision stays what it was when publishing changes.
"""

import json

import sqlalchemy as sa
from alembic import op

from llmload.core.model.document import ResultsError, results_from_dict

revision = "0007_images"
down_revision = "0006_pooling"
branch_labels = None
depends_on = None

MAYBE_IMAGES = [f'%"images":{space}{digit}%' for space in ("", " ") for digit in range(1, 10)]
"""What the text of a document holding a cell with images has (JSON with or without spaces):
a false match only costs a read."""


def _counts(run_id: str, document) -> dict[int, int]:
    """{idx: images} of the run's cells that carried images (none where the document cannot
    be read: a run is never refused by a migration)."""
    if isinstance(document, str):  # a driver that hands JSON back as text
        document = json.loads(document)
    try:
        cells = results_from_dict(document, source=f"run {run_id}").cells
    except ResultsError:
        return {}
    return {idx: cell.images for idx, cell in enumerate(cells) if isinstance(cell.images, int) and cell.images > 0}


def upgrade() -> None:
    op.add_column("cells", sa.Column("images", sa.Integer, nullable=False, server_default="0"))
    runs = sa.table("runs", sa.column("id", sa.String), sa.column("results_json", sa.JSON))
    cells = sa.table("cells", sa.column("run_id", sa.String), sa.column("idx", sa.Integer),
                     sa.column("images", sa.Integer))
    bind = op.get_bind()
    text = sa.cast(runs.c.results_json, sa.Text)
    found = bind.execute(sa.select(runs.c.id).where(sa.or_(*(text.like(p) for p in MAYBE_IMAGES)))).scalars().all()
    for run_id in sorted(found):  # one document at a time
        document = bind.execute(sa.select(runs.c.results_json).where(runs.c.id == run_id)).scalar_one()
        for idx, images in sorted(_counts(run_id, document).items()):
            bind.execute(sa.update(cells).where(cells.c.run_id == run_id, cells.c.idx == idx).values(images=images))


def downgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        batch.drop_column("images")
