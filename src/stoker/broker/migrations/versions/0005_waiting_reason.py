"""Why a queued job waits aside: no node of the cluster fits it now (a node left, or the
broker restarted with fewer GPUs); NULL for every other job, older ones included.

Revision ID: 0005_waiting_reason
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_waiting_reason"
down_revision = "0004_job_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("waiting_reason", sa.String(500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("waiting_reason")
