"""Job classes and HP demand: a job's class, workers (was ``replicas``), GPUs per worker,
guaranteed duration, re-queues and guarantee periods; and the per-minute HP demand of each
tenant per GPU pool, which the forecaster is fitted on (a restart keeps the history).

Revision ID: 0002_hp_demand
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_hp_demand"
down_revision = "0002_secrets"  # chained after main's 0002 (the lead may re-chain)
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("replicas", new_column_name="workers", existing_type=sa.Integer)
        batch.add_column(
            sa.Column("job_class", sa.String(8), nullable=False, server_default="pool")
        )
        batch.add_column(sa.Column("gpus", sa.Float, nullable=False, server_default="1.0"))
        batch.add_column(sa.Column("guarantee_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("requeues", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("requeue_reason", sa.String(32), nullable=True))
        batch.add_column(
            sa.Column("guarantee_succeeded", sa.Integer, nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("guarantee_failed", sa.Integer, nullable=False, server_default="0")
        )
    op.create_table(
        "hp_demand",
        sa.Column("gpu_model", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("minute", sa.BigInteger, primary_key=True),  # since the Unix epoch
        sa.Column("gpus", sa.Float, nullable=False),  # the peak of that minute
    )


def downgrade() -> None:
    op.drop_table("hp_demand")
    with op.batch_alter_table("jobs") as batch:
        for name in (
            "guarantee_failed",
            "guarantee_succeeded",
            "requeue_reason",
            "requeues",
            "guarantee_s",
            "gpus",
            "job_class",
        ):
            batch.drop_column(name)
        batch.alter_column("workers", new_column_name="replicas", existing_type=sa.Integer)
