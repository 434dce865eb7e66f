"""The usage ledger (``store.usage``): one row per model response, so totals per thread and per
job are SQL sums and nothing is counted in a shared in-memory object.

Most rows are written by ``Store.append`` in the transaction of the messages they paid for
(``usage_row``); ``record`` writes one that is tied to no appended message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._sqlite import Tx, utcnow
from .models import Usage, UsageRecord

if TYPE_CHECKING:
    from ._writer import Writer


@dataclass(frozen=True, slots=True)
class UsageTotal:
    thread_id: str
    usage: Usage
    cost_usd: float
    responses: int


INSERT_USAGE = (
    "INSERT INTO usage (thread_id, seq, model, input_tokens, output_tokens,"
    " cache_read_input_tokens, cache_creation_input_tokens, cost_usd, created_at) VALUES"
    " (:thread_id, :seq, :model, :input_tokens, :output_tokens, :cache_read_input_tokens,"
    " :cache_creation_input_tokens, :cost_usd, :created_at)"
)


def usage_row(
    tx: Tx, thread_id: str, seq: int | None, rec: UsageRecord, now: datetime
) -> dict[str, Any]:
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
        "created_at": tx.time(now),
    }


def usage_totals(tx: Any, *, thread_id: str | None, job_id: str | None) -> list[tuple[Any, ...]]:
    """``store.usage.totals``'s statement (the fast path's too): usage summed per thread,
    ``(thread_id, input, output, cache read, cache creation, cost, responses)`` by thread id:
    of one thread, of every thread of a job, or of every thread."""
    sql = (
        "SELECT usage.thread_id, coalesce(sum(usage.input_tokens), 0),"
        " coalesce(sum(usage.output_tokens), 0), coalesce(sum(usage.cache_read_input_tokens), 0),"
        " coalesce(sum(usage.cache_creation_input_tokens), 0), coalesce(sum(usage.cost_usd), 0.0),"
        " count(*) FROM usage"
    )
    where = []
    if job_id is not None:
        sql += " JOIN threads ON threads.id = usage.thread_id"
        where.append("threads.job_id = :job")
    if thread_id is not None:
        where.append("usage.thread_id = :thread")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " GROUP BY usage.thread_id ORDER BY usage.thread_id"
    rows = tx.fetchall(sql, {"job": job_id, "thread": thread_id})
    return [
        (r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), float(r[5]), int(r[6])) for r in rows
    ]


def totals(tx: Tx, *, thread_id: str | None, job_id: str | None) -> list[UsageTotal]:
    """``Ledger.totals`` inside a read: usage summed per thread."""
    return [_total(r) for r in usage_totals(tx, thread_id=thread_id, job_id=job_id)]


def _total(row: tuple[Any, ...]) -> UsageTotal:
    tid, inp, out, read, created, cost, responses = row
    usage = Usage(
        input_tokens=inp,
        output_tokens=out,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=created,
    )
    return UsageTotal(thread_id=tid, usage=usage, cost_usd=cost, responses=responses)


class Ledger:
    """``store.usage``: usage rows and their sums."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def record(self, thread_id: str, record: UsageRecord, *, seq: int | None = None) -> None:
        """A usage row not tied to an appended message (e.g. a response that was discarded)."""
        now = utcnow()
        await self._writer.run(
            lambda tx: tx.execute(INSERT_USAGE, usage_row(tx, thread_id, seq, record, now)),
            where="recording usage",
        )

    async def totals(
        self, *, thread_id: str | None = None, job_id: str | None = None
    ) -> list[UsageTotal]:
        """Usage summed per thread (SQL sums of the usage rows): of one thread, of every thread
        of a job, or of every thread. One thread's sum is a small indexed read: on the event
        loop's thread unless SQLite is busy."""
        return await self._writer.db.read(
            lambda tx: totals(tx, thread_id=thread_id, job_id=job_id),
            where="summing usage",
            inline=thread_id is not None,
        )

    async def of_thread(self, thread_id: str) -> Usage:
        rows = await self.totals(thread_id=thread_id)
        return rows[0].usage if rows else Usage()

    async def of_job(self, job_id: str) -> Usage:
        total = Usage()
        for row in await self.totals(job_id=job_id):
            total = total + row.usage
        return total
