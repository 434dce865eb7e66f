"""One turn's tool calls, for the loop (``_loop``): run them, answer them, store the answers.

A turn's calls run concurrently up to ``LoopConfig.parallel_tools`` (one call — the usual turn —
runs inline, without a task group); ``submit_result`` is handled last, here, for workers. Every
call gets exactly one answer in the next user message: its output, or ``INTERRUPTED_RESULT``
when the run was stopped before it finished — except a turn whose every call is safe to replay,
which a stop leaves for the resume to run again (``replayable``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from store import (
    Check,
    ClaimCheck,
    LeaseLost,
    Message,
    NewMessage,
    OutputFile,
    Result,
    ToolResultBlock,
    ToolUseBlock,
    UsageRecord,
    finish_uncancelled,
    format_ref,
)

from ._protocol import ToolSpec
from ._results import (
    SUBMIT_RESULT,
    Submission,
    check_evidence,
    correction_message,
    to_result,
    validation_message,
)
from .tools import Tool, ToolOutput

if TYPE_CHECKING:
    from ._loop import _Run

log = structlog.get_logger("threadloom.loop")

INTERRUPTED_RESULT = "interrupted; effect unknown — check before re-running"

_SPECS: dict[tuple[type[Any], str, str], ToolSpec] = {}


def tool_spec(tool: Tool[Any]) -> ToolSpec:
    """``tool.spec()``, made once per tool class: its JSON schema is pydantic's to generate,
    about a millisecond a tool, and it depends on the class alone (a tool that overrides
    ``spec`` is asked every time)."""
    if type(tool).spec is not Tool.spec:
        return tool.spec()
    key = (type(tool), tool.name, tool.description)
    spec = _SPECS.get(key)
    if spec is None:
        spec = _SPECS[key] = tool.spec()
    return spec


async def store_message(
    run: _Run,
    msg: NewMessage,
    *,
    usage: UsageRecord | None = None,
    files: dict[str, OutputFile] | None = None,
) -> list[Message]:
    """Append to the thread and to the run's copy of its history (read once, at the start: the
    run owns the thread through its lease, so nobody else appends meanwhile)."""
    stored = await run.store.append(
        run.thread_id, msg, usage=usage, lease_owner=run.owner, output_files=files
    )
    run.history.extend(stored)
    run.requests.extend(stored)
    return stored


async def answer(run: _Run, uses: list[ToolUseBlock], outputs: dict[str, ToolOutput]) -> None:
    # an output a tool spilled to a file (bash, past a few MiB) is streamed into the store from
    # it, never read into memory here; the file is freed once the append is over
    files: dict[str, OutputFile] = {
        u.id: f
        for u in uses
        if isinstance(f := getattr(outputs.get(u.id), "file", None), OutputFile)
    }
    blocks = []
    for u in uses:
        out = outputs.get(u.id)
        text = INTERRUPTED_RESULT if out is None else "" if u.id in files else out.text
        is_error = True if out is None else out.is_error
        effects = None if out is None else out.effects
        blocks.append(
            ToolResultBlock(tool_use_id=u.id, content=text, is_error=is_error, effects=effects)
        )
    try:
        await store_message(run, NewMessage(role="user", content=blocks), files=files or None)
    finally:
        for f in files.values():
            f.close()


def replayable(run: _Run, uses: list[ToolUseBlock]) -> bool:
    """Whether every call of a turn is safe to run again (``Tool.replay_safe``: reads, and a
    lead's ``dispatch``, whose dispatch rows make a replay reuse the workers it started). A stop
    (Ctrl-C, a cancel) leaves such a turn unanswered, as a crash leaves it, so that resuming
    the thread runs it on the same way after either: a lead's ``dispatch`` answered
    "interrupted" would have left its job's workers behind, never resumed. A turn with any
    other call is answered at the stop (the outputs of the calls that finished are kept; one
    user message holds a turn's results, so answering part of it is not possible)."""
    return all(replay_safe(run, u) for u in uses)


def replay_safe(run: _Run, use: ToolUseBlock) -> bool:
    """Whether the run's tool ``use`` calls declares itself safe to run again."""
    tool = run.tools.get(use.name)
    return tool is not None and tool.replay_safe


async def run_tools(run: _Run, uses: list[ToolUseBlock]) -> dict[str, ToolOutput]:
    """Run one turn's tool calls, concurrently up to ``parallel_tools``; ``submit_result`` last.
    If cancelled, the calls that finished keep their results and the others are answered with
    the interrupted marker before the cancellation goes on."""
    outputs: dict[str, ToolOutput] = {}
    sem = asyncio.Semaphore(run.config.parallel_tools)

    async def one(use: ToolUseBlock) -> None:
        run.emit("tool", detail=use.name, tool=use.name, tool_id=use.id, tool_input=use.input)
        outputs[use.id] = await invoke(run, use)
        run.emit("tool_done", detail=use.name, tool=use.name, tool_id=use.id)

    async def bounded(use: ToolUseBlock) -> None:
        async with sem:
            await one(use)

    others = [u for u in uses if u.name != SUBMIT_RESULT]
    try:
        if len(others) == 1:
            await one(others[0])  # nothing to run beside it: no task group, no task
        elif others:
            async with asyncio.TaskGroup() as tg:
                for u in others:
                    tg.create_task(bounded(u))
    except asyncio.CancelledError:
        if replayable(run, uses):
            raise  # left as a crash leaves it: resuming runs these calls again (``replayable``)
        # waited for to its end (not merely shielded): a second cancellation must not let the
        # caller's cleanup read the history before these answers are in it and answer again
        await cleanup_cancelled(answer(run, uses, outputs), "tool_calls.answer_not_stored")
        raise
    submits = [u for u in uses if u.name == SUBMIT_RESULT]
    for i, u in enumerate(submits):
        if i > 0:
            outputs[u.id] = ToolOutput("only one submit_result per task; ignored", is_error=True)
        else:
            outputs[u.id] = await submit(run, u)
    return outputs


async def invoke(run: _Run, use: ToolUseBlock) -> ToolOutput:
    tool = run.tools.get(use.name)
    if tool is None or use.name not in {s.name for s in run.specs}:
        names = ", ".join(s.name for s in run.specs)
        return ToolOutput(f"unknown tool {use.name!r}; available: {names}", is_error=True)
    try:
        return await tool.invoke(use.input, dataclasses.replace(run.ctx, tool_use_id=use.id))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a tool bug must not take the thread down: the model is told
        log.exception("tool.crashed", tool=use.name)
        return ToolOutput(f"{use.name} failed: {type(exc).__name__}: {exc}", is_error=True)


async def cleanup_cancelled(cleanup: Coroutine[Any, Any, object], event: str) -> None:
    """Run a cancelled run's cleanup (its writes) to its end whatever else is cancelled
    meanwhile. When the cleanup itself fails (the database went away, or is locked for longer
    than its busy timeout) that is logged as ``event`` and the caller re-raises its
    cancellation: the run still ends *cancelled* — an error here must not take the place of the
    cancellation, or the run's caller would take a thread nobody runs for one that ended —
    and the lease's release leaves the thread ``interrupted``. A lost lease is not such an
    error: it goes on up (``LeaseLost``: the thread is another runner's, as before)."""
    try:
        await finish_uncancelled(cleanup)
    except LeaseLost:
        raise  # another runner owns the thread: that, not the cancellation, is how it ended
    except Exception as exc:
        log.error(event, error=str(exc))


async def submit(run: _Run, use: ToolUseBlock) -> ToolOutput:
    if SUBMIT_RESULT not in {s.name for s in run.specs}:
        return ToolOutput("submit_result is not available in this thread", is_error=True)
    try:
        submission = Submission.model_validate(use.input)
    except ValidationError as err:
        run.invalid_submissions += 1
        return ToolOutput(validation_message(err), is_error=True)
    # evidence refs are checked against the thread's lineage, read only when there are some
    cited = any(f.evidence for f in submission.findings)
    ancestry = await run.store.ancestry(run.thread_id) if cited else [(run.thread_id, 0)]
    findings, dropped = check_evidence(submission, ancestry=ancestry)
    ids = {"ref": format_ref(run.thread_id), "task": run.task_key}
    result = to_result(submission, findings, dropped, **ids)
    if run.check_result is not None:
        # checked as submitted, so that each ref that does not resolve is named
        check = await checked(run, to_result(submission, list(submission.findings), 0, **ids))
        if check.verdict == "contradicted" and run.corrections < MAX_CORRECTIONS:
            run.corrections += 1
            log.info(
                "result.contradicted", claims=sum(c.verdict == "contradicted" for c in check.claims)
            )
            return ToolOutput(correction_message(check), is_error=True)
        result = result.model_copy(update={"check": check})
    run.result = result
    note = f" ({dropped} evidence refs did not resolve and were dropped)" if dropped else ""
    return ToolOutput(f"Result recorded{note}. Your task is over.")


MAX_CORRECTIONS = 1
"""Submissions with a contradicted claim sent back to the worker (SPEC: once)."""
CHECK_TIMEOUT_S = 60.0


async def checked(run: _Run, result: Result) -> Check:
    """The run's ``check_result`` hook on ``result`` (over the run's history), with the number
    of rounds the run has checked. A check that fails or hangs never costs the worker its
    result: its claims are then one unverified ``status`` saying so."""
    assert run.check_result is not None
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            check = await run.check_result(result, run.history)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("result.check_failed")
        reason = f"the check could not run: {type(exc).__name__}: {str(exc)[:200]}"
        check = Check(
            verdict="unverified",
            claims=[ClaimCheck(kind="status", verdict="unverified", reason=reason)],
        )
    log.info("result.checked", verdict=check.verdict, claims=len(check.claims))
    return check.model_copy(update={"rounds": run.corrections + 1})
