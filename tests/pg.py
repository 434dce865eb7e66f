"""PostgreSQL helpers for tests: reach the server, make throw-away databases, reset them fast.

The server is ``THREADLOOM_TEST_PG`` (a libpq URL of a database we may connect to in order to
create others), by default ``postgresql://postgres@127.0.0.1:5432/test`` (trust auth). Every
database made here is named ``tl_test_<random>…`` and dropped by whoever made it.

``THREADLOOM_PG_ICU`` set (``1`` for ``en-US``, or an ICU locale such as ``de-DE``) makes every
database created here use that ICU collation instead of the server's default, so the store suite
can be run once on a non-C collation: ``THREADLOOM_PG_ICU=1 pytest tests/store -k postgres``.

When ``CI`` is set, an unreachable server is a failure (``require`` raises); elsewhere the tests
that need it are skipped with the reason. The async functions are the primary API; the sync ones
(``*_sync``) run them with ``asyncio.run`` and so must not be called from a running event loop
(use them from session fixtures).

Typical use from a conftest::

    @pytest.fixture(scope="session")
    def pg_db() -> Iterator[PgDatabase]:
        require()
        db = create_database_sync()
        yield db
        drop_database_sync(db.name)

and ``await empty_tables(db.dsn)`` before each test for a clean state.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"
CONNECT_TIMEOUT_S = 3.0
PREFIX = "tl_test_"


def admin_dsn() -> str:
    """The libpq URL used to create and drop databases."""
    return os.environ.get("THREADLOOM_TEST_PG") or DEFAULT_ADMIN_DSN


def dsn_for(dbname: str) -> str:
    """The libpq URL of database ``dbname`` on the test server."""
    parts = urlsplit(admin_dsn())
    return urlunsplit(parts._replace(path="/" + dbname))


def store_url_for(dbname: str) -> str:
    """The SQLAlchemy URL (``postgresql+asyncpg://…``) of database ``dbname``."""
    return "postgresql+asyncpg://" + dsn_for(dbname).split("://", 1)[1]


@dataclass(frozen=True, slots=True)
class PgDatabase:
    name: str

    @property
    def dsn(self) -> str:
        return dsn_for(self.name)

    @property
    def url(self) -> str:
        return store_url_for(self.name)


async def _connect(dsn: str | None = None) -> asyncpg.Connection:
    return await asyncpg.connect(dsn or admin_dsn(), timeout=CONNECT_TIMEOUT_S)


async def unreachable_reason() -> str | None:
    """None when the server answers; otherwise one line saying why not."""
    try:
        conn = await _connect()
    except (OSError, asyncpg.PostgresError, TimeoutError) as err:
        return f"PostgreSQL at {admin_dsn()} is unreachable: {type(err).__name__}: {err}"
    await conn.close()
    return None


@cache
def unreachable_reason_sync() -> str | None:
    """``unreachable_reason``, asked once per process."""
    return asyncio.run(unreachable_reason())


def require() -> None:
    """Skip the calling test (or fixture) when PostgreSQL is unreachable; fail under ``CI``."""
    reason = unreachable_reason_sync()
    if reason is None:
        return
    if os.environ.get("CI"):
        raise RuntimeError(f"{reason} (CI is set: PostgreSQL tests must run)")
    pytest.skip(reason)


def session_icu_locale() -> str | None:
    """The ICU locale ``THREADLOOM_PG_ICU`` asks for (``1`` means ``en-US``), or None."""
    value = os.environ.get("THREADLOOM_PG_ICU", "").strip()
    if not value or value == "0":
        return None
    return "en-US" if value == "1" else value


def new_name(tag: str = "") -> str:
    return f"{PREFIX}{tag}{'_' if tag else ''}{secrets.token_hex(5)}"


_DEFAULT = object()


async def create_database(
    name: str | None = None, *, template: str | None = None, icu_locale: object = _DEFAULT
) -> PgDatabase:
    """A new, empty database (or a copy of ``template``, which must have no connections).

    ``icu_locale`` (by default ``session_icu_locale()``; None for the server's default) makes
    its default collation that ICU locale; it is ignored with ``template`` (a copy keeps its
    template's collation)."""
    db = PgDatabase(name or new_name())
    locale = session_icu_locale() if icu_locale is _DEFAULT else icu_locale
    if locale is not None and not (isinstance(locale, str) and locale.replace("-", "").isalnum()):
        raise ValueError(f"not an ICU locale name: {locale!r}")
    conn = await _connect()
    try:
        sql = f'CREATE DATABASE "{db.name}"'
        if template:
            sql += f' TEMPLATE "{template}"'
        elif locale is not None:
            # the ICU provider needs template0 (template1's collation is libc's); PostgreSQL 15
            # still wants a libc LC_COLLATE/LC_CTYPE beside it, C.UTF-8 exists everywhere
            sql += f" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '{locale}'"
            sql += " LOCALE 'C.UTF-8' ENCODING 'UTF8'"
        await conn.execute(sql)
    finally:
        await conn.close()
    return db


async def drop_database(name: str) -> None:
    """Drop ``name`` if it exists, closing whatever connections are still open to it."""
    conn = await _connect()
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def empty_tables(dsn: str, *, keep: tuple[str, ...] = ("alembic_version",)) -> None:
    """Delete every row of every table of the public schema but ``keep``: the fast way to give
    each test a clean, already-migrated database (a few tables of a few rows: ``DELETE`` takes
    about a millisecond where ``TRUNCATE`` takes tens, as it swaps files and syncs). Foreign keys
    are not checked while doing it (``session_replication_role``: the test user is a superuser);
    identity sequences go on counting."""
    conn = await _connect(dsn)
    try:
        names = [
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            if r["tablename"] not in keep
        ]
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
            for name in names:
                await conn.execute(f'DELETE FROM "{name}"')
    finally:
        await conn.close()


async def table_names(dsn: str) -> set[str]:
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


async def collation_of(dsn: str) -> tuple[str, str | None]:
    """The database's locale provider (``c`` libc, ``i`` ICU) and its ICU locale."""
    conn = await _connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT datlocprovider::text AS p, daticulocale AS l"
            " FROM pg_database WHERE datname = current_database()"
        )
        assert row is not None
        return str(row["p"]), row["l"]
    finally:
        await conn.close()


def create_database_sync(
    name: str | None = None, *, template: str | None = None, icu_locale: object = _DEFAULT
) -> PgDatabase:
    return asyncio.run(create_database(name, template=template, icu_locale=icu_locale))


def drop_database_sync(name: str) -> None:
    asyncio.run(drop_database(name))
