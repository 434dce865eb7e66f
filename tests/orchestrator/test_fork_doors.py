"""One fork operation (``JobRuntime.fork``) behind every door: the lead's ``fork_thread`` and
``JobSession.fork`` (CLI ``fork``, MCP ``fork_thread``, ``Orchestrator.fork``) store the same
transcript for the same fork — at an ordinary point, and at the end of a thread stopped while a
tool ran (its newest message a ``tool_use`` nobody answered) — with the message stored in the
fork's own write, never left for a run to add."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import JobOutcome, JobSpec, Orchestrator
from orchestrator.errors import UsageError
from orchestrator.runtime import create_lead
from store import (
    ForkPointError,
    Kind,
    Message,
    NewMessage,
    Status,
    TextBlock,
    ThreadInfo,
    ToolResultBlock,
    ToolUseBlock,
)

MESSAGE = "Try it another way"
REPLY = "done it another way"


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": args}]}


class Job:
    """A job whose lead is stored but not yet run, a worker of it written as a run left it,
    and the script both are answered by (written once the worker's ref is known)."""

    def __init__(self, tmp_path: Path, orch: Orchestrator) -> None:
        self.tmp = tmp_path
        self.orch = orch
        self.ws = tmp_path / "ws"
        self.ws.mkdir(exist_ok=True)
        self.script = tmp_path / "script.json"
        self.spec = JobSpec(name="j", goal="g", workspace=str(self.ws), model=self.model)

    @property
    def model(self) -> str:
        return f"scripted:{self.script}"

    async def lead(self) -> ThreadInfo:
        return await create_lead(self.orch.store, self.spec)

    async def worker(
        self, lead: ThreadInfo, messages: list[NewMessage], *, model: str | None = None
    ) -> ThreadInfo:
        task = {"id": "a", "title": "a", "prompt": "p", "workspace": str(self.ws)}
        return await self.orch.store.create_thread(
            kind=Kind.WORKER,
            title="a",
            parent_id=lead.id,
            job_id=lead.id,
            task=task,
            system_prompt="You are a worker.",
            tools=["bash", "submit_result"],
            model=model or self.model,
            status=Status.INTERRUPTED,
            messages=messages,
        )

    def write_script(self, lead_turns: list[dict[str, Any]]) -> None:
        rules = [
            {"match": "(?m)^Job: ", "turns": lead_turns},
            {"match": f"(?m)^{MESSAGE}", "turns": [{"text": REPLY}]},
        ]
        self.script.write_text(json.dumps({"rules": rules}))

    async def run_lead(self, lead: ThreadInfo) -> list[ToolResultBlock]:
        """Run the lead to its end (the job's own loop and tools); what its tools answered."""
        rt = self.orch.runtime(self.spec, lead.id)
        rt.lead = lead
        try:
            outcome = await rt.run(lead)
        finally:
            await rt.aclose()
        assert outcome.status == Status.DONE, outcome
        said: list[ToolResultBlock] = []
        for msg in await self.orch.store.messages(lead.id):
            said += [b for b in msg.content if isinstance(b, ToolResultBlock)]
        return said


def mid_turn() -> list[NewMessage]:
    """A worker stopped while its bash ran: its newest message is the unanswered call."""
    return [
        NewMessage.user("Task a: p"),
        NewMessage(
            role="assistant",
            content=[
                TextBlock(text="Running it."),
                ToolUseBlock(id="toolu_open", name="bash", input={"command": "sleep 600"}),
            ],
        ),
    ]


def answered() -> list[NewMessage]:
    """A worker whose call was answered, then spoke again: every point but #2 is valid."""
    return [
        NewMessage.user("Task a: p"),
        NewMessage(
            role="assistant",
            content=[ToolUseBlock(id="toolu_1", name="bash", input={"command": "echo hi"})],
        ),
        NewMessage(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="hi\n")]),
        NewMessage(role="assistant", content=[TextBlock(text="It printed hi.")]),
    ]


def transcript(msgs: list[Message], source: ThreadInfo) -> list[tuple[Any, ...]]:
    """What a fork shows, as stored: each message's number, role, content and whether it is
    the source's (inherited) or the fork's own — without the times and the fork's id."""
    return [
        (m.seq, m.role, [b.model_dump(mode="json") for b in m.content], m.thread_id == source.id)
        for m in msgs
    ]


async def both_doors(
    tmp_path: Path, messages: list[NewMessage], at: int | None
) -> tuple[ThreadInfo, ThreadInfo, ThreadInfo, dict[str, Any]]:
    """The source, the lead's fork of it, and the session's (``Orchestrator.fork``), both run
    to their end; and what the lead's tool answered."""
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        job = Job(tmp_path, orch)
        lead = await job.lead()
        source = await job.worker(lead, messages)
        job.write_script(
            [call("fork_thread", ref=source.ref, message=MESSAGE, at=at), {"text": "r"}]
        )
        [said] = await job.run_lead(lead)
        assert not said.is_error, said.text
        got = json.loads(said.text)
        by_lead = (await orch.store.resolve(got["ref"])).thread
        ref = source.ref if at is None else f"{source.ref}#{at}"
        ran = await orch.fork(ref, MESSAGE)
        assert isinstance(ran, JobOutcome)
        by_session = (await orch.store.resolve(ran.ref)).thread
        assert by_lead.id != by_session.id
        left = await orch.store.get_thread(source.id)
        assert (left.head_seq, left.status) == (len(messages), Status.INTERRUPTED)  # untouched
        lead_msgs = transcript(await orch.store.messages(by_lead.id), source)
        session_msgs = transcript(await orch.store.messages(by_session.id), source)
        assert lead_msgs == session_msgs
        return source, by_lead, by_session, got


async def test_both_doors_store_the_same_fork_of_a_thread_stopped_mid_tool_call(
    tmp_path: Path,
) -> None:
    """The default point of a thread whose newest message is an unanswered call is the turn
    boundary before it: the fork holds no open call, so nothing is answered for it (no
    synthetic result in either transcript); the message follows the task, then the reply."""
    source, by_lead, by_session, got = await both_doors(tmp_path, mid_turn(), None)
    for fork in (by_lead, by_session):
        assert fork.forked_from is not None and fork.forked_from.at == 1
        assert fork.status == Status.DONE and fork.head_seq == 3
    assert got["forked_from"] == {"ref": source.ref, "at": 1}
    assert (by_lead.parent_id, by_session.parent_id) == (source.job_id, None)
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        msgs = await orch.store.messages(by_lead.id)
    assert [m.role for m in msgs] == ["user", "user", "assistant"]
    assert not any(isinstance(b, ToolResultBlock | ToolUseBlock) for m in msgs for b in m.content)
    assert msgs[1].content == [TextBlock(text=MESSAGE)]
    assert msgs[2].content == [TextBlock(text=REPLY)]


async def test_both_doors_store_the_same_fork_at_an_ordinary_point(tmp_path: Path) -> None:
    source, by_lead, by_session, got = await both_doors(tmp_path, answered(), 3)
    for fork in (by_lead, by_session):
        assert fork.forked_from is not None and fork.forked_from.at == 3
        assert fork.status == Status.DONE and fork.head_seq == 5
    assert got["forked_from"] == {"ref": source.ref, "at": 3}
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        msgs = await orch.store.messages(by_session.id)
    assert [m.thread_id for m in msgs[:3]] == [source.id] * 3  # referenced, not copied
    assert [m.content for m in msgs[3:]] == [[TextBlock(text=MESSAGE)], [TextBlock(text=REPLY)]]


async def test_a_point_at_an_unanswered_call_is_refused_by_every_door_with_nothing_stored(
    tmp_path: Path,
) -> None:
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        job = Job(tmp_path, orch)
        lead = await job.lead()
        source = await job.worker(lead, mid_turn())
        job.write_script(
            [call("fork_thread", ref=source.ref, message=MESSAGE, at=2), {"text": "r"}]
        )
        [said] = await job.run_lead(lead)
        with pytest.raises(ForkPointError) as refused:
            await orch.fork(f"{source.ref}#2", MESSAGE, run=False)
        assert said.is_error and said.text == f"fork_thread: {refused.value}"
        assert "mid-turn" in said.text and "nearest valid point is #1" in said.text
        assert await orch.store.forks(source.id) == []


async def test_the_fork_stores_its_message_itself_so_an_unrun_fork_is_whole(
    tmp_path: Path,
) -> None:
    """``JobRuntime.fork`` with the lead's choices (under it, queued): the message is in the
    fork's own write, after the point, before any run; the run the lead then starts adds only
    the reply. Blank messages and threads that are not this job's workers are refused by the
    lead's door with nothing stored."""
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        job = Job(tmp_path, orch)
        lead = await job.lead()
        source = await job.worker(lead, mid_turn())
        job.write_script([{"text": "r"}])
        rt = orch.runtime(job.spec, lead.id)
        try:
            fork = await rt.fork(
                source, None, MESSAGE, parent_id=lead.id, status=Status.QUEUED, worker_only=True
            )
            assert (fork.status, fork.head_seq, fork.parent_id) == (Status.QUEUED, 2, lead.id)
            [stored] = await orch.store.messages(fork.id, start=2)
            assert stored.thread_id == fork.id and stored.content == [TextBlock(text=MESSAGE)]
            outcome = await rt.run_worker(fork)
            assert outcome.status == Status.DONE and outcome.final_text == REPLY
            assert (await orch.store.get_thread(fork.id)).head_seq == 3
            with pytest.raises(UsageError, match="message is empty"):
                await rt.fork(source, None, "  ", parent_id=lead.id, status=Status.QUEUED)
            with pytest.raises(UsageError, match="is not a worker of this job"):
                await rt.fork(
                    lead, None, MESSAGE, parent_id=lead.id, status=Status.QUEUED, worker_only=True
                )
        finally:
            await rt.aclose()
        assert [f.id for f in await orch.store.forks(source.id)] == [fork.id]
        assert await orch.store.forks(lead.id) == []


async def test_the_leads_fork_of_a_worker_whose_model_cannot_be_built_stores_nothing(
    tmp_path: Path,
) -> None:
    """As ``dispatch`` does: the model the fork would run on is built first, so the lead hears
    why in its tool's result, and no fork is left queued that no run can start."""
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        job = Job(tmp_path, orch)
        lead = await job.lead()
        gone = f"scripted:{tmp_path / 'gone.json'}"
        source = await job.worker(lead, answered(), model=gone)
        job.write_script([call("fork_thread", ref=source.ref, message=MESSAGE), {"text": "r"}])
        [said] = await job.run_lead(lead)
        assert said.is_error and "gone.json" in said.text
        assert await orch.store.forks(source.id) == []
