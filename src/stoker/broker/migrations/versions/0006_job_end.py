"""A finished job's end in steps: when its process exited and its output was drained (the
pod's agent's clock), and when its final row was committed; NULL for older jobs.

Revision ID: 0006_job_end
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_job_end"
down_revision = "0005_waiting_reason"
branch_labels = None
depends_on = None

COLUMNS = ("exited", "drained", "committed")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
