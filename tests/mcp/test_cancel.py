"""MCP ``cancel``: a thread its user cancelled ends ``cancelled`` (SPEC §Words), not
``interrupted``: a worker stopped mid-tool, a queued one, and a whole job run by ``run_job``.
Every tool call under way is answered; a waiter never sees the thread ended before it is
marked; the thread stays resumable."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.mcp import Threadloom
from store import Status, Store, ToolResultBlock
from tests.e2e.conftest import answered_turns
from tests.mcp.conftest import SUBMIT, Serve, Setup, client, data, make_setup

LONG = {"tool_calls": [{"name": "bash", "input": {"command": "sleep 120"}}]}
RULES: list[dict[str, Any]] = [
    {"match": "(?m)^Task long", "turns": [LONG, SUBMIT]},
    {"match": "go on", "turns": [{"text": "went on"}]},
    {
        "match": "Job: long-job",
        "turns": [
            {
                "tool_calls": [
                    {
                        "name": "dispatch",
                        "input": {"tasks": [{"id": "long-l1", "title": "long one", "prompt": "p"}]},
                    }
                ]
            },
            {"text": "report"},
        ],
    },
    {"match": "(?m)^Task ", "turns": [SUBMIT]},
]


def _task(tid: str) -> dict[str, Any]:
    return {"id": tid, "title": f"{tid} task", "prompt": "p"}


async def _mid_tool(store: Store, thread_id: str) -> None:
    """Until the thread's bash call is stored (its run is then inside the tool)."""
    async with asyncio.timeout(60):
        while True:
            info = await store.get_thread(thread_id)
            if info.status == Status.RUNNING and info.head_seq >= 2:
                msgs = await store.messages(thread_id)
                if msgs[-1].role == "assistant" and msgs[-1].tool_uses():
                    return
            await asyncio.sleep(0.05)


async def test_cancel_marks_a_worker_stopped_mid_tool_cancelled_with_its_call_answered(
    serve: Serve, setup: Setup
) -> None:
    make_setup(setup.root, RULES)
    async with serve(max_parallel=1) as app, client(app) as c:
        out = data(
            await c.call_tool("dispatch", {"tasks": [_task("long"), _task("long2")], "wait_s": 0})
        )
        long_ref, queued_ref = (w["ref"] for w in out["workers"])
        store = app.orch.store
        long_id = (await store.resolve(long_ref)).thread.id
        await _mid_tool(store, long_id)
        waiter = asyncio.create_task(c.call_tool("wait", {"refs": [long_ref], "timeout_s": 50}))
        stopped = data(await c.call_tool("cancel", {"ref": long_ref}))
        assert stopped["cancelled"] == [{"ref": long_ref, "status": "cancelled"}]
        waited = data(await waiter)
        assert [w["status"] for w in waited["workers"]] == ["cancelled"]
        info = await store.get_thread(long_id)
        assert info.status == Status.CANCELLED
        msgs = await store.messages(long_id)
        answered_turns(msgs)
        (answer,) = msgs[-1].content
        assert isinstance(answer, ToolResultBlock) and answer.is_error
        assert "interrupted" in answer.text
        # the other worker had waited for the slot and runs now: cancelled by the job's ref
        await _mid_tool(store, (await store.resolve(queued_ref)).thread.id)
        job = data(await c.call_tool("cancel", {"ref": out["job"]}))
        assert {"ref": queued_ref, "status": "cancelled"} in job["cancelled"]
        answered_turns(await store.messages(queued_ref.removeprefix("T-")))
        assert (await store.resolve(out["job"])).thread.status == Status.IDLE  # the client's
        # cancelled, still resumable
        again = data(
            await c.call_tool("resume_thread", {"ref": long_ref, "message": "go on", "wait_s": 30})
        )
        assert again["status"] == "done"


async def test_cancel_of_a_job_run_by_run_job_marks_the_lead_and_its_workers_cancelled(
    serve: Serve, setup: Setup
) -> None:
    make_setup(setup.root, RULES)
    app: Threadloom
    async with serve() as app, client(app) as c:
        args = {"name": "long-job", "goal": "g", "wait_s": 0}
        started = data(await c.call_tool("run_job", args))
        store = app.orch.store
        lead = (await store.resolve(started["lead"])).thread
        async with asyncio.timeout(60):
            while not (workers := await store.children(lead.id)):
                await asyncio.sleep(0.05)
        await _mid_tool(store, workers[0].id)
        stopped = data(await c.call_tool("cancel", {"ref": started["job"]}))
        statuses = {w["ref"]: w["status"] for w in stopped["cancelled"]}
        assert statuses == {lead.ref: "cancelled", workers[0].ref: "cancelled"}
        for t in (lead.id, workers[0].id):
            assert (await store.get_thread(t)).status == Status.CANCELLED
        answered_turns(await store.messages(workers[0].id))
        lead_msgs = await store.messages(lead.id)
        answered_turns(lead_msgs, but_dispatch=True)
        assert lead_msgs[-1].role == "assistant"  # its dispatch: replayed when it is resumed


async def test_cancel_lists_threads_it_did_not_stop_as_not_running(
    serve: Serve, setup: Setup
) -> None:
    """A thread that had ended (done, or cancelled before) or never ran (the client's lead) is
    left as it was and listed under ``not_running``, never under ``cancelled``: the caller
    can tell that nothing was stopped."""
    make_setup(setup.root, RULES)
    async with serve() as app, client(app) as c:
        done = data(await c.call_tool("dispatch", {"tasks": [_task("quick")], "wait_s": 30}))
        (worker,) = done["workers"]
        assert worker["status"] == "done"
        left = data(await c.call_tool("cancel", {"ref": worker["ref"]}))
        assert left == {"cancelled": [], "not_running": [{"ref": worker["ref"], "status": "done"}]}
        long = data(await c.call_tool("dispatch", {"tasks": [_task("long")], "wait_s": 0}))
        long_ref = long["workers"][0]["ref"]
        first = data(await c.call_tool("cancel", {"ref": long_ref}))
        assert first == {"cancelled": [{"ref": long_ref, "status": "cancelled"}], "not_running": []}
        again = data(await c.call_tool("cancel", {"ref": long_ref}))
        assert again == {"cancelled": [], "not_running": [{"ref": long_ref, "status": "cancelled"}]}
        job = data(await c.call_tool("cancel", {"ref": done["job"]}))
        assert job == {"cancelled": [], "not_running": [{"ref": done["job"], "status": "idle"}]}
        store = app.orch.store
        assert (await store.resolve(worker["ref"])).thread.status == Status.DONE
