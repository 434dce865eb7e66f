"""``Store.exclusive(name)``: one holder at a time, across every process using the database.

For work made of many transactions that must not interleave with the same work of another
process (an import reads what is stored, then creates what is missing: two at once would both
create it). SQLite: an exclusive ``flock`` on a sidecar file ``<db>-<name>.lock``, waited for
in a thread (the kernel wakes the waiter on release; the lock goes with the process if it
dies). PostgreSQL: a session advisory lock on a connection of its own, held for the block.
Elsewhere (a SQLite database named by a ``file:`` URI, whose file threadloom does not know):
a lock of this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator

import sqlalchemy as sa
from sqlalchemy import exc

from ._engine import Database, flocked, translate

_LOCAL: dict[str, asyncio.Lock] = {}


@contextlib.asynccontextmanager
async def exclusive(db: Database, name: str) -> AsyncIterator[None]:
    where = f"waiting for the {name} lock of {db.display}"
    if db.dialect == "postgresql":
        key = int.from_bytes(hashlib.sha256(f"threadloom:{name}".encode()).digest()[:8], "big")
        key -= 1 << 63 if key >= 1 << 63 else 0  # bigint
        try:
            async with db.writer.connect() as conn:
                await conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
                await conn.commit()
                try:
                    yield
                finally:
                    await conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    await conn.commit()
        except exc.SQLAlchemyError as err:
            raise translate(err, where=where) from err
        return
    if db.path is None:
        async with _LOCAL.setdefault(name, asyncio.Lock()):
            yield
        return
    async with flocked(db.path.with_name(f"{db.path.name}-{name}.lock")):
        yield
