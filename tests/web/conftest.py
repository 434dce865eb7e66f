from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")  # the web extra; CI installs it (dev), so there it never skips
pytest.importorskip("jinja2")

from starlette.testclient import TestClient

from orchestrator.web import create_app
from store import Store

from ._data import Refs, build


async def _make(path: Path) -> Refs:
    async with await Store.open(str(path)) as store:
        return await build(store)


@pytest.fixture
def db(tmp_path: Path) -> tuple[str, Refs]:
    path = tmp_path / "threads.db"
    return str(path), asyncio.run(_make(path))


@pytest.fixture
def refs(db: tuple[str, Refs]) -> Refs:
    return db[1]


@pytest.fixture
def client(db: tuple[str, Refs]) -> Iterator[TestClient]:
    with TestClient(create_app(db[0])) as c:
        yield c
