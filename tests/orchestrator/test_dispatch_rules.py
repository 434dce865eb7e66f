"""What every dispatch is held to, the lead's own included (``JobRuntime.dispatch``,
``runtime.threads.spawn_request``): a task id names one worker in its job, so an id an earlier
dispatch used is refused; a task without one gets the next ``task-N`` the job has not used; and
a task whose model cannot be built is refused before any worker is stored — never a worker left
queued that no run can start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator import JobSpec, Orchestrator
from store import Kind, Status, ToolResultBlock


def dispatching(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "dispatch", "input": {"tasks": list(tasks)}}]}


SUBMIT = {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}


async def lead_run(tmp_path: Path, *turns: dict[str, Any]) -> tuple[Orchestrator, list[str]]:
    """A job whose lead takes ``turns`` (then reports); the dispatch results it was given."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    rules = [
        {"match": "(?m)^Job: ", "turns": [*turns, {"text": "report"}]},
        {"match": "(?m)^Task ", "turns": [SUBMIT]},
    ]
    script.write_text(json.dumps({"rules": rules}))
    orch = await Orchestrator.open(str(tmp_path / "t.db"))
    spec = JobSpec(name="j", goal="g", workspace=str(ws), model=f"scripted:{script}")
    done = await orch.run_job(spec)
    assert done.status == Status.DONE, done
    said = []
    for msg in await orch.store.messages((await orch.store.resolve(done.lead)).thread.id):
        said += [b.text for b in msg.content if isinstance(b, ToolResultBlock)]
    return orch, said


async def test_the_leads_dispatch_refuses_a_task_id_an_earlier_dispatch_used(
    tmp_path: Path,
) -> None:
    orch, said = await lead_run(
        tmp_path,
        dispatching({"id": "a", "title": "a", "prompt": "p"}, {"title": "x", "prompt": "p"}),
        dispatching(
            {"id": "b", "title": "b", "prompt": "p"}, {"id": "a", "title": "a", "prompt": "p"}
        ),
        dispatching({"title": "y", "prompt": "p"}, {"title": "z", "prompt": "p"}),
    )
    try:
        assert "task id 'a' is used in this job already" in said[1]
        workers = await orch.store.list_threads(kind=Kind.WORKER, oldest_first=True)
        # the refused dispatch stored nothing; the ids without one continue the job's count
        assert [(w.task or {})["id"] for w in workers] == ["a", "task-2", "task-1", "task-3"]
    finally:
        await orch.close()


async def test_a_task_whose_model_cannot_be_built_is_refused_and_no_worker_is_left_queued(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no-such-script.json"
    orch, said = await lead_run(
        tmp_path,
        dispatching({"id": "a", "title": "a", "prompt": "p", "model": f"scripted:{missing}"}),
    )
    try:
        assert str(missing) in said[0]
        assert await orch.store.list_threads(kind=Kind.WORKER) == []
    finally:
        await orch.close()
