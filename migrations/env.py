"""Alembic environment (async).

Two ways in: ``store`` opens a database and hands its own connection over through
``config.attributes["connection"]`` (the normal path: opening a store upgrades it); or a developer
runs ``alembic upgrade head`` with ``-x url=…`` / ``THREADLOOM_DB``, and this module makes an
async engine itself. SQLite uses batch mode so later revisions can alter tables.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import Connection, pool
from sqlalchemy.ext.asyncio import create_async_engine

from store import FTS_TABLE, metadata

config = context.config


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    # the full-text index (and FTS5's shadow tables) is managed by hand in the revisions
    return not (type_ == "table" and name is not None and name.startswith(FTS_TABLE))


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    async with engine.connect() as conn:
        await conn.run_sync(_configure_and_run)
        await conn.commit()
    await engine.dispose()


def _url() -> str:
    x = context.get_x_argument(as_dictionary=True)
    # a developer's own alembic process: nothing took THREADLOOM_DB out of its environment
    url = x.get("url") or os.environ.get("THREADLOOM_DB") or ".threadloom/threads.db"
    if "://" not in url:
        url = f"sqlite+aiosqlite:///{os.path.abspath(url)}"
    return url


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    shared = config.attributes.get("connection")
    if shared is not None:
        _configure_and_run(shared)
    else:
        asyncio.run(_run_with_own_engine(_url()))
