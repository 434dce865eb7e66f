"""The usage ledger (``store.usage``): one row per model response, so totals per thread and per
job are SQL sums and nothing is counted in a shared in-memory object.

Most rows are written by ``Store.append`` in the transaction of the messages they paid for
(``usage_row``); ``record`` writes one that is tied to no appended message.
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ._engine import utcnow
from ._tables import threads, usage
from .models import Usage, UsageRecord

if TYPE_CHECKING:
    from ._writer import Writer


@dataclass(frozen=True, slots=True)
class UsageTotal:
    thread_id: str
    usage: Usage
    cost_usd: float
    responses: int


def usage_row(thread_id: str, seq: int | None, rec: UsageRecord, now: datetime) -> dict[str, Any]:
    u = rec.usage
    return {
        "thread_id": thread_id,
        "seq": seq,
        "model": rec.model,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cost_usd": rec.cost_usd,
        "created_at": now,
    }


def totals_query(*, thread_id: str | None, job_id: str | None) -> sa.Select[Any]:
    cols = [
        usage.c.thread_id,
        sa.func.coalesce(sa.func.sum(usage.c.input_tokens), 0),
        sa.func.coalesce(sa.func.sum(usage.c.output_tokens), 0),
        sa.func.coalesce(sa.func.sum(usage.c.cache_read_input_tokens), 0),
        sa.func.coalesce(sa.func.sum(usage.c.cache_creation_input_tokens), 0),
        sa.func.coalesce(sa.func.sum(usage.c.cost_usd), 0.0),
        sa.func.count(),
    ]
    q = sa.select(*cols).group_by(usage.c.thread_id).order_by(usage.c.thread_id)
    if thread_id is not None:
        q = q.where(usage.c.thread_id == thread_id)
    if job_id is not None:
        q = q.join(threads, threads.c.id == usage.c.thread_id).where(threads.c.job_id == job_id)
    return q


async def _totals(conn: AsyncConnection, q: sa.Select[Any]) -> list[UsageTotal]:
    return [
        UsageTotal(
            thread_id=r[0],
            usage=Usage(
                input_tokens=int(r[1]),
                output_tokens=int(r[2]),
                cache_read_input_tokens=int(r[3]),
                cache_creation_input_tokens=int(r[4]),
            ),
            cost_usd=float(r[5]),
            responses=int(r[6]),
        )
        for r in await conn.execute(q)
    ]


def _raw_totals(
    conn: sqlite3.Connection, *, thread_id: str | None, job_id: str | None
) -> list[UsageTotal]:
    from ._rawread import usage_totals

    return [
        UsageTotal(
            thread_id=t.thread_id,
            usage=Usage(
                input_tokens=t.usage.input_tokens,
                output_tokens=t.usage.output_tokens,
                cache_read_input_tokens=t.usage.cache_read_input_tokens,
                cache_creation_input_tokens=t.usage.cache_creation_input_tokens,
            ),
            cost_usd=t.cost_usd,
            responses=t.responses,
        )
        for t in usage_totals(conn, thread_id=thread_id, job_id=job_id)
    ]


async def _insert(conn: AsyncConnection, row: dict[str, Any]) -> None:
    await conn.execute(usage.insert().values(**row))


class Ledger:
    """``store.usage``: usage rows and their sums."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def record(self, thread_id: str, record: UsageRecord, *, seq: int | None = None) -> None:
        """A usage row not tied to an appended message (e.g. a response that was discarded)."""
        row = usage_row(thread_id, seq, record, utcnow())
        await self._writer.run(lambda c: _insert(c, row), where="recording usage")

    async def totals(
        self, *, thread_id: str | None = None, job_id: str | None = None
    ) -> list[UsageTotal]:
        """Usage summed per thread (SQL sums of the usage rows): of one thread, of every thread
        of a job, or of every thread."""
        raw = self._writer.db.raw
        if raw is not None:  # a SQLite file: plain sqlite3, the same SQL (``_rawread``)
            fn = functools.partial(_raw_totals, thread_id=thread_id, job_id=job_id)
            # one thread's sum is a small indexed read: on the event loop unless SQLite is busy
            found = raw.inline(fn, where="summing usage") if thread_id is not None else None
            return found if found is not None else await raw.run(fn, where="summing usage")
        q = totals_query(thread_id=thread_id, job_id=job_id)
        return await self._writer.db.read(lambda c: _totals(c, q), where="summing usage")

    async def of_thread(self, thread_id: str) -> Usage:
        rows = await self.totals(thread_id=thread_id)
        return rows[0].usage if rows else Usage()

    async def of_job(self, job_id: str) -> Usage:
        total = Usage()
        for row in await self.totals(job_id=job_id):
            total = total + row.usage
        return total
