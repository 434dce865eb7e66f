"""threads.continues_id: the thread a handoff's successor continues (SPEC "Jobs larger than one
context"), unique, so a thread is continued by at most one successor

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06

A lead (or worker) whose next request would not fit its context ends ``done`` and a new thread
of the same job and kind starts with ``continues_id`` = its id. The unique index is the
guarantee that a handoff interrupted and done again (a killed process, a resumed job) leaves
exactly one successor. NULL for every thread that continues none, so existing rows need nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("threads") as batch:
        batch.add_column(sa.Column("continues_id", sa.String(26), nullable=True))
        batch.create_foreign_key(
            "fk_threads_continues_id_threads", "threads", ["continues_id"], ["id"]
        )
    op.create_index("ix_threads_continues_id", "threads", ["continues_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_threads_continues_id", table_name="threads")
    with op.batch_alter_table("threads") as batch:
        batch.drop_constraint("fk_threads_continues_id_threads", type_="foreignkey")
        batch.drop_column("continues_id")
