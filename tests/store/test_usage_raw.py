"""``store.usage`` on a SQLite file sums through plain sqlite3 (no SQLAlchemy engine in a job
that otherwise never needs one): the same sums, in the same order, as the SQLAlchemy query."""

from __future__ import annotations

import random
from pathlib import Path

from store import NewMessage, Store, Usage, UsageRecord
from store._ledger import _totals, totals_query


async def test_raw_usage_sums_match_the_sqlalchemy_query(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "t.db"))
    try:
        rng = random.Random(7)
        lead = await store.create_thread(kind="lead", messages=[NewMessage.user("go")])
        others = await store.create_thread(kind="lead", messages=[NewMessage.user("other")])
        workers = [
            await store.create_thread(kind="worker", parent_id=lead.id, messages=[])
            for _ in range(3)
        ]
        for t in [lead, others, *workers]:
            for _ in range(rng.randint(1, 6)):
                u = Usage(
                    input_tokens=rng.randint(0, 10**6),
                    output_tokens=rng.randint(0, 10**4),
                    cache_read_input_tokens=rng.randint(0, 10**5),
                    cache_creation_input_tokens=rng.randint(0, 10**3),
                )
                # costs whose float sum depends on the order they are added in
                rec = UsageRecord(model="m", usage=u, cost_usd=rng.random() * 1e-3 + 1e-9)
                await store.usage.record(t.id, rec)
        quiet = await store.create_thread(kind="worker", parent_id=lead.id, messages=[])
        for kw in ({}, {"job_id": lead.id}, {"thread_id": workers[1].id}):
            q = totals_query(thread_id=kw.get("thread_id"), job_id=kw.get("job_id"))
            via_orm = await store.db.read(lambda c, q=q: _totals(c, q), where="test")
            assert await store.usage.totals(**kw) == via_orm and via_orm
        assert await store.usage.of_thread(quiet.id) == Usage()  # no rows: zero
        job = await store.usage.of_job(lead.id)
        assert job.input_tokens == sum(
            t.usage.input_tokens for t in await store.usage.totals(job_id=lead.id)
        )
    finally:
        await store.close()
