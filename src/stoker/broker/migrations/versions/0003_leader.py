"""Leadership of several broker replicas: one row naming the leader and its epoch.

The epoch is the fencing token: every new leader increments it, and every scheduling
write checks it (stoker.broker.leader), so a deposed leader's writes never land.

Revision ID: 0003_leader
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_leader"
down_revision = "0003_labels"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "leader",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("holder", sa.String(200), nullable=True),
        sa.Column("url", sa.String(500), nullable=True),
        sa.Column("since", sa.Float, nullable=True),
    )
    op.bulk_insert(table, [{"id": 1, "epoch": 0}])


def downgrade() -> None:
    op.drop_table("leader")
