"""messages are append-only: the database itself rejects UPDATE, DELETE (and, on PostgreSQL,
TRUNCATE) of messages

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

The store never changes or removes a stored message; these triggers make that hold for every
writer of the database, not only for threadloom's code, so a process that reaches the database
with credentials gets an error instead of silently rewriting a transcript. Nothing in threadloom
updates or deletes messages (no ``ON DELETE CASCADE`` reaches them; the full-text index is its own
table, ``messages_fts``, filled by INSERT). What they do not stop: a PostgreSQL superuser can drop
the triggers or switch them off (``session_replication_role = replica``, which the test suite uses
to empty its database), and whoever can write a SQLite file can drop them too.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGE = "messages are append-only"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER messages_append_only_{event.lower()}"
                f" BEFORE {event} ON messages"
                f" BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )
        return
    op.execute(
        "CREATE FUNCTION messages_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN RAISE EXCEPTION '{MESSAGE} (% refused)', TG_OP"
        " USING ERRCODE = 'restrict_violation'; END $$"
    )
    op.execute(
        "CREATE TRIGGER messages_append_only BEFORE UPDATE OR DELETE ON messages"
        " FOR EACH ROW EXECUTE FUNCTION messages_append_only()"
    )
    op.execute(
        "CREATE TRIGGER messages_append_only_truncate BEFORE TRUNCATE ON messages"
        " FOR EACH STATEMENT EXECUTE FUNCTION messages_append_only()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS messages_append_only_update")
        op.execute("DROP TRIGGER IF EXISTS messages_append_only_delete")
        return
    op.execute("DROP TRIGGER IF EXISTS messages_append_only_truncate ON messages")
    op.execute("DROP TRIGGER IF EXISTS messages_append_only ON messages")
    op.execute("DROP FUNCTION IF EXISTS messages_append_only()")
