"""Worker-runtime fixtures: a real SQLite store in ``tmp_path``, a workspace directory, and
``api``: the loopback OpenAI-compatible fake (the Anthropic provider's test modules define their
own ``api``, the Messages API fake, which takes precedence there)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from store import Store
from tests.fakes.chat_api import FakeChatAPI


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(str(tmp_path / "threads.db"))
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def api() -> Iterator[FakeChatAPI]:
    with FakeChatAPI() as server:
        yield server
