"""Thread state machine, results, usage, leases and dispatches."""

from __future__ import annotations

import asyncio

import pytest

from store import (
    TERMINAL_STATUSES,
    Kind,
    LeaseHeld,
    NewWorker,
    Result,
    SpawnRequest,
    Status,
    StatusError,
    Store,
    ThreadNotFound,
    Usage,
    UsageRecord,
)

from .helpers import assistant, calls, results, user

S = Status
# the expected state machine: from → allowed targets (besides staying where it is)
ALLOWED = {
    S.IDLE: {S.QUEUED, S.RUNNING, S.CANCELLED},
    S.QUEUED: {S.RUNNING, S.CANCELLED, S.INTERRUPTED, S.FAILED},
    S.RUNNING: {S.DONE, S.FAILED, S.INTERRUPTED, S.CANCELLED},
    S.DONE: {S.QUEUED, S.RUNNING},
    S.FAILED: {S.QUEUED, S.RUNNING},
    S.INTERRUPTED: {S.QUEUED, S.RUNNING, S.CANCELLED},  # a stopped run its user cancelled
    S.CANCELLED: {S.QUEUED, S.RUNNING},
}
# how to reach each status from idle
PATH = {
    S.IDLE: [],
    S.QUEUED: [S.QUEUED],
    S.RUNNING: [S.RUNNING],
    S.DONE: [S.RUNNING, S.DONE],
    S.FAILED: [S.RUNNING, S.FAILED],
    S.INTERRUPTED: [S.RUNNING, S.INTERRUPTED],
    S.CANCELLED: [S.CANCELLED],
}


async def test_the_state_machine_allows_exactly_the_documented_transitions(store: Store) -> None:
    allowed: dict[Status, set[Status]] = {s: set() for s in Status}
    for source in Status:
        for target in Status:
            if target == source:
                continue
            t = await store.create_thread(kind="worker")
            for step in PATH[source]:
                await store.set_status(t.id, step)
            try:
                info = await store.set_status(t.id, target)
            except StatusError as err:
                refusal = str(err)
            else:
                assert info.status == target
                allowed[source].add(target)
                continue
            assert f"cannot go from {source} to {target}" in refusal
            assert (await store.get_thread(t.id)).status == source
    assert allowed == ALLOWED
    # nothing ever goes back to idle
    assert all(S.IDLE not in targets for targets in allowed.values())


async def test_writing_the_same_terminal_status_again_is_a_no_op(store: Store) -> None:
    t = await store.create_thread(kind="worker", status=Status.RUNNING)
    first = Result(status="done", summary="first")
    done = await store.set_status(t.id, Status.DONE, result=first)
    again = await store.set_status(
        t.id, Status.DONE, result=Result(status="failed", summary="second"), error="late"
    )
    assert again.version == done.version
    assert again.result == first and again.error is None
    assert again.status == Status.DONE


@pytest.mark.parametrize("terminal", sorted(TERMINAL_STATUSES))
async def test_every_terminal_status_is_idempotent(store: Store, terminal: Status) -> None:
    t = await store.create_thread(kind="worker", status=Status.RUNNING)
    a = await store.set_status(t.id, terminal, error="x")
    b = await store.set_status(t.id, terminal, error="y")
    assert (b.status, b.version, b.error) == (terminal, a.version, "x")


async def test_a_failed_status_keeps_its_error_and_running_again_clears_it(store: Store) -> None:
    t = await store.create_thread(kind="worker", status=Status.RUNNING)
    failed = await store.set_status(t.id, Status.FAILED, error="boom")
    assert failed.error == "boom"
    resumed = await store.set_status(t.id, Status.RUNNING)
    assert resumed.error is None


async def test_expect_refuses_a_change_from_an_unexpected_status(store: Store) -> None:
    t = await store.create_thread(kind="worker", status=Status.QUEUED)
    with pytest.raises(StatusError, match="expected running"):
        await store.set_status(t.id, Status.DONE, expect=[Status.RUNNING])
    info = await store.set_status(t.id, Status.RUNNING, expect=[Status.QUEUED, Status.IDLE])
    assert info.status == Status.RUNNING


async def test_status_of_a_missing_thread_is_thread_not_found(store: Store) -> None:
    with pytest.raises(ThreadNotFound):
        await store.set_status("0" * 26, Status.RUNNING)


async def test_a_terminal_status_write_lands_even_if_its_caller_is_cancelled(
    store: Store,
) -> None:
    t = await store.create_thread(kind="worker", status=Status.RUNNING)
    task = asyncio.create_task(
        store.set_status(
            t.id, Status.FAILED, error="stopped", result=Result(status="failed", summary="s")
        )
    )
    await asyncio.sleep(0)  # let it start (one loop turn; nothing is waited for)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await store.get_thread(t.id)
    assert (info.status, info.error) == (Status.FAILED, "stopped")
    assert info.result is not None and info.result.summary == "s"


async def test_a_terminal_status_write_queued_behind_another_write_lands_if_cancelled(
    store: Store,
) -> None:
    """The write may be cancelled while it waits for the process's one writer: it must still
    land (a worker's terminal status is written before anyone hears that it ended)."""
    threads = [await store.create_thread(kind="worker", messages=[user("x")]) for _ in range(8)]
    t = await store.create_thread(kind="worker", status=Status.RUNNING)
    busy = [asyncio.create_task(store.append(x.id, assistant("busy"))) for x in threads]
    await asyncio.sleep(0)  # the appends hold the writer
    task = asyncio.create_task(store.set_status(t.id, Status.INTERRUPTED, error="stopped"))
    await asyncio.sleep(0)  # it has started and waits its turn
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.gather(*busy)
    info = await store.get_thread(t.id)
    assert (info.status, info.error) == (Status.INTERRUPTED, "stopped")


async def test_set_result_stores_the_result_without_changing_status(store: Store) -> None:
    t = await store.create_thread(kind="worker", status=Status.RUNNING)
    result = Result.model_validate(
        {
            "status": "done",
            "summary": "fixed",
            "findings": [{"claim": "c", "evidence": [f"T-{t.id}#1"]}],
            "usage": {"input_tokens": 3},
        }
    )
    await store.set_result(t.id, result)
    info = await store.get_thread(t.id)
    assert info.result == result and info.status == Status.RUNNING
    with pytest.raises(ThreadNotFound):
        await store.set_result("0" * 26, result)


async def test_update_thread_edits_metadata_only(store: Store) -> None:
    t = await store.create_thread(kind="worker", title="a", messages=[user("x")])
    info = await store.update_thread(t.id, title="b", tools=["grep"], model="m")
    assert (info.title, info.tools, info.model, info.head_seq) == ("b", ["grep"], "m", 1)


# ----------------------------------------------------------------- listing and lineage


async def test_list_threads_filters_and_orders_newest_first(store: Store) -> None:
    lead = await store.create_thread(kind="lead", status=Status.RUNNING)
    w1 = await store.create_thread(kind="worker", parent_id=lead.id)
    w2 = await store.create_thread(kind="worker", parent_id=lead.id, status=Status.QUEUED)
    other = await store.create_thread(kind="lead")
    assert [t.id for t in await store.list_threads()] == [other.id, w2.id, w1.id, lead.id]
    assert [t.id for t in await store.list_threads(limit=2)] == [other.id, w2.id]
    assert [t.id for t in await store.list_threads(kind="lead")] == [other.id, lead.id]
    assert [t.id for t in await store.list_threads(status="queued")] == [w2.id]
    assert [t.id for t in await store.children(lead.id)] == [w1.id, w2.id]
    assert [t.id for t in await store.job_tree(lead.id)] == [lead.id, w1.id, w2.id]
    assert (w1.job_id, w2.job_id, other.job_id) == (lead.id, lead.id, other.id)


# ----------------------------------------------------------------- usage


def _u(inp: int, out: int, read: int = 0, create: int = 0) -> Usage:
    return Usage(
        input_tokens=inp,
        output_tokens=out,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=create,
    )


async def test_usage_rows_sum_per_thread_and_per_job(store: Store) -> None:
    lead = await store.create_thread(kind="lead", messages=[user("plan")])
    await store.append(
        lead.id, calls("d1"), usage=UsageRecord(model="m", usage=_u(100, 10, 50, 5), cost_usd=0.5)
    )
    [(worker, _)] = await store.dispatches.spawn(SpawnRequest(lead.id, "d1", (NewWorker(0, "a"),)))
    await store.append(worker.id, user("task"))
    await store.append(
        worker.id, assistant("done"), usage=UsageRecord(model="w", usage=_u(7, 3), cost_usd=0.25)
    )
    reader = await store.create_thread(kind="reader", parent_id=worker.id)
    await store.usage.record(reader.id, UsageRecord(model="r", usage=_u(1, 1, 1, 1)))
    await store.append(lead.id, results("d1"))
    await store.append(
        lead.id, assistant("report"), usage=UsageRecord(model="m", usage=_u(20, 2, 100))
    )
    stranger = await store.create_thread(kind="lead", messages=[user("x")])
    await store.append(stranger.id, assistant("y"), usage=UsageRecord(model="m", usage=_u(9, 9)))

    assert await store.usage.of_thread(lead.id) == _u(120, 12, 150, 5)
    assert await store.usage.of_thread(worker.id) == _u(7, 3)
    assert await store.usage.of_thread(reader.id) == _u(1, 1, 1, 1)
    assert await store.usage.of_job(lead.id) == _u(128, 16, 151, 6)
    totals = {t.thread_id: t for t in await store.usage.totals(job_id=lead.id)}
    assert set(totals) == {lead.id, worker.id, reader.id}
    assert totals[lead.id].responses == 2
    assert totals[lead.id].cost_usd == pytest.approx(0.5)
    assert totals[worker.id].cost_usd == pytest.approx(0.25)
    assert len(await store.usage.totals()) == 4
    assert await store.usage.of_thread((await store.create_thread(kind="worker")).id) == Usage()


async def test_usage_is_recorded_against_the_assistant_message_it_produced(store: Store) -> None:
    t = await store.create_thread(kind="worker", messages=[user("go")])
    await store.append(
        t.id, [calls("a"), results("a")], usage=UsageRecord(model="m", usage=_u(1, 1))
    )

    rows = await store.db.read(lambda tx: tx.fetchall("SELECT seq FROM usage"))
    assert [r[0] for r in rows] == [2]


# ----------------------------------------------------------------- leases


async def test_a_lease_is_held_by_one_owner_until_released(store: Store) -> None:
    t = await store.create_thread(kind="worker")
    await store.leases.acquire(t.id, "host-a:1")
    await store.leases.acquire(t.id, "host-a:1")  # the holder may take it again
    with pytest.raises(LeaseHeld) as err:
        await store.leases.acquire(t.id, "host-b:2")
    assert err.value.owner == "host-a:1"
    assert "host-a:1" in str(err.value) and f"T-{t.id}" in str(err.value)
    assert (await store.get_thread(t.id)).lease_owner == "host-a:1"

    await store.leases.release(t.id, "host-b:2")  # not the holder: nothing happens
    with pytest.raises(LeaseHeld):
        await store.leases.acquire(t.id, "host-b:2")
    await store.leases.release(t.id, "host-a:1")
    assert (await store.get_thread(t.id)).lease_owner is None
    await store.leases.acquire(t.id, "host-b:2")
    assert (await store.get_thread(t.id)).lease_owner == "host-b:2"


async def test_renewing_a_lease_extends_it_only_for_its_holder(store: Store) -> None:
    t = await store.create_thread(kind="worker")
    await store.leases.acquire(t.id, "a", ttl_s=10)
    first = (await store.get_thread(t.id)).lease_expires_at
    assert await store.leases.renew(t.id, "a", ttl_s=600)
    renewed = (await store.get_thread(t.id)).lease_expires_at
    assert first is not None and renewed is not None and renewed > first
    assert not await store.leases.renew(t.id, "b")
    await store.leases.release(t.id, "a")
    assert not await store.leases.renew(t.id, "a")


async def test_an_expired_lease_is_stale_and_can_be_taken_over(store: Store) -> None:
    t = await store.create_thread(kind="worker")
    live = await store.create_thread(kind="worker")
    await store.leases.acquire(t.id, "dead-runner", ttl_s=-60)  # expired a minute ago
    await store.leases.acquire(live.id, "live-runner", ttl_s=600)
    assert [x.id for x in await store.leases.stale()] == [t.id]
    await store.leases.acquire(t.id, "new-runner")
    assert (await store.get_thread(t.id)).lease_owner == "new-runner"
    assert await store.leases.stale() == []
    with pytest.raises(LeaseHeld):
        await store.leases.acquire(live.id, "new-runner")


async def test_a_lease_on_a_missing_thread_is_thread_not_found(store: Store) -> None:
    with pytest.raises(ThreadNotFound):
        await store.leases.acquire("0" * 26, "a")


# ----------------------------------------------------------------- dispatches


async def test_spawning_the_same_dispatch_twice_returns_the_same_worker(store: Store) -> None:
    lead = await store.create_thread(kind="lead", messages=[user("plan")])
    first = NewWorker(
        0, "tok", title="tokenizer", task={"id": "tok"}, messages=(user("fix the tokenizer"),)
    )
    [(w, created)] = await store.dispatches.spawn(SpawnRequest(lead.id, "toolu_1", (first,)))
    replay = (NewWorker(0, "tok", title="other"), NewWorker(1, "parse"))
    [(again, created_again), (other, created_other)] = await store.dispatches.spawn(
        SpawnRequest(lead.id, "toolu_1", replay)
    )
    assert created and not created_again
    assert again.id == w.id and again.title == "tokenizer"
    assert created_other and other.id != w.id
    assert (w.kind, w.status, w.parent_id, w.job_id, w.head_seq) == (
        Kind.WORKER,
        Status.QUEUED,
        lead.id,
        lead.id,
        1,
    )
    assert [(d.task_index, d.worker_id) for d in await store.dispatches.of_lead(lead.id)] == [
        (0, w.id),
        (1, other.id),
    ]
    assert await store.dispatches.of_lead(lead.id, "toolu_2") == []
    assert [t.id for t in await store.children(lead.id)] == [w.id, other.id]
    await store.dispatches.set_status(w.id, "done")
    assert [d.status for d in await store.dispatches.of_lead(lead.id, "toolu_1")] == [
        "done",
        "queued",
    ]


async def test_concurrent_spawns_of_one_dispatch_create_one_worker(store: Store) -> None:
    lead = await store.create_thread(kind="lead", messages=[user("plan")])
    # five callers, each with a worker of its own id, for the one task of one call
    requests = [SpawnRequest(lead.id, "toolu_9", (NewWorker(0),)) for _ in range(5)]
    spawns = await asyncio.gather(*(store.dispatches.spawn(r) for r in requests))
    outs = [out for [out] in spawns]
    assert len({w.id for w, _ in outs}) == 1
    assert sum(created for _, created in outs) == 1
    assert len(await store.children(lead.id)) == 1


async def test_spawning_from_a_missing_lead_is_thread_not_found(store: Store) -> None:
    with pytest.raises(ThreadNotFound):
        await store.dispatches.spawn(SpawnRequest("0" * 26, "t", (NewWorker(0),)))
