"""An index on (tenant, idempotency key): every submit looks its key up (the SDK sends one
on every call), which without it scans the tenant's whole job history.

Revision ID: 0004_job_keys
"""

from __future__ import annotations

from alembic import op

revision = "0004_job_keys"
down_revision = "0003_leader"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_tenant_key", "jobs", ["tenant", "idempotency_key"])


def downgrade() -> None:
    op.drop_index("ix_jobs_tenant_key", table_name="jobs")
