"""A run cancelled while its database cannot be written (SPEC: statuses tell the truth).

The cancelled run answers its in-flight tool call and writes ``interrupted``; when those writes
fail, the run still ends as *cancelled*: the error of its cleanup must not take the place of the
cancellation (a Temporal host reported such a run as finished, its thread still ``running``).
Once its lease runs out the thread reads ``interrupted`` and a resume carries it on."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

import store._engine as engine
from store import Status, Store, ToolResultBlock
from tests.workers.test_loop import TOOLS, new_worker, scripted, submit
from workers import LoopConfig, build_tools, run_thread
from workers.providers import tool_response


async def test_a_cancelled_run_whose_cleanup_cannot_be_written_still_ends_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "BUSY_TIMEOUT_MS", 300)  # the lock below fails writes fast
    db = tmp_path / "threads.db"
    ws = tmp_path / "ws"
    ws.mkdir()
    store = await Store.open(str(db))
    try:
        tid = await new_worker(store)
        started = ws / "started"
        model = scripted(tool_response(("bash", {"command": f"touch {started}; sleep 60"})))
        task = asyncio.create_task(
            run_thread(
                store,
                tid,
                model=model,
                tools=build_tools(TOOLS),
                workspace=ws,
                config=LoopConfig(lease_ttl_s=1.5),
            )
        )
        while not started.exists():
            assert not task.done(), task
            await asyncio.sleep(0.02)
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process holds the database
        try:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            other.execute("ROLLBACK")
            other.close()
        # the end could not be written; once the lease runs out nobody is running it
        await asyncio.sleep(1.6)
        assert (await store.get_thread(tid)).status == Status.INTERRUPTED
        # and a resume answers the call left open and goes on
        outcome = await run_thread(
            store,
            tid,
            model=scripted(submit()),
            tools=build_tools(TOOLS),
            workspace=ws,
        )
        assert outcome.status == Status.DONE
        answers = [
            b
            for m in await store.messages(tid)
            for b in m.content
            if isinstance(b, ToolResultBlock)
        ]
        assert answers and "interrupted" in str(answers[0].content)
    finally:
        await store.close()


async def test_a_run_without_a_message_leaves_an_ended_thread_as_it_ended(tmp_path: Path) -> None:
    """A message-less run (a crash resume, a stale Temporal attempt) on a thread that ended
    meanwhile: refused with the lease, in its transaction; the outcome is the thread as it
    ended, nothing run (the model is never called) and nothing written."""
    ws = tmp_path / "ws"
    ws.mkdir()
    store = await Store.open(str(tmp_path / "threads.db"))
    try:
        tid = await new_worker(store)
        first = await run_thread(
            store, tid, model=scripted(submit()), tools=build_tools(TOOLS), workspace=ws
        )
        assert first.status == Status.DONE and first.result is not None
        before = await store.get_thread(tid)
        count = len(await store.messages(tid))
        again = await run_thread(
            store, tid, model=scripted(), tools=build_tools(TOOLS), workspace=ws
        )  # a model with no reply left: calling it would fail the run
        assert (again.status, again.result, again.turns) == (Status.DONE, first.result, 0)
        after = await store.get_thread(tid)
        assert (after.status, after.version, after.lease_owner) == (
            Status.DONE, before.version, None,
        )  # fmt: skip
        assert len(await store.messages(tid)) == count
        # with a message it is a resume, as SPEC's `resume REF MESSAGE`: it runs again
        resumed = await run_thread(
            store, tid, model=scripted(submit()), tools=build_tools(TOOLS), workspace=ws,
            message="one more thing",
        )  # fmt: skip
        assert resumed.status == Status.DONE and resumed.turns == 1
    finally:
        await store.close()
