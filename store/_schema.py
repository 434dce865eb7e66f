"""The schema revision this code expects, importable without SQLAlchemy.

``store._engine`` (which migrates) and ``store.rawread`` (the read-only fast path, which must
not import SQLAlchemy) both compare a database's ``alembic_version`` against this one
constant; a migration that adds a revision bumps it here.
"""

from __future__ import annotations

from typing import Any

SCHEMA_HEAD = "0006"
"""The newest Alembic revision; a test checks it matches ``migrations/versions``."""


def revision(tx: Any) -> str | None:
    """The schema's Alembic revision (None: not migrated yet)."""
    if tx.postgres:
        found = tx.fetchone("SELECT to_regclass('alembic_version') IS NOT NULL")
        if not (found and found[0]):
            return None
    elif not tx.fetchall(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
    ):
        return None
    rows = tx.fetchall("SELECT version_num FROM alembic_version")
    return str(rows[0][0]) if rows else None
