"""``store.usage`` sums the usage rows in SQL, per thread, of one thread or of a job's threads:
the totals are those of the rows recorded, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import math
import random

from store import NewMessage, Store, Usage, UsageRecord


async def test_usage_totals_are_the_sums_of_the_recorded_rows(store: Store) -> None:
    rng = random.Random(7)
    lead = await store.create_thread(kind="lead", messages=[NewMessage.user("go")])
    others = await store.create_thread(kind="lead", messages=[NewMessage.user("other")])
    workers = [
        await store.create_thread(kind="worker", parent_id=lead.id, messages=[]) for _ in range(3)
    ]
    recorded: dict[str, list[UsageRecord]] = {}
    for t in [lead, others, *workers]:
        for _ in range(rng.randint(1, 6)):
            u = Usage(
                input_tokens=rng.randint(0, 10**6),
                output_tokens=rng.randint(0, 10**4),
                cache_read_input_tokens=rng.randint(0, 10**5),
                cache_creation_input_tokens=rng.randint(0, 10**3),
            )
            rec = UsageRecord(model="m", usage=u, cost_usd=rng.random() * 1e-3 + 1e-9)
            recorded.setdefault(t.id, []).append(rec)
            await store.usage.record(t.id, rec)
    quiet = await store.create_thread(kind="worker", parent_id=lead.id, messages=[])

    def expected(ids: list[str]) -> list[tuple[str, Usage, float, int]]:
        out = []
        for tid in sorted(ids):
            recs = recorded[tid]
            total = sum((r.usage for r in recs), Usage())
            out.append((tid, total, sum(r.cost_usd for r in recs), len(recs)))
        return out

    job_ids = [lead.id] + [w.id for w in workers]
    cases = [
        ({}, list(recorded)),
        ({"job_id": lead.id}, job_ids),
        ({"thread_id": workers[1].id}, [workers[1].id]),
    ]
    for kw, ids in cases:
        got = await store.usage.totals(**kw)
        want = expected(ids)
        assert [(t.thread_id, t.usage, t.responses) for t in got] == [
            (tid, u, n) for tid, u, _, n in want
        ]
        assert all(math.isclose(t.cost_usd, c) for t, (_, _, c, _) in zip(got, want, strict=True))
    assert await store.usage.of_thread(quiet.id) == Usage()  # no rows: zero
    assert await store.usage.of_job(lead.id) == sum(
        (u for _, u, _, _ in expected(job_ids)), Usage()
    )
