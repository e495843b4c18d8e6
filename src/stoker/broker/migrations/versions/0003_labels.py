"""Job labels: a tenant's own ``key=value`` tags on each job, returned with it and filtered
on in ``GET /v1/jobs?label=k=v`` (older jobs get none).

Revision ID: 0003_labels
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_labels"
down_revision = "0002_hp_demand"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("labels", sa.JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("labels")
