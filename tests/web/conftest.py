from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

if not os.environ.get("CI"):  # the web extra; under CI (dev installs it) a missing one fails
    pytest.importorskip("starlette")
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
