"""The lead's tools (SPEC §Tools — lead tools): dispatch, read_thread, ask_thread,
search_threads, resume_thread, fork_thread — and the reader's read-only ``read_thread``.

They are ordinary ``workers.tools.Tool``s bound to the running job (``Runtime``, which
``job.JobRuntime`` is — a protocol, so that this module does not import the one that runs it):
the lead is a thread run by the same loop as any worker, only its toolset differs. What comes
back to the lead is always bounded: distilled results with refs, pages of at most
``max_chars``, answers with checked citations — never a raw transcript.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Coroutine, Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeVar, cast

from pydantic import Field

from store import (
    REF_IN_TEXT,
    Result,
    Status,
    Store,
    StoreError,
    ThreadInfo,
    format_ref,
)
from store.errors import RefError
from workers import RunOutcome, ScriptError, prefix_tokens
from workers.tools import Tool, ToolContext, ToolFailure, ToolInput, ToolOutput

from ..errors import ReadError, UsageError, WorktreeError
from ..isolation import merge_refs
from ..jobs import TaskInput
from ..outcomes import AskOutcome
from ..views import claim_lines, marked_snippet
from .pages import (
    DEFAULT_MAX_CHARS,
    READ_THREAD_DESCRIPTION,
    REF_DESCRIPTION,
    read_page,
    split_offset,
)
from .prompts import lead_system_prompt
from .threads import fork_point

_CITATION = REF_IN_TEXT
MAX_TASKS_PER_DISPATCH = 1000  # a job file may list many tasks; the lead gets them all at once


def result_payload(info: ThreadInfo, outcome: RunOutcome | None = None) -> dict[str, Any]:
    """What the lead receives for one worker: its distilled result and ref, never its
    transcript, with the result's check as one line per claim (``✓``/``?``/``✗``, the reason,
    the refs)."""
    result: Result | None = outcome.result if outcome is not None else info.result
    status = outcome.status if outcome is not None else info.status
    payload: dict[str, Any] = {
        "ref": info.ref,
        "task": (info.task or {}).get("id"),
        "thread_status": str(status),
    }
    if result is not None:
        dumped = result.model_dump(mode="json", exclude_none=True, exclude={"ref", "task", "check"})
        payload.update({k: v for k, v in dumped.items() if v not in ([], 0)})
        if result.check is not None:
            # each claim's verdict in one line, so the lead knows what to re-check
            payload["check"] = {
                "verdict": result.check.verdict,
                "rounds": result.check.rounds,
                "claims": claim_lines(result.check),
            }
    else:
        payload.update({"status": "failed", "summary": "no result was stored"})
    error = outcome.error if outcome is not None else info.error
    if error:
        payload["error"] = error
    return payload


class Runtime(Protocol):
    """What the lead's tools need of the running job (``job.JobRuntime``)."""

    @property
    def store(self) -> Store: ...

    @property
    def lead_id(self) -> str: ...

    @property
    def current_lead(self) -> str: ...

    def own_worker(self, info: ThreadInfo) -> ThreadInfo: ...

    async def dispatch(
        self, tasks: Sequence[TaskInput], *, key: str
    ) -> list[tuple[ThreadInfo, Coroutine[Any, Any, RunOutcome]]]: ...

    async def ask(
        self, ref: str, question: str, *, model: str | None = None
    ) -> tuple[ThreadInfo, Coroutine[Any, Any, AskOutcome]]: ...

    async def fork(
        self,
        source: ThreadInfo,
        point: int | None,
        message: str | None = None,
        *,
        parent_id: str | None,
        status: Status,
        model: str | None = None,
        build: bool = True,
        worker_only: bool = False,
    ) -> ThreadInfo: ...

    async def run_worker(
        self,
        info: ThreadInfo,
        *,
        model_spec: str | None = None,
        message: str | None = None,
        refuse_held: bool = False,
    ) -> RunOutcome: ...


InputT = TypeVar("InputT", bound=ToolInput)


class JobTool(Tool[InputT]):
    """A lead tool: bound to the running job's runtime."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt


class DispatchInput(ToolInput):
    tasks: list[TaskInput] = Field(min_length=1, max_length=MAX_TASKS_PER_DISPATCH)


class DispatchTool(JobTool[DispatchInput]):
    name: ClassVar[str] = "dispatch"
    description: ClassVar[str] = (
        "Run tasks on fresh-context workers in parallel (up to the job's max_parallel at once)."
        " Returns one distilled result per task, with the ref of the worker's thread."
    )
    Input = DispatchInput
    replay_safe: ClassVar[bool] = True  # dispatch rows make a replay reuse its workers

    async def run(self, args: DispatchInput, ctx: ToolContext) -> ToolOutput:
        try:  # keyed by this call: a replayed lead turn reuses its workers
            work = await self.rt.dispatch(args.tasks, key=ctx.tool_use_id)
        except (ValueError, ScriptError) as err:  # a task refused, a model that cannot be built
            raise ToolFailure(str(err)) from None
        async with asyncio.TaskGroup() as tg:  # run inside the lead's turn: they stop with it
            runs = [tg.create_task(run) for _, run in work]
        # the outcome carries the status, result and error as stored: no read back
        lines = (result_payload(info, r.result()) for (info, _), r in zip(work, runs, strict=True))
        return ToolOutput("\n".join(json.dumps(p, ensure_ascii=False) for p in lines))


class ReadThreadInput(ToolInput):
    ref: str = Field(description=REF_DESCRIPTION)
    mode: Literal["messages", "overview", "tool_outputs", "grep"] = Field(
        "overview",
        description="overview: one line per message; messages: the messages; tool_outputs:"
        " raw tool outputs; grep: lines matching pattern",
    )
    pattern: str | None = Field(None, description="Regular expression, for mode grep")
    max_chars: int = Field(
        DEFAULT_MAX_CHARS,
        gt=0,
        description="Page size in characters (clamped to 500-100000; the page says so)",
    )


class ReadThreadTool(Tool[ReadThreadInput]):
    name: ClassVar[str] = "read_thread"
    description: ClassVar[str] = READ_THREAD_DESCRIPTION
    Input = ReadThreadInput
    replay_safe: ClassVar[bool] = True

    def __init__(self, rt: Runtime, *, only: str | Sequence[str] | None = None) -> None:
        """``only``: the thread (or threads) this tool may read — a reader's target, a
        successor worker's predecessors — else any."""
        self.rt = rt
        self.only = (only,) if isinstance(only, str) else None if only is None else tuple(only)

    async def run(self, args: ReadThreadInput, ctx: ToolContext) -> ToolOutput:
        try:
            if self.only is not None:
                # a page ref may carry an offset into one huge message (T-…#3-@99700)
                resolved = await self.rt.store.resolve(split_offset(args.ref)[0])
                if resolved.thread.id not in self.only:
                    allowed = ", ".join(format_ref(t) for t in self.only)
                    raise ToolFailure(f"this thread may only read {allowed}")
            page = await read_page(
                self.rt.store,
                args.ref,
                mode=args.mode,
                pattern=args.pattern,
                max_chars=args.max_chars,
            )
        except (RefError, ReadError) as err:
            raise ToolFailure(str(err)) from None
        return ToolOutput(page.text)


class AskThreadInput(ToolInput):
    ref: str = Field(description="The thread to ask about: T-<id>")
    question: str = Field(min_length=1)


class AskThreadTool(JobTool[AskThreadInput]):
    name: ClassVar[str] = "ask_thread"
    description: ClassVar[str] = (
        "A reader with a fresh context reads that thread's transcript and answers the question"
        " with citations (T-…#n); every citation returned is checked to resolve."
    )
    Input = AskThreadInput

    async def run(self, args: AskThreadInput, ctx: ToolContext) -> ToolOutput:
        try:
            _reader, answer = await self.rt.ask(args.ref, args.question)
        except RefError as err:
            raise ToolFailure(str(err)) from None
        got = await answer
        if got.status != Status.DONE:
            raise ToolFailure(
                f"the reader {got.reader} ended {got.status}: {got.error or 'no answer'}"
            )
        lines = [got.answer, "", f"(reader thread: {got.reader})"]
        if got.citations:
            lines.append("citations checked: " + ", ".join(got.citations))
        if got.unresolved:
            lines.append(
                f"{len(got.unresolved)} citation(s) did not resolve and are marked [not found]: "
                + ", ".join(got.unresolved)
            )
        return ToolOutput("\n".join(lines))


NOT_FOUND_MARK = " [not found]"


async def check_citations(store: Store, text: str) -> tuple[str, list[str], list[str]]:
    """Every ``T-…`` citation in ``text`` is checked: one that resolves (to a thread, and its
    messages exist) is kept exactly as written; each one that does not is left in place and
    marked ``[not found]`` right after it, so a reader sees what was claimed and that it failed.
    Citations are handled where they occur (never by substring replacement), so a kept
    citation is never altered by a failing one it contains. Returns the text, kept, dropped."""
    verdict: dict[str, bool] = {}
    for cite in set(_CITATION.findall(text)):
        try:
            resolved = await store.resolve(cite)
            verdict[cite] = not (resolved.start is None and "#" in cite)
        except (StoreError, ValueError):
            verdict[cite] = False

    def mark(m: re.Match[str]) -> str:
        return m.group(0) if verdict[m.group(0)] else m.group(0) + NOT_FOUND_MARK

    marked = _CITATION.sub(mark, text)
    kept = sorted(c for c, ok in verdict.items() if ok)
    dropped = sorted(c for c, ok in verdict.items() if not ok)
    return marked, kept, dropped


class SearchInput(ToolInput):
    query: str = Field(min_length=1, description='Words or "quoted phrases"; all must occur')
    limit: int = Field(20, ge=1, le=100)


class SearchThreadsTool(JobTool[SearchInput]):
    name: ClassVar[str] = "search_threads"
    description: ClassVar[str] = (
        "Full-text search over every message of every thread of this job; hits are refs"
        " (T-…#n) with a snippet, each match in it marked ⟦so⟧."
    )
    Input = SearchInput
    replay_safe: ClassVar[bool] = True

    async def run(self, args: SearchInput, ctx: ToolContext) -> ToolOutput:
        hits = await self.rt.store.search(args.query, job_id=self.rt.lead_id, limit=args.limit)
        if not hits:
            return ToolOutput(f"no message matches {args.query!r}")
        return ToolOutput("\n".join(f"{h.ref} {h.role}: {marked_snippet(h)}" for h in hits))


class ResumeInput(ToolInput):
    ref: str = Field(description="A worker thread of this job: T-<id>")
    message: str = Field(min_length=1, pattern=r"\S", description="What the worker should do next")


class ResumeThreadTool(JobTool[ResumeInput]):
    name: ClassVar[str] = "resume_thread"
    description: ClassVar[str] = (
        "Send a worker more instructions: it continues with its whole history and returns a new"
        " distilled result. Same ref."
    )
    Input = ResumeInput

    async def run(self, args: ResumeInput, ctx: ToolContext) -> ToolOutput:
        info = await _job_worker(self.rt, args.ref)
        try:
            outcome = await self.rt.run_worker(info, message=args.message)
        except StoreError as err:
            raise ToolFailure(str(err)) from None
        payload = result_payload(await self.rt.store.get_thread(info.id), outcome)
        return ToolOutput(json.dumps(payload, ensure_ascii=False))


class ForkInput(ToolInput):
    ref: str = Field(description="A worker thread of this job: T-<id>")
    message: str = Field(
        min_length=1, pattern=r"\S", description="What the fork should do differently"
    )
    at: int | None = Field(None, ge=1, description="Fork after this message (default: the end)")


class ForkThreadTool(JobTool[ForkInput]):
    name: ClassVar[str] = "fork_thread"
    description: ClassVar[str] = (
        "A new worker sharing a worker's history up to message `at`, then your message; runs to"
        " the end and returns its distilled result with its new ref. The original is untouched."
    )
    Input = ForkInput

    async def run(self, args: ForkInput, ctx: ToolContext) -> ToolOutput:
        try:
            # under the lead running now, queued: it runs in the lead's turn, stops with it
            source, point = await fork_point(self.rt.store, args.ref, args.at)
            fork = await self.rt.fork(
                source,
                point,
                args.message,
                parent_id=self.rt.current_lead,
                status=Status.QUEUED,
                worker_only=True,
            )
        except (StoreError, UsageError, ValueError, ScriptError) as err:
            # a bad ref or point, another job's thread, a model that cannot be built
            raise ToolFailure(str(err)) from None
        try:
            outcome = await self.rt.run_worker(fork)  # its message is stored with it
        except StoreError as err:
            raise ToolFailure(str(err)) from None
        payload = result_payload(await self.rt.store.get_thread(fork.id), outcome)
        origin = fork.forked_from
        assert origin is not None  # a fork's
        payload["forked_from"] = {"ref": origin.ref, "at": origin.at}
        return ToolOutput(json.dumps(payload, ensure_ascii=False))


class MergeInput(ToolInput):
    refs: list[str] = Field(min_length=1, description="Worker threads whose branches to merge")
    into: str | None = Field(
        None, description="Branch to merge into (default: the job branch threadloom/<job>/merged)"
    )


class MergeTool(JobTool[MergeInput]):
    name: ClassVar[str] = "merge"
    description: ClassVar[str] = (
        "Merge workers' branches, in order, into the job branch (never into the user's checked-out"
        " branch). Conflicts are not resolved: each conflicting branch is left unmerged and its"
        " conflicted files are listed — dispatch a worker to resolve them (in its worktree it can"
        " run `git merge <branch>` and fix the files), then merge that worker's branch."
    )
    Input = MergeInput

    async def run(self, args: MergeInput, ctx: ToolContext) -> ToolOutput:
        for ref in args.refs:
            await _job_worker(self.rt, ref)
        try:
            report = await merge_refs(self.rt.store, list(args.refs), into=args.into)
        except (WorktreeError, StoreError) as err:
            raise ToolFailure(str(err)) from None
        text = json.dumps(report.to_json(), ensure_ascii=False)
        if report.conflicts:
            text += (
                f"\n{len(report.conflicts)} branch(es) conflict and were NOT merged into"
                f" {report.into}; nothing was resolved automatically."
            )
        return ToolOutput(text)


async def _job_worker(rt: Runtime, ref: str) -> ThreadInfo:
    try:
        return _of_job(rt, (await rt.store.resolve(ref)).thread)
    except RefError as err:
        raise ToolFailure(str(err)) from None


def _of_job(rt: Runtime, info: ThreadInfo) -> ThreadInfo:
    try:
        return rt.own_worker(info)
    except UsageError as err:
        raise ToolFailure(str(err)) from None


def lead_tools(rt: Runtime) -> list[Tool[Any]]:
    return [
        DispatchTool(rt),
        ReadThreadTool(rt),
        AskThreadTool(rt),
        SearchThreadsTool(rt),
        ResumeThreadTool(rt),
        ForkThreadTool(rt),
        MergeTool(rt),  # offered to the model only by worktree jobs' leads (their tool list)
    ]


@functools.cache
def lead_prefix_tokens(tool_names: tuple[str, ...]) -> int:
    """The estimate of a lead request's stable prefix — its system prompt and the specs of
    ``tool_names`` — the part of ``lead_context_tokens`` no ledger can use. The same for the
    same tools, so worked out once (a spec is pydantic's schema: a millisecond a tool) rather
    than at each handoff."""
    tools = {t.name: t for t in lead_tools(cast(Runtime, None))}  # specs need no runtime
    return prefix_tokens(lead_system_prompt(), [tools[n].spec() for n in tool_names])


def reader_tools(rt: Runtime, *, target: str) -> list[Tool[Any]]:
    return [ReadThreadTool(rt, only=target)]
