"""The Alembic migrations are the schema authority: they agree with the models, go down and up
cleanly, and can be raced by several processes opening a fresh database."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from store import Database, SourceTaken, Store, database_url
from store._engine import SCHEMA_HEAD, alembic_config
from store._tables import FTS_TABLE, metadata
from tests import pg

from .helpers import Procs, assistant, user

T = TypeVar("T")

TABLES = {"threads", "messages", "usage", "dispatches"}


def _skip_fts(obj: object, name: str | None, type_: str, reflected: bool, other: object) -> bool:
    # as migrations/env.py: the full-text index is hand-made and dialect-specific
    return not (type_ == "table" and name is not None and name.startswith(FTS_TABLE))


def _diffs(sync_conn: sa.Connection) -> list[Any]:
    mc = MigrationContext.configure(sync_conn, opts={"include_object": _skip_fts})
    return list(compare_metadata(mc, metadata))


def _alembic(sync_conn: sa.Connection, action: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    getattr(command, action)(cfg, revision)


def _tables(sync_conn: sa.Connection) -> set[str]:
    return set(sa.inspect(sync_conn).get_table_names())


def _revision(sync_conn: sa.Connection) -> str | None:
    return MigrationContext.configure(sync_conn).get_current_revision()


async def _sa(store: Store, fn: Callable[[sa.Connection], T]) -> T:
    """``fn`` on a SQLAlchemy connection of the store's engine (Alembic's and the inspector's)."""
    async with store.db.reader.connect() as conn:
        return await conn.run_sync(fn)


def test_schema_head_is_the_newest_revision_in_migrations() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [SCHEMA_HEAD]


async def test_the_migrated_schema_matches_the_table_definitions(store: Store) -> None:
    diffs = await _sa(store, _diffs)
    assert diffs == []
    tables = await _sa(store, _tables)
    assert tables >= {*TABLES, FTS_TABLE, "alembic_version"}


async def test_upgrade_then_downgrade_to_base_then_upgrade_again_is_clean(
    empty_db_url: str,
) -> None:
    engine = create_async_engine(database_url(empty_db_url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "head")
        async with engine.connect() as conn:
            assert await conn.run_sync(_revision) == SCHEMA_HEAD
            assert await conn.run_sync(_diffs) == []
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "downgrade", "base")
        async with engine.connect() as conn:
            assert await conn.run_sync(_revision) is None
            left = await conn.run_sync(_tables)
            assert left - {"alembic_version", "sqlite_sequence"} == set()
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "head")
        async with engine.connect() as conn:
            assert await conn.run_sync(_revision) == SCHEMA_HEAD
            assert await conn.run_sync(_diffs) == []
    finally:
        await engine.dispose()
    # and the re-created schema works, full-text index included
    store = await Store.open(empty_db_url)
    try:
        t = await store.create_thread(kind="lead", messages=[user("remigrated fine")])
        await store.append(t.id, assistant("ok"))
        assert [h.ref for h in await store.search("remigrated")] == [f"T-{t.id}#1"]
    finally:
        await store.close()


async def test_opening_a_fresh_database_migrates_it_once(empty_db_url: str) -> None:
    db = Database(empty_db_url)
    try:
        assert await db.migrate() == "base"
        assert await db.migrate() is None
        async with db.reader.connect() as conn:
            assert await conn.run_sync(_revision) == SCHEMA_HEAD
    finally:
        await db.dispose()


async def test_opening_without_migrate_leaves_the_database_alone(empty_db_url: str) -> None:
    store = await Store.open(empty_db_url, migrate=False)
    try:
        tables = await _sa(store, _tables)
        assert not tables & TABLES
    finally:
        await store.close()


# ----------------------------------------------------------------- racing processes


def _assert_all_at_head(answers: list[dict[str, Any]]) -> None:
    for a in answers:
        assert a == {"ok": True, "revision": SCHEMA_HEAD}


@pytest.mark.parametrize("n", [2, 4])
def test_processes_opening_a_fresh_sqlite_database_at_once_all_reach_head(
    tmp_path: Path, procs: Procs, n: int
) -> None:
    for trial in range(10):
        path = tmp_path / f"race{trial}.db"
        _assert_all_at_head(procs.broadcast({"op": "open", "url": str(path)}, n=n))
        conn = sqlite3.connect(path)
        try:
            versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
            assert versions == [(SCHEMA_HEAD,)]
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            conn.close()


@pytest.mark.postgres
def test_processes_opening_a_fresh_postgres_database_at_once_all_reach_head(
    procs: Procs,
) -> None:
    pg.require()
    for n in (2, 2, 2, 4, 4):
        db = pg.create_database_sync(pg.new_name("race"))
        try:
            _assert_all_at_head(procs.broadcast({"op": "open", "url": db.url}, n=n))
            assert asyncio.run(pg.table_names(db.dsn)) >= TABLES
        finally:
            pg.drop_database_sync(db.name)


async def test_0005_keys_the_threads_imported_before_it_duplicates_included(
    empty_db_url: str,
) -> None:
    """Threads an import made before ``source_key`` existed get one from ``task.source.key``:
    the oldest main thread of a key the key (a session imported twice by the race 0005 closes
    keeps both threads, the later one keyed by its id), a branch ``key@id``."""
    rows = sa.table(
        "threads",
        *(sa.column(c) for c in ("id", "kind", "title", "status", "job_id")),
        sa.column("task", sa.JSON),
        sa.column("tools", sa.JSON),
        sa.column("pending_tool_ids", sa.JSON),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    now = datetime.now(UTC)

    def thread(tid: str, task: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "id": tid, "kind": "lead", "title": tid, "status": "idle", "job_id": tid,
            "task": task, "tools": [], "pending_tool_ids": [], "created_at": now, "updated_at": now,
        }  # fmt: skip

    main = {"source": {"key": "codex:x", "imported": {"messages": 2}}}
    branch = {"source": {"key": "codex:x", "imported": {"suffix": " (rewound branch)"}}}
    engine = create_async_engine(database_url(empty_db_url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "0004")
            await conn.execute(
                sa.insert(rows),
                [
                    thread("01a", main),
                    thread("01b", branch),
                    thread("01c", main),
                    thread("01d", None),
                    thread("01e", {"goal": "mine"}),
                ],
            )
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "head")
        async with engine.connect() as conn:
            keys = dict((await conn.execute(sa.text("SELECT id, source_key FROM threads"))).all())
    finally:
        await engine.dispose()
    assert keys == {
        "01a": "codex:x",
        "01b": "codex:x@01b",
        "01c": "codex:x@01c",
        "01d": None,
        "01e": None,
    }
    store = await Store.open(empty_db_url)
    try:
        with pytest.raises(SourceTaken) as taken:
            await store.create_thread(kind="lead", source_key="codex:x")
        assert taken.value.thread_id == "01a"
    finally:
        await store.close()
