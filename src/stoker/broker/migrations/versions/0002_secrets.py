"""Tenant secrets (stored encrypted), the secret names a job references, the keyed digest
of a submit (for idempotency conflicts), and code archives scoped to the tenants that
uploaded them.

Job env values written before this revision stay plain for unfinished jobs (they are still
to be bound) and are blanked for finished ones, so the file no longer holds them.

Revision ID: 0002_secrets
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_secrets"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),  # a Fernet token, never the value
        sa.Column("updated", sa.Float, nullable=False),
    )
    op.create_table(
        "code_tenants",
        sa.Column("digest", sa.String(64), sa.ForeignKey("code.digest"), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), primary_key=True),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("secrets", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("request_mac", sa.String(64), nullable=True))
    # finished jobs need their env values no more: keep the names only
    jobs = sa.table(
        "jobs", sa.column("id", sa.String), sa.column("env", sa.JSON), sa.column("state", sa.String)
    )
    conn = op.get_bind()
    done = conn.execute(sa.select(jobs.c.id, jobs.c.env).where(jobs.c.state == "finished"))
    for job_id, env in done.all():
        if env:
            blank = dict.fromkeys(env, "")
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(env=blank))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("request_mac")
        batch.drop_column("secrets")
    op.drop_table("code_tenants")
    op.drop_table("secrets")
