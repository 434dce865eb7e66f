"""Unique-prefix refs resolve whatever the database's collation: on PostgreSQL with an ICU
(en-US) default collation, where ``'~'`` sorts before letters and digits, a range ending in
``p || '~'`` matched nothing and every prefix came back "not found". Runs always (a database of
its own, made with the ICU provider); the whole store suite can run on such a database too with
``THREADLOOM_PG_ICU=1`` (see tests/pg.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from store import AmbiguousRef, Store, ThreadNotFound
from tests import pg

from .helpers import assistant, user

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def icu_db() -> Iterator[pg.PgDatabase]:
    pg.require()
    db = pg.create_database_sync(pg.new_name("icu"), icu_locale="en-US")
    try:
        assert asyncio.run(pg.collation_of(db.dsn)) == ("i", "en-US")
        yield db
    finally:
        pg.drop_database_sync(db.name)


@pytest.fixture
async def icu_store(icu_db: pg.PgDatabase) -> AsyncIterator[Store]:
    await pg.empty_tables(icu_db.dsn)
    s = await Store.open(icu_db.url)
    try:
        yield s
    finally:
        await s.close()


IDS = [
    "0abcdefghjkmnpqrstvwxyz012",
    "0abcdefghjkmnpqrstvwxyz0zz",
    "0abczzzzzzzzzzzzzzzzzzzzzz",
    "zzzz0000000000000000000000",
    "zzzzzzzzzzzzzzzzzzzzzzzzzz",
]


async def test_prefixes_resolve_on_an_icu_collated_database(icu_store: Store) -> None:
    for tid in IDS:
        await icu_store.create_thread(
            kind="lead", thread_id=tid, messages=[user("hi"), assistant("ok")]
        )
    for tid in IDS:
        for n in (4, 8, 25, 26):
            if sum(other.startswith(tid[:n]) for other in IDS) == 1:
                assert (await icu_store.resolve(f"T-{tid[:n]}")).thread.id == tid
    assert (await icu_store.resolve("T-zzzz0#2")).start == 2
    assert (await icu_store.resolve("zzzzz")).thread.id == IDS[4]
    with pytest.raises(AmbiguousRef) as amb:
        await icu_store.resolve("T-0abc")
    assert sorted(amb.value.candidates) == [f"T-{i}" for i in IDS[:3]]
    with pytest.raises(AmbiguousRef):
        await icu_store.resolve("T-0abcdefghjkmnpqrstvwxyz0")
    for missing in ("T-0abd", "T-zzz1", "T-1111", "T-0abcdefghjkmnpqrstvwxyz013"):
        with pytest.raises(ThreadNotFound):
            await icu_store.resolve(missing)


async def test_ends_resolve_on_an_icu_collated_database(icu_store: Store) -> None:
    for tid in IDS:
        await icu_store.create_thread(kind="lead", thread_id=tid, messages=[user("hi")])
    assert (await icu_store.resolve("T-…z012")).thread.id == IDS[0]
    assert (await icu_store.resolve("T-...0000#1")).thread.id == IDS[3]
    with pytest.raises(AmbiguousRef) as amb:
        await icu_store.resolve("T-…zzzz")
    assert amb.value.candidates == [f"T-{IDS[2]}", f"T-{IDS[4]}"]
    with pytest.raises(ThreadNotFound):
        await icu_store.resolve("T-…z013")
    short = await icu_store.short_refs(IDS)
    for tid, ref in short.items():
        assert (await icu_store.resolve(ref)).thread.id == tid
