"""A real SQLite store in tmp_path for the import tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(str(tmp_path / "threads.db"))
    try:
        yield s
    finally:
        await s.close()
