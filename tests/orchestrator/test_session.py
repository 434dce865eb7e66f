"""The job session (``orchestrator.session``): every running operation returns a handle on work
that outlives the call — waited for, or cancelled (marked ``cancelled``, resumable)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from orchestrator import JobOutcome, Orchestrator, Run, load_job
from store import Kind, Status

SUBMIT = {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}
LONG = {"tool_calls": [{"name": "bash", "input": {"command": "sleep 120"}}]}
RULES = [
    {"match": "Job: api", "turns": [{"text": "report"}]},
    {"match": "(?m)^Task long", "turns": [LONG, SUBMIT]},
    {"match": "(?m)^Task ", "turns": [SUBMIT]},
    {"match": "Question", "turns": [{"text": "it said ok"}]},
]


async def test_runs_are_handles_to_wait_on_or_cancel(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "script.json").write_text(json.dumps({"rules": RULES}))
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nname = "api"\ngoal = "g"\nworkspace = "ws"\nmodel = "scripted:script.json"\n'
    )
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch, orch.session() as s:
        started = await s.start_job(load_job(job))
        assert started.thread.kind == Kind.LEAD  # the lead is stored before the call returns
        out = await started.wait()
        assert isinstance(out, JobOutcome) and out.report == "report"
        quick, slow = await s.dispatch(
            out.job, [{"id": "quick", "prompt": "p"}, {"id": "long", "prompt": "p"}]
        )
        assert (await quick.wait()).status == Status.DONE
        asked = await s.ask(None, quick.ref, "what did it say?")
        assert isinstance(asked, Run) and (await asked.wait()).answer == "it said ok"
        while (await orch.store.get_thread(slow.thread.id)).head_seq < 2:
            await asyncio.sleep(0.05)  # until its bash call is under way
        (stopped,) = await slow.cancel()
        assert stopped.status == Status.CANCELLED and slow.task.cancelled()
        waited = await s.wait([quick.ref, slow.ref], timeout_s=0)
        assert not waited.pending
