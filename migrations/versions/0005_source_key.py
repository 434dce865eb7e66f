"""threads.source_key: the source an imported thread stands for, unique, so two imports of the
same session at once cannot both create its thread

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06

``source_key`` is NULL for threadloom's own threads. An imported session's first thread holds
the session's key (``codex:<id>``, ``claude-code:<session>`` …), each other thread of it (a
rewound branch, a fork) ``<key>@<digest of the history it was created with>``
(``orchestrator.importers._writer``). Threads imported before this revision are keyed from
their ``task.source.key``: the oldest thread of a key without a suffix gets the key, every other
one ``<key>@<its id>`` — a session imported twice by the race this closes keeps both threads,
the older one the session's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("threads") as batch:
        batch.add_column(sa.Column("source_key", sa.Text, nullable=True))
    conn = op.get_bind()
    taken: set[str] = set()
    select = sa.text("SELECT id, task FROM threads WHERE task IS NOT NULL ORDER BY id")
    keys: list[dict[str, str]] = []
    for tid, task in conn.execute(select).fetchall():
        task = json.loads(task) if isinstance(task, str) else task
        src = task.get("source") if isinstance(task, dict) else None
        if not isinstance(src, dict) or not isinstance(src.get("key"), str):
            continue
        key: str = src["key"]
        imported = src.get("imported")
        suffix = imported.get("suffix") if isinstance(imported, dict) else None
        main = key not in taken and not suffix
        taken.add(key)
        keys.append({"id": tid, "k": key if main else f"{key}@{tid}"})
    if keys:
        conn.execute(sa.text("UPDATE threads SET source_key = :k WHERE id = :id"), keys)
    op.create_index("ix_threads_source_key", "threads", ["source_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_threads_source_key", table_name="threads")
    with op.batch_alter_table("threads") as batch:
        batch.drop_column("source_key")
