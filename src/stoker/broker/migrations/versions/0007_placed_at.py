"""When the core placed a job (bound it to its pods: it stopped waiting), so start latency
(placed -> running) and queue wait (submitted -> placed) are told apart on the job record;
NULL for jobs stored before it (and for a job never placed).

Revision ID: 0007_placed_at
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_placed_at"
down_revision = "0006_job_end"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("placed", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("placed")
