"""The schema revision this code expects, importable without SQLAlchemy.

``store._engine`` (which migrates) and ``store.rawread`` (the read-only fast path, which must
not import SQLAlchemy) both compare a database's ``alembic_version`` against this one
constant; a migration that adds a revision bumps it here.
"""

from __future__ import annotations

SCHEMA_HEAD = "0006"
"""The newest Alembic revision; a test checks it matches ``migrations/versions``."""
