"""Store fixtures: every ``store`` test runs on a SQLite file in ``tmp_path`` and on PostgreSQL.

PostgreSQL: one database per test session (``tl_test_…``), migrated once; each test starts from
it emptied (``DELETE``, about a millisecond). Tests that need an unmigrated database get a fresh
one of their own. Everything created is dropped at the end. Without a reachable server the postgres
cases skip, unless ``CI`` is set: then they fail. ``THREADLOOM_PG_ICU=1`` makes every PostgreSQL
database here use an ICU (en-US) collation instead of the server's default.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from store import Store
from tests import pg

from .helpers import Procs

BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]


async def _migrate(url: str) -> None:
    store = await Store.open(url)
    await store.close()


@pytest.fixture(scope="session")
def pg_session_db() -> Iterator[pg.PgDatabase]:
    """The session's migrated PostgreSQL database."""
    pg.require()
    db = pg.create_database_sync(pg.new_name("store"))
    try:
        locale = pg.session_icu_locale()
        if locale is not None:  # THREADLOOM_PG_ICU: the whole suite on an ICU collation
            assert asyncio.run(pg.collation_of(db.dsn)) == ("i", locale)
        asyncio.run(_migrate(db.url))
        yield db
    finally:
        pg.drop_database_sync(db.name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per session; tests get a copy (much faster than running
    the migration for each of them; the migration itself is tested in test_migrations)."""
    path = tmp_path_factory.mktemp("template") / "threads.db"
    asyncio.run(_migrate(str(path)))
    return path


@pytest.fixture(scope="session")
def procs() -> Iterator[Procs]:
    """Four helper processes (``_proc.py``) shared by the multi-process tests: starting an
    interpreter that imports the store costs about a second, so it is paid once."""
    with Procs(4) as p:
        yield p


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    param: str = request.param
    if param == "postgres":
        pg.require()
    return param


@pytest.fixture
def db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A migrated database URL: a new SQLite file (a copy of the session's template), or the
    session's PostgreSQL database (emptied by the ``store`` fixture)."""
    if backend == "sqlite":
        path = tmp_path / "threads.db"
        template: Path = request.getfixturevalue("sqlite_template")
        shutil.copyfile(template, path)
        path.chmod(0o600)
        return str(path)
    db: pg.PgDatabase = request.getfixturevalue("pg_session_db")
    return db.url


@pytest.fixture
async def store(backend: str, db_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if backend == "postgres":
        db: pg.PgDatabase = request.getfixturevalue("pg_session_db")  # already set up
        await pg.empty_tables(db.dsn)
    s = await Store.open(db_url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def empty_db_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A database nobody has migrated yet: a path where no file exists, or a new PostgreSQL
    database (dropped afterwards)."""
    if backend == "sqlite":
        yield str(tmp_path / "fresh.db")
        return
    db = await pg.create_database(pg.new_name("empty"))
    try:
        yield db.url
    finally:
        await pg.drop_database(db.name)
