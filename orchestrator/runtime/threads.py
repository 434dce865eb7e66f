"""Creating a job's threads: the lead (with its first ``dispatch`` when the job file lists
tasks), one worker per dispatched task, a reader per ``ask_thread`` — what each is told, which
tools and model it gets. Running them is ``job.JobRuntime``'s part.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from store import (
    Kind,
    Message,
    NewMessage,
    NewWorker,
    SpawnRequest,
    Status,
    Store,
    TextBlock,
    ThreadInfo,
    ThreadRef,
    ToolResultBlock,
    ToolUseBlock,
    format_ref,
    new_id,
)
from workers import (
    DEFAULT_WORKER_TOOLS,
    ORCHESTRATOR_TOOL_ID_PREFIX,
    SUBMIT_RESULT,
    HandOffRefused,
    worker_system_prompt,
)
from workers.providers import parse_model_spec

from ..errors import DispatchError, UsageError
from ..isolation import Isolation
from ..jobs import JobSpec, TaskInput, TaskSpec
from .prompts import imported_system_prompt, lead_system_prompt, reader_system_prompt

LEAD_TOOLS = (
    "dispatch",
    "read_thread",
    "ask_thread",
    "search_threads",
    "resume_thread",
    "fork_thread",
)
MERGE_TOOL = "merge"  # lead tool of worktree jobs only
READER_TOOLS = ("read_thread",)


def task_message(task_id: str, title: str, prompt: str) -> str:
    """A worker's first message (the scripted demo matches on its first line)."""
    return f"Task {task_id}: {title}\n\n{prompt}"


def lead_message(job: JobSpec) -> str:
    lines = [f"Job: {job.name}", f"Goal: {job.goal}", f"Workspace: {job.workspace_path}"]
    if job.isolation == "worktree":
        lines.append(
            "Isolation: each worker works in its own git worktree and branch; its result names"
            " the branch and diff stat. Use merge to combine branches into the job branch."
        )
    if job.tasks:
        lines.append(
            f"The job file defines {len(job.tasks)} tasks; they are being dispatched now."
            " Review the results, read transcripts where you need to, then write the report."
        )
    else:
        lines.append(
            "Plan the work, dispatch it to workers (independent tasks in parallel), review the"
            " results, then write the report."
        )
    return "\n".join(lines)


def worker_prompt(
    job: JobSpec, *, thread_ref: str, workspace: Path, tools: Sequence[str], spec: str
) -> str:
    """A worker's system prompt (it names the worker's own ref, so a successor gets its own)."""
    return worker_system_prompt(
        thread_ref=thread_ref,
        workspace=workspace,
        tools=tools,
        notes_from=job.workspace_path,
        model=spec,
        tool_calls=job.worker_tool_calls,
    )


async def spawn_request(
    store: Store,
    job: JobSpec,
    *,
    job_id: str,
    lead_id: str,
    isolation: Isolation | None,
    tool_use_id: str,
    tasks: Sequence[TaskInput],
) -> SpawnRequest:
    """One worker per task under ``lead_id``, keyed by ``tool_use_id`` and the task's index
    (``Dispatches.spawn`` stores it once: a replay finds its rows). ``isolation``: the job's
    worktree isolation, which places each worker.

    A task id names its worker in the job (the dispatch row, the branch, ``{{ref:ID}}``): an
    id another dispatch of the job used is refused (``DispatchError``, nothing stored), and a
    task without one is ``task-N`` (N its place in the dispatch), or the next N the job has
    not used. A replay of this dispatch (the same ``tool_use_id``) finds the same ids, and its
    rows."""
    earlier = {
        d.task_key
        for d in await store.dispatches.of_job(job_id)
        if (d.lead_id, d.tool_use_id) != (lead_id, tool_use_id) and d.task_key
    }
    given = [t.id for t in tasks if t.id]
    reused = next((i for i in given if i in earlier), None)
    if reused is not None:
        raise DispatchError(
            f"task id {reused!r} is used in this job already: give each task its own id"
        )
    taken = earlier | set(given)
    keys = []
    for i, t in enumerate(tasks):
        key, n = t.id, i + 1
        while not key:
            key = f"task-{n}" if f"task-{n}" not in taken else None
            n += 1
        taken.add(key)
        keys.append(key)
    workers = []
    for i, t in enumerate(tasks):
        task_id = keys[i]
        tools = list(t.tools or job.worker.tools)
        spec = job.worker_spec(t.model)
        parse_model_spec(spec)
        tid = new_id()
        workspace = job.workspace_path
        placement: dict[str, Any] = {"workspace": str(workspace)}
        if isolation is not None:
            tree = await isolation.for_new_worker(tid, task_id)
            workspace = tree.workspace
            placement = tree.task_fields()
        prompt = worker_prompt(
            job, thread_ref=format_ref(tid), workspace=workspace, tools=tools, spec=spec
        )
        task = {"id": task_id, "title": t.title, "prompt": t.prompt, **placement}
        task |= {"max_turns": job.worker.max_turns, "timeout_s": job.worker.timeout_s}
        first = NewMessage.user(task_message(task_id, t.title, t.prompt))
        workers.append(
            NewWorker(
                index=i, key=task_id, title=t.title, task=task, system_prompt=prompt,
                tools=(*tools, SUBMIT_RESULT), model=spec, messages=(first,), id=tid,
            )
        )  # fmt: skip
    return SpawnRequest(lead_id, tool_use_id, tuple(workers))


def check_message(message: str | None) -> None:
    """A message given to a thread says something: an empty one would be stored for good."""
    if message is not None and not message.strip():
        raise UsageError("the message is empty: say what the thread should do next")


async def fork_point(store: Store, ref: str, at: int | None) -> tuple[ThreadInfo, int | None]:
    """The thread ``ref`` names and where a fork of it branches (every fork: the lead's
    ``fork_thread``, every door's): after message ``at``, else after the ref's anchor
    (``T-…#5``, ``T-…#3-5``: after 5), else at its end (None). A point past the end is the
    store's to refuse when it forks (``ForkPointError``)."""
    parsed = ThreadRef.parse(ref)
    source = (await store.resolve(parsed.thread)).thread
    return source, at if at is not None else parsed.end if parsed.has_anchor else None


async def create_reader(
    store: Store,
    job: JobSpec,
    *,
    lead_id: str,
    target: ThreadInfo,
    question: str,
    model: str | None = None,
    focus: str | None = None,
) -> ThreadInfo:
    """A reader thread of the job: a fresh context that answers ``question`` about ``target``
    (SPEC ``ask_thread``, ``ask``), on ``model`` (default: the workers' model). ``focus``: the
    ref to read, when the question is about a range of the thread (``T-…#3-9``)."""
    spec = model or job.worker_spec()
    return await store.create_thread(
        kind=Kind.READER,
        title=f"reads {target.ref}: {question[:60]}",
        parent_id=lead_id,
        task={"reader_of": target.id, "question": question},
        system_prompt=reader_system_prompt(target.ref),
        tools=list(READER_TOOLS),
        model=spec,
        status=Status.QUEUED,
        messages=[NewMessage.user(f"Thread to read: {focus or target.ref}\nQuestion: {question}")],
    )


async def create_lead(
    store: Store,
    job: JobSpec,
    *,
    isolation: dict[str, Any] | None = None,
    status: Status = Status.QUEUED,
) -> ThreadInfo:
    """The lead thread of a new job. With ``[[task]]`` entries the lead's first turn — the
    ``dispatch`` of exactly those tasks — is written here; running the lead then carries it out
    (dispatch is replay-safe, so a crash during it is resumed, not repeated). ``isolation`` is
    the worktree job's base (``isolation.JobBase.to_json()``); with it the lead gets ``merge``.
    ``status``: ``queued`` (it is about to run) unless the caller is the lead itself (an MCP
    client: ``idle``)."""
    messages = [NewMessage.user(lead_message(job))]
    if job.tasks:
        messages.append(first_dispatch(job.tasks))
    task: dict[str, Any] = {"job": job.model_dump(mode="json")}
    if isolation is not None:
        task["isolation"] = isolation
    return await store.create_thread(
        kind=Kind.LEAD,
        title=job.name,
        task=task,
        system_prompt=lead_system_prompt(),
        tools=lead_tool_names(isolation is not None),
        model=job.lead_model,
        status=status,
        messages=messages,
    )


def lead_tool_names(isolation: bool) -> list[str]:
    """The tools a new job's lead is given (``merge`` only with worktree isolation)."""
    return [*LEAD_TOOLS, *((MERGE_TOOL,) if isolation else ())]


def first_dispatch(tasks: Sequence[TaskSpec]) -> NewMessage:
    payload = [t.model_dump(exclude_none=True) for t in tasks]
    return NewMessage(
        role="assistant",
        content=[
            TextBlock(text=f"Dispatching the job's {len(tasks)} tasks."),
            ToolUseBlock(
                id=f"{ORCHESTRATOR_TOOL_ID_PREFIX}{new_id()}",
                name="dispatch",
                input={"tasks": payload},
            ),
        ],
    )


READ_OWN = "read_thread"
"""The tool a worker's successor gets beside its own: to read its predecessors (only them)."""
LAST_TURN_CHARS = 4_000
"""How much of a predecessor's last turn (and what came back) a successor worker is shown."""


def worker_successor(
    job: JobSpec,
    info: ThreadInfo,
    history: Sequence[Message],
    new_id_: str,
    reason: str,
    *,
    shown_chars: int = LAST_TURN_CHARS,
) -> tuple[dict[str, Any], NewMessage]:
    """The successor of a worker whose context is full (SPEC "Jobs larger than one context"):
    its values for ``Store.hand_off`` (its own system prompt, its predecessor's tools and
    ``read_thread``) and its first message — its task as first given, the refs of its
    predecessor's turns, and that thread's last turn with what came back (each at most
    ``shown_chars``)."""
    task = info.task or {}
    own = [m for m in history if m.thread_id == info.id]
    # the task's turns are counted across its chain: a worker that keeps filling its context
    # hands off a bounded number of times
    left = int(task.get("max_turns", job.worker.max_turns)) - sum(
        m.role == "assistant" for m in own
    )
    if left < 1:
        raise HandOffRefused(f"the task's max_turns are spent across {info.ref}'s chain")
    tools = [t for t in info.tools if t not in (SUBMIT_RESULT, READ_OWN)]
    ref, new_ref = info.ref, format_ref(new_id_)
    workspace = Path(str(task.get("workspace") or job.workspace_path))
    values = {
        "id": new_id_,
        "system_prompt": worker_prompt(
            job, thread_ref=new_ref, workspace=workspace, tools=tools, spec=info.model or ""
        ),
        "tools": [*tools, READ_OWN, SUBMIT_RESULT],
        "task": {**task, "max_turns": left},
    }
    first, last = (own[0].seq, own[-1].seq) if own else (1, info.head_seq)
    lines = [
        task_message(
            str(task.get("id") or "task"),
            str(task.get("title") or info.title),
            str(task.get("prompt") or ""),
        ),
        "",
        "---",
        f"You continue the work of {ref} on this task: {reason}, so it handed off to you."
        " Nothing was summarized: its whole transcript stays readable with read_thread"
        f" ({ref}#{first}-{last}"
        + (f"; it continued {format_ref(info.continues)}" if info.continues else "")
        + "). The workspace holds every change it made.",
    ]
    turn = next((m for m in reversed(history) if m.role == "assistant"), None)
    if turn is not None:
        head = f"Its last turn ({format_ref(turn.thread_id, turn.seq)}):"
        lines += ["", head, _shown(turn, shown_chars)]
        after = [m for m in history if m.seq > turn.seq and m.role == "user"]
        if after:
            m = after[0]
            head = f"What came back ({format_ref(m.thread_id, m.seq)}):"
            lines += ["", head, _shown(m, shown_chars)]
    lines += ["", "Carry on from there, and end with submit_result as before."]
    return values, NewMessage.user("\n".join(lines))


def _shown(msg: Message, limit: int) -> str:
    """One message as a successor reads it: text, calls and results, bounded."""
    parts: list[str] = []
    for b in msg.content:
        if isinstance(b, TextBlock):
            parts.append(b.text)
        elif isinstance(b, ToolUseBlock):
            parts.append(f"{b.name}({json.dumps(b.input, ensure_ascii=False)})")
        elif isinstance(b, ToolResultBlock):
            parts.append(("error: " if b.is_error else "") + b.text)
    text = "\n".join(parts)
    return text if len(text) <= limit else text[:limit] + " […]"


def imported(info: ThreadInfo) -> bool:
    """A thread another agent wrote (``import``: its task names its ``source``), or a fork of
    one, outside any job threadloom started: it runs as a worker does, whatever its kind."""
    task = info.task or {}
    return bool(task.get("source")) and "job" not in task


async def ready_imported(store: Store, info: ThreadInfo, job: JobSpec) -> ThreadInfo:
    """``info``, ready to run when it is an imported thread that never ran here: its tools
    (threadloom's worker tools, or those it was given), a system prompt that says where its
    history comes from, and its workspace (the job's: the directory it is first run in) are
    stored on it, so every later run — a resume, a fork, which copies them — sends the same
    prefix and works in the same place. The transcript is not touched: its calls of the
    source's tools are seen under threadloom's names by the request (``workers._foreign``)."""
    task = info.task or {}
    if not imported(info) or task.get("workspace"):
        return info
    tools = [t for t in info.tools if t != SUBMIT_RESULT] or list(DEFAULT_WORKER_TOOLS)
    workspace = job.workspace_path
    prompt = imported_system_prompt(
        thread_ref=info.ref, source=task["source"], workspace=workspace, tools=tools
    )
    return await store.update_thread(
        info.id,
        system_prompt=prompt,
        tools=tools,
        task={**task, "workspace": str(workspace)},
    )


def job_of(lead: ThreadInfo) -> JobSpec:
    """The job spec a lead thread was started with (stored on it)."""
    data = (lead.task or {}).get("job")
    if not isinstance(data, dict):
        raise ValueError(f"{lead.ref} carries no job spec")
    return JobSpec.model_validate(data)
