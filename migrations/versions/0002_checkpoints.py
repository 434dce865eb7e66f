"""checkpoints: a snapshot of a thread's files per message

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-09
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("thread_id", sa.String(26), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["thread_id"], ["threads.id"], name="fk_checkpoints_thread_id_threads"
        ),
        sa.PrimaryKeyConstraint("thread_id", "seq", name="pk_checkpoints"),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
