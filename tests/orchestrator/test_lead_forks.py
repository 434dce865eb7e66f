"""The lead's ``fork_thread`` and ``ask_thread`` on the job's own operations (``fork_point``,
``JobRuntime.ask``): a fork hangs under the lead, is stored ``queued`` and runs in the lead's
turn; a bad ref is the lead's tool failure, not the job's; a reader asked about a range is told
the range, as every door's ``ask`` is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator import JobSpec, Orchestrator
from store import Kind, Status, TextBlock, ToolResultBlock


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": args}]}


def submit(summary: str) -> dict[str, Any]:
    return call("submit_result", status="done", summary=summary)


async def test_the_leads_fork_and_ask_go_through_the_jobs_operations(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    lead_turns = [
        call("dispatch", tasks=[{"id": "a", "title": "a", "prompt": "p"}]),
        call("fork_thread", ref="{{ref:a}}", message="Retry it another way", at=1),
        call("fork_thread", ref="T-zzzzzzzzzzzz", message="Retry"),
        call("ask_thread", ref="{{ref:a}}#1-2", question="What did it do?"),
        {"text": "report"},
    ]
    rules = [
        {"match": "(?m)^Job: ", "turns": lead_turns},
        {"match": "(?m)^Task ", "turns": [submit("first")]},
        {"match": "(?m)^Retry it another way", "turns": [submit("forked")]},
        {"match": "(?m)^Thread to read: ", "turns": [{"text": "It submitted."}]},
    ]
    script.write_text(json.dumps({"rules": rules}))
    orch = await Orchestrator.open(str(tmp_path / "t.db"))
    try:
        spec = JobSpec(name="j", goal="g", workspace=str(ws), model=f"scripted:{script}")
        done = await orch.run_job(spec)
        assert done.status == Status.DONE, done
        lead = (await orch.store.resolve(done.lead)).thread
        said = []
        for msg in await orch.store.messages(lead.id):
            said += [b for b in msg.content if isinstance(b, ToolResultBlock)]
        dispatched, forked, refused, asked = said
        worker = (await orch.store.resolve(json.loads(dispatched.text)["ref"])).thread
        got = json.loads(forked.text)
        fork = (await orch.store.resolve(got["ref"])).thread
        assert got["summary"] == "forked" and got["forked_from"] == {"ref": worker.ref, "at": 1}
        assert (fork.kind, fork.parent_id, fork.job_id) == (Kind.WORKER, lead.id, lead.id)
        assert fork.status == Status.DONE and fork.forked_from is not None
        assert refused.is_error and "T-zzzzzzzzzzzz" in refused.text
        assert not asked.is_error and "It submitted." in asked.text
        [reader] = await orch.store.list_threads(kind=Kind.READER)
        [question] = await orch.store.messages(reader.id, start=1, end=1)
        assert isinstance(question.content[0], TextBlock)
        assert question.content[0].text.startswith(f"Thread to read: {worker.ref}#1-2\n")
    finally:
        await orch.close()
