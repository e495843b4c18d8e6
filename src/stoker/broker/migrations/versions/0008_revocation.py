"""Tenant revocation and token rotation: a tenant revoked (deleted with its history kept)
stays as a row that no token opens (``revoked``: when); a rotated token's predecessor is
kept in ``tenant_tokens`` until its grace ends.

Revision ID: 0008_revocation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_revocation"
down_revision = "0007_placed_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("revoked", sa.Float, nullable=True))
    op.create_table(
        "tenant_tokens",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_tokens")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("revoked")
