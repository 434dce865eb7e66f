"""A run's own writes on SQLite — the lead created, workers spawned, the lease taken with the
``running`` status, statuses set, the run finished — on the raw ``sqlite3`` writer
(``store._rawwrite``): the rows are exactly the ones the ORM path writes, and the lease rules
are the same (a live owner's lease refused with its owner, a lost lease writing nothing)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from store import (
    LeaseHeld,
    LeaseLost,
    NewMessage,
    Result,
    Status,
    StatusError,
    Store,
    ToolResultBlock,
    ToolUseBlock,
    _leases,
    _messages,
    _store,
    _threads,
)
from store.models import Usage, UsageRecord

NOW = datetime(2026, 12, 4, 18, 0, 0, 123456, tzinfo=UTC)
TABLES = {
    "threads": "id",
    "messages": "thread_id, seq",
    "messages_fts": "thread_id, seq",
    "dispatches": "id",
    "usage": "id",
}


def _dump(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a run writes, with each value's SQLite type."""
    conn = sqlite3.connect(path)
    try:
        out = {}
        for table, order in TABLES.items():
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            typed = ", ".join(f"{c}, typeof({c})" for c in cols)
            out[table] = conn.execute(f"SELECT {typed} FROM {table} ORDER BY {order}").fetchall()
        return out
    finally:
        conn.close()


async def _run_writes(store: Store, raw: bool) -> list[object]:
    """The writes of a job with two workers, and the outcome of each (a value or an error)."""
    if not raw:  # the ORM path: what PostgreSQL runs, here on the same SQLite schema
        assert store.db.appender is not None
        store.db.appender.close()
        store.db.appender = None
    seen: list[object] = []
    lead = await store.create_thread(
        kind="lead",
        title="job",
        task={"job": {"name": "j", "tasks": [1, 2]}},
        tools=["dispatch"],
        model="m",
        status=Status.QUEUED,
        thread_id="01lead0000000000000000000a",
        messages=[
            NewMessage.user("lead the job ü"),
            NewMessage(role="assistant", content=[ToolUseBlock(id="d1", name="dispatch")]),
        ],
    )
    seen.append(lead)
    spawned = await store.spawn_workers(
        lead_id=lead.id,
        tool_use_id="d1",
        workers=[
            {
                "task_index": i,
                "task_key": f"t{i}",
                "thread_id": f"01work00000000000000000{i}0a",
                "title": f"task {i}",
                "task": {"id": f"t{i}"},
                "system_prompt": "work",
                "tools": ["list_files", "submit_result"],
                "model": "m",
                "messages": [NewMessage.user(f"do part {i}")],
            }
            for i in range(2)
        ],
    )
    seen.append(spawned)
    again = await store.spawn_workers(  # a replayed dispatch: the same workers, nothing new
        lead_id=lead.id, tool_use_id="d1", workers=[{"task_index": 0, "task_key": "t0"}]
    )
    seen.append(again)
    (one, _), (two, _) = spawned
    usage = UsageRecord(model="m", usage=Usage(input_tokens=3, output_tokens=4), cost_usd=0.5)
    async with store.leases.hold(one.id, "runner-1", start=Status.RUNNING) as lease:
        seen.append(await store.get_thread(one.id))
        seen.append(await store.leases.renew(one.id, "runner-1"))
        call = NewMessage(role="assistant", content=[ToolUseBlock(id="c1", name="list_files")])
        seen.append(await store.append(one.id, call, usage=usage, lease_owner="runner-1"))
        answer = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="c1", content="x")])
        seen.append(await store.append(one.id, answer, lease_owner="runner-1"))
        result = Result(status="done", summary="done with my part", task="t0")
        seen.append(await store.finish(lease, Status.DONE, result=result))
    async with store.leases.hold(two.id, "runner-2", start=Status.RUNNING) as lease:
        # a stolen lease: finishing writes nothing and says who holds it
        await store.leases.acquire(two.id, "thief", replace="runner-2")
        with pytest.raises(LeaseLost) as lost:
            await store.finish(lease, Status.DONE)
        seen.append((str(lost.value), lost.value.owner))
        lease.released = True  # hold's own release would be a no-op anyway
    await store.leases.release(two.id, "thief")
    async with store.leases.hold(two.id, "runner-3", start=Status.RUNNING) as lease:
        seen.append(await store.finish(lease, Status.FAILED, error="boom sk-ant-api03-" + "x" * 40))
    with pytest.raises(StatusError) as bad:
        await store.set_status(one.id, Status.QUEUED, expect=[Status.RUNNING])
    seen.append(str(bad.value))
    seen.append(await store.set_status(one.id, Status.DONE))  # terminal again: a no-op
    async with store.leases.hold(lead.id, "runner-lead", start=Status.RUNNING) as lease:
        done = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="d1", content="ok")])
        seen.append(await store.append(lead.id, done, lease_owner="runner-lead"))
        seen.append(await store.set_status(lead.id, Status.CANCELLED, lease_owner="runner-lead"))
    await store.leases._abandon(lead.id, "nobody")  # not the holder: nothing
    reader = await store.create_thread(kind="reader", parent_id=lead.id, thread_id="0" * 26)
    await store.leases.acquire(reader.id, "r", start=Status.RUNNING)
    await store.leases._abandon(reader.id, "r")  # taken, never begun: left interrupted
    seen.append(await store.get_thread(reader.id))
    return seen


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """One instant for every write, so two runs of the same writes give the same rows."""
    for module in (_store, _leases, _threads, _messages):
        monkeypatch.setattr(module, "utcnow", lambda: NOW)


@pytest.fixture
def two_files(tmp_path: Path, sqlite_template: Path) -> tuple[Path, Path]:
    paths = (tmp_path / "raw.db", tmp_path / "orm.db")
    for p in paths:
        p.write_bytes(sqlite_template.read_bytes())
    return paths


@pytest.mark.usefixtures("frozen")
async def test_a_runs_writes_on_the_raw_writer_are_the_rows_the_orm_path_writes(
    two_files: tuple[Path, Path],
) -> None:
    raw_path, orm_path = two_files
    outcomes = []
    for path, raw in ((raw_path, True), (orm_path, False)):
        store = await Store.open(str(path))
        statements: list[str] = []
        if raw:
            assert store.db.appender is not None
            store.db.appender.conn.set_trace_callback(statements.append)
        try:
            outcomes.append(await _run_writes(store, raw))
        finally:
            await store.close()
        if raw:  # every one of those writes took the raw writer
            for sql in (
                "INSERT INTO threads",
                "INSERT INTO dispatches",
                "UPDATE threads SET lease_owner",  # taken
                "UPDATE threads SET lease_expires_at",  # renewed
                "UPDATE threads SET status",
                "UPDATE dispatches SET status",
            ):
                assert any(s.startswith(sql) for s in statements), sql
    assert outcomes[0] == outcomes[1]
    raw_rows, orm_rows = _dump(raw_path), _dump(orm_path)
    assert [len(raw_rows[t]) for t in TABLES] == [4, 7, 7, 2, 1]
    for table in TABLES:
        assert raw_rows[table] == orm_rows[table], table


def _live_owner() -> str:
    # this host, a process that lives (our parent) and is not this one
    return f"{socket.gethostname()}:{os.getppid()}:nonce"


@pytest.fixture
async def worker(store: Store) -> str:
    return (await store.create_thread(kind="worker", status=Status.QUEUED)).id


async def test_a_lease_held_by_a_live_owner_is_refused_with_its_owner(
    store: Store, worker: str
) -> None:
    owner = _live_owner()
    await store.leases.acquire(worker, owner)
    with pytest.raises(LeaseHeld) as held:
        async with store.leases.hold(worker, "me", start=Status.RUNNING):
            pytest.fail("ran under another's lease")
    assert held.value.owner == owner
    assert f"is being run by {owner} (lease until" in str(held.value)
    info = await store.get_thread(worker)
    # nothing taken: the owner keeps its lease, the status is not moved
    assert (info.lease_owner, info.status) == (owner, Status.QUEUED)


async def test_a_dead_owners_lease_is_taken_over_and_an_expired_one_taken(
    store: Store, worker: str
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    await store.leases.acquire(worker, f"{socket.gethostname()}:{gone.pid}:nonce")
    async with store.leases.hold(worker, "me", start=Status.RUNNING) as lease:
        info = await store.get_thread(worker)
        assert (info.lease_owner, info.status) == ("me", Status.RUNNING)
        await store.finish(lease, Status.DONE)
    other = (await store.create_thread(kind="worker")).id
    await store.leases.acquire(other, "late", ttl_s=-1)
    await store.leases.acquire(other, "next")
    info = await store.get_thread(other)
    assert info.lease_owner == "next"
    assert info.lease_expires_at is not None
    assert info.lease_expires_at > datetime.now(UTC) + timedelta(seconds=30)


async def test_a_status_the_lease_take_cannot_move_to_takes_no_lease(
    store: Store, worker: str
) -> None:
    await store.set_status(worker, Status.CANCELLED)
    await store.set_status(worker, Status.RUNNING)  # resumed
    with pytest.raises(StatusError):
        await store.leases.acquire(worker, "me", start=Status.QUEUED)  # running → queued
    info = await store.get_thread(worker)
    assert (info.lease_owner, info.status) == (None, Status.RUNNING)


async def test_finish_with_an_expired_lease_writes_nothing(store: Store, worker: str) -> None:
    async with store.leases.hold(worker, "me", start=Status.RUNNING) as lease:
        await store.leases.acquire(worker, "me", ttl_s=-1)  # expired now
        with pytest.raises(LeaseLost) as lost:
            await store.finish(lease, Status.DONE, result=Result(status="done", summary="s"))
        assert lost.value.owner == "me"
        info = await store.db.read(lambda c: _threads.get(c, worker))  # the row, not as seen
        assert (info.status, info.result, info.lease_owner) == (Status.RUNNING, None, "me")
    # the block left without its end written: the lease given up, the thread interrupted
    info = await store.get_thread(worker)
    assert (info.status, info.result, info.lease_owner) == (Status.INTERRUPTED, None, None)
