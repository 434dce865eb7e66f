"""The append-only rule holds in the database itself: a direct connection (the PostgreSQL
superuser, or a plain ``sqlite3`` connection to the file) cannot UPDATE, DELETE or TRUNCATE
messages; the store's own appends, forks and reads are unaffected; the migration goes down and
up again."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.ext.asyncio import create_async_engine

from store import Store, database_url
from store._engine import alembic_config

from .helpers import assistant, pg_dsn, raw_sql, shape, user

REFUSED = "messages are append-only"


async def _content(backend: str, url: str, thread_id: str) -> list[tuple[int, str]]:
    sql = f"SELECT seq, content FROM messages WHERE thread_id = '{thread_id}' ORDER BY seq"
    if backend == "sqlite":
        conn = sqlite3.connect(url)
        try:
            return [(int(s), str(c)) for s, c in conn.execute(sql)]
        finally:
            conn.close()
    aconn = await asyncpg.connect(pg_dsn(url))
    try:
        return [(int(r[0]), str(r[1])) for r in await aconn.fetch(sql)]
    finally:
        await aconn.close()


ATTACKS = [
    'UPDATE messages SET content = \'[{{"type":"text","text":"rewritten"}}]\''
    " WHERE thread_id = '{t}' AND seq = 1",
    "UPDATE messages SET role = 'assistant' WHERE thread_id = '{t}'",
    "UPDATE messages SET seq = seq + 100 WHERE thread_id = '{t}'",
    "DELETE FROM messages WHERE thread_id = '{t}' AND seq = 2",
    "DELETE FROM messages",
]


@pytest.mark.parametrize("attack", ATTACKS)
async def test_a_direct_connection_cannot_rewrite_or_delete_messages(
    store: Store, backend: str, db_url: str, attack: str
) -> None:
    t = await store.create_thread(kind="lead", messages=[user("the original"), assistant("ok")])
    before = await _content(backend, db_url, t.id)
    error = await raw_sql(backend, db_url, attack.format(t=t.id))
    assert error is not None and REFUSED in error
    assert await _content(backend, db_url, t.id) == before
    assert [b.model_dump()["text"] for m in await store.messages(t.id) for b in m.content] == [
        "the original",
        "ok",
    ]


@pytest.mark.parametrize(
    "backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_truncate_of_messages_is_refused_on_postgres(store: Store, db_url: str) -> None:
    t = await store.create_thread(kind="lead", messages=[user("kept")])
    for sql in ("TRUNCATE messages", "TRUNCATE threads, messages, usage, dispatches, checkpoints"):
        error = await raw_sql("postgres", db_url, sql)
        assert error is not None and REFUSED in error
    assert len(await _content("postgres", db_url, t.id)) == 1


async def test_appends_forks_and_reads_still_work(store: Store) -> None:
    t = await store.create_thread(kind="lead", messages=[user("one"), assistant("two")])
    await store.append(t.id, [user("three"), assistant("four")])
    f = await store.fork(t.id, at=2, messages=[user("three'")])
    await store.append(f.id, assistant("four'"))
    assert [m.seq for m in await store.messages(t.id)] == [1, 2, 3, 4]
    assert shape(await store.messages(f.id))[:2] == shape(await store.messages(t.id))[:2]
    assert [h.ref for h in await store.search("four'")] != []


def _alembic(sync_conn: sa.Connection, action: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    getattr(command, action)(cfg, revision)


async def test_the_triggers_go_down_and_come_back_with_the_migration(
    empty_db_url: str, backend: str
) -> None:
    store = await Store.open(empty_db_url)
    try:
        t = await store.create_thread(kind="lead", messages=[user("a"), assistant("b")])
    finally:
        await store.close()
    raw_url = empty_db_url
    update = f"UPDATE messages SET role = role WHERE thread_id = '{t.id}'"
    assert REFUSED in (await raw_sql(backend, raw_url, update) or "")

    engine = create_async_engine(database_url(empty_db_url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "downgrade", "0002")
        # without the triggers the same statement goes through: they, and nothing else, refused it
        assert await raw_sql(backend, raw_url, update) is None
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "head")
    finally:
        await engine.dispose()
    assert REFUSED in (await raw_sql(backend, raw_url, update) or "")
    assert REFUSED in (await raw_sql(backend, raw_url, "DELETE FROM messages") or "")
    if backend == "postgres":
        assert REFUSED in (await raw_sql(backend, raw_url, "TRUNCATE messages") or "")
    assert len(await _content(backend, raw_url, t.id)) == 2
