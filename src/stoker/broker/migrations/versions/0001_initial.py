"""Initial schema: tenants, jobs, job output, the core's event log, code uploads.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("profile", sa.String(64), nullable=False),
        sa.Column("reuse_tag", sa.String(200), nullable=False),
        sa.Column("replicas", sa.Integer, nullable=False),
        sa.Column("argv", sa.JSON, nullable=False),
        sa.Column("code_digest", sa.String(64), nullable=True),
        sa.Column("deps", sa.JSON, nullable=False),
        sa.Column("env", sa.JSON, nullable=False),
        sa.Column("timeout_s", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("path", sa.String(16), nullable=True),
        sa.Column("pods", sa.JSON, nullable=False),
        sa.Column("submitted", sa.Float, nullable=False),
        sa.Column("started", sa.Float, nullable=True),
        sa.Column("finished", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("failure", sa.String(32), nullable=True),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_idempotency"),
    )
    op.create_index("ix_jobs_tenant_state", "jobs", ["tenant", "state"])
    op.create_table(
        "job_output",
        sa.Column("job", sa.String(40), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("stream", sa.String(8), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "core_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_table(
        "code",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("code", "core_events", "job_output", "jobs", "tenants"):
        op.drop_table(table)
