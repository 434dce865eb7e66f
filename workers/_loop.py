"""The one loop that runs any thread — a worker, a reader, and the lead.

Every step is committed before the next acts on it: the assistant turn (with its usage row) is
stored before its tool calls run; the tool results are stored before the next model call. A run
owns its thread through a lease; it ends in a terminal status that is written (shielded from
cancellation) before the caller hears of it.

States of a run: queued/idle/terminal → running → done | failed | interrupted | cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import structlog

from store import (
    Check,
    DatabaseError,
    Kind,
    Lease,
    LeaseLost,
    Message,
    NewMessage,
    Result,
    Status,
    StatusError,
    Store,
    TextBlock,
    ThreadInfo,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
    finish_uncancelled,
    format_ref,
)

from ._calls import (
    INTERRUPTED_RESULT as INTERRUPTED_RESULT,
    answer,
    checked,
    cleanup_cancelled,
    replay_safe,
    replayable,
    run_tools,
    store_message,
    submit,
    tool_spec,
)
from ._limits import BudgetExhausted, Limits
from ._nudges import EMPTY_REPLY_SUMMARY, nudge_text, reply_text
from ._protocol import Model, ModelRequest, ModelResponse, ToolSpec, result_nudges
from ._redact import redact
from ._repetition import STOPPED_CALL, repeated_calls, repetition, restarted, restated
from ._request import DEFAULT_OUTPUT_CAP, RequestBuilder
from ._results import (
    SUBMIT_RESULT,
    submit_result_spec,
)
from ._tokens import messages_tokens, request_tokens
from .errors import ContextTooLong, HandOffRefused, ModelError, ScriptError
from .tools import SandboxSettings, Tool, ToolContext, ToolOutput

log = structlog.get_logger("threadloom.loop")

CUT_OFF_TOOL = (
    "your reply hit the output-token limit inside this tool call, so the call was cut off and"
    " NOT run; issue it again, smaller (e.g. write a large file in parts)"
)
CUT_OFF_TEXT = (
    "Your reply was cut off by the output-token limit. Continue exactly where it stopped."
)
STOPPED_TOOL = "not run: the reply that made this call was stopped (it repeated itself)"


HandOff = Callable[[Lease, str], Coroutine[Any, Any, ThreadInfo]]
"""``hand_off(lease, reason)``: end the thread ``lease`` holds ``done`` and start its successor,
in one write (the orchestrator's ``Store.hand_off`` with the successor's first message); returns
the successor. The loop calls it when the thread's next request would not fit its context
(``LoopConfig.context_tokens``, or the provider's refusal)."""

CheckHook = Callable[[Result, Sequence[Message]], Awaitable[Check]]
"""``check_result(result, history)``: the check of a worker's result against its visible
history, before it is stored (the orchestrator's ``runtime.check``; the loop knows no rules)."""


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """How a thread runs: its ``limits`` (turns, tokens, its job's tokens, time) and knobs."""

    limits: Limits = field(default_factory=Limits)
    max_response_tokens: int = 8192
    output_cap: int = DEFAULT_OUTPUT_CAP
    parallel_tools: int = 4
    max_invalid_submissions: int = 3
    max_cutoffs: int = 2
    lease_ttl_s: float = 60.0
    bash_timeout_s: float = 120.0
    context_tokens: int | None = None
    """The most tokens a request may hold: before one would hold more, a run given a
    ``hand_off`` hands the thread off (None: only when the provider refuses one as too long)."""


@dataclass(frozen=True, slots=True)
class LoopEvent:
    """Progress of a run, for live displays (never needed for correctness).

    ``usage`` and ``cost_usd`` are this run's running totals (cost by ``model``'s price table;
    0.0 for scripted and unpriced models). ``tool``/``tool_id``/``tool_input`` name the call a
    ``tool`` event starts and a ``tool_done`` event ends (calls of one turn may overlap)."""

    thread_id: str
    # "started" | "turn" | "tool" | "tool_done" | "finished"; and "queued", which a job's
    # runtime sends for a worker that waits for a free slot
    kind: str
    thread_kind: str = ""
    title: str = ""
    turn: int = 0
    usage: Usage = field(default_factory=Usage)
    detail: str = ""
    status: Status | None = None
    model: str = ""
    cost_usd: float = 0.0
    tool: str = ""
    tool_id: str = ""
    tool_input: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    thread_id: str
    status: Status
    result: Result | None
    final_text: str
    turns: int
    usage: Usage
    error: str | None = None
    exception: BaseException | None = None
    continued_by: str | None = None
    """The successor this run handed the thread off to (the thread ended ``done``)."""

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id)


def runner_id() -> str:
    """``host:pid:nonce`` — enough to tell, on the same host, whether the runner still lives."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class _Run:
    store: Store
    thread_id: str
    model: Model
    tools: dict[str, Tool[Any]]
    specs: list[ToolSpec]
    ctx: ToolContext
    config: LoopConfig
    kind: Kind
    job_id: str
    system: str
    on_event: Callable[[LoopEvent], None] | None
    resolve_task_ref: Callable[[str], Awaitable[str | None]] | None
    task_key: str | None
    requests: RequestBuilder  # the model's view of ``history``, each message's made once
    message: str | None = None
    title: str = ""
    after_tools: Callable[[int], Awaitable[None]] | None = None
    check_result: CheckHook | None = None
    hand_off: HandOff | None = None
    counted: tuple[int, int] | None = None
    """(tokens, messages) of the newest request as the provider counted its input."""
    corrections: int = 0  # submissions sent back with their contradictions (SPEC: at most one)
    history: list[Message] = field(default_factory=list)
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    started: float = field(default_factory=time.monotonic)
    invalid_submissions: int = 0
    cutoffs: int = 0
    nudges: int = 0  # nudges sent in this run (bounded by the model's ``result_nudges``)
    last_text: str = ""  # the newest non-empty text a turn of this run ended with
    result: Result | None = None
    final_text: str = ""
    owner: str | None = None  # the lease holder every append is checked against
    lease: Lease | None = None  # held through ``store.leases.hold`` while the run owns the thread

    @property
    def lease_lost(self) -> bool:
        """Another runner owns the thread now: write nothing more."""
        return self.lease is not None and self.lease.lost

    @lease_lost.setter
    def lease_lost(self, lost: bool) -> None:
        if self.lease is not None:
            self.lease.lost = lost

    def emit(self, kind: str, **kw: Any) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(
                    LoopEvent(
                        self.thread_id,
                        kind,
                        str(self.kind),
                        self.title,
                        self.turns,
                        self.usage,
                        model=self.model.spec,
                        cost_usd=self.model.cost_usd(self.usage),
                        **kw,
                    )
                )


async def run_thread(
    store: Store,
    thread_id: str,
    *,
    model: Model,
    tools: Sequence[Tool[Any]],
    workspace: Path,
    config: LoopConfig | None = None,
    on_event: Callable[[LoopEvent], None] | None = None,
    resolve_task_ref: Callable[[str], Awaitable[str | None]] | None = None,
    owner: str | None = None,
    env: dict[str, str] | None = None,
    message: str | None = None,
    after_tools: Callable[[int], Awaitable[None]] | None = None,
    sandbox: SandboxSettings | None = None,
    thread: ThreadInfo | None = None,
    check_result: CheckHook | None = None,
    hand_off: HandOff | None = None,
) -> RunOutcome:
    """Run a thread from its stored history until it ends; return how it ended.

    ``thread``: the thread as the caller just read or created it (its tools, prompt, kind and
    task), so it is not read again; by default it is read here.

    ``after_tools``, if given, is awaited with the seq of each stored tool-results message (the
    orchestrator checkpoints the workspace there); its failure is logged, never fatal.
    ``message``, if given, is appended as the user's next message once the run owns the thread
    (after any unanswered tool calls of a crashed run have been answered).
    ``sandbox`` is how ``bash`` isolates commands (default: not at all, ``mode="none"``).
    ``check_result``, if given, checks a worker's result before it is stored: a submission with
    a contradicted claim goes back to the worker once as a tool error naming each one; what it
    submits next stands with its check (a result the loop makes itself is checked too).
    ``hand_off``, if given, is called (with the lease) instead of a model call whose request
    would exceed ``config.context_tokens`` or that the provider refuses as too long, once the
    thread has a turn of its own: the run then ends with the outcome's ``continued_by`` set.
    The thread's system prompt and tool names come from the thread itself (``tools`` supplies the
    implementations; ``submit_result`` is handled here for workers). Raises ``LeaseHeld`` when
    another runner owns the thread and ``asyncio.CancelledError`` when cancelled — after the
    thread has been left ``interrupted`` with every in-flight tool call answered.
    """
    cfg = config or LoopConfig()
    me = owner or runner_id()
    info = thread if thread is not None and thread.id == thread_id else None
    if info is None:
        info = await store.get_thread(thread_id)
    impl = {t.name: t for t in tools}
    specs = []
    for name in info.tools:
        if name == SUBMIT_RESULT:
            specs.append(submit_result_spec())
        elif name in impl:
            specs.append(tool_spec(impl[name]))
        else:
            raise ValueError(f"{info.ref} uses tool {name!r}, which this runner does not provide")
    foreign = bool((info.task or {}).get("source"))  # imported: another agent wrote its history
    run = _Run(
        store=store,
        thread_id=thread_id,
        model=model,
        tools=impl,
        specs=specs,
        ctx=ToolContext(
            workspace=Path(await asyncio.to_thread(os.path.realpath, workspace)),
            thread_ref=info.ref,
            env=env,
            default_timeout_s=cfg.bash_timeout_s,
            sandbox=sandbox.mode if sandbox else "none",
            network=sandbox.network if sandbox else False,
            hidden=sandbox.hidden if sandbox else (),
        ),
        config=cfg,
        kind=info.kind,
        job_id=info.job_id,
        system=info.system_prompt or "",
        on_event=on_event,
        resolve_task_ref=resolve_task_ref,
        task_key=(info.task or {}).get("id") if info.task else None,
        requests=RequestBuilder(
            system=info.system_prompt or "",
            tools=specs,
            thread_ref=info.ref,
            max_tokens=cfg.max_response_tokens,
            output_cap=cfg.output_cap,
            resolve_task_ref=resolve_task_ref,
            # an imported thread: another agent's calls, seen under its tools' names
            foreign=foreign,
            # a worker ends only through submit_result (an imported thread has none)
            tool_required=info.kind == Kind.WORKER and not foreign,
        ),
        message=message,
        title=info.title,
        after_tools=after_tools,
        check_result=check_result if info.kind == Kind.WORKER else None,
        hand_off=hand_off,
    )
    run.owner = me
    bound = structlog.contextvars.bound_contextvars(
        thread=info.ref, job=format_ref(info.job_id), task=run.task_key
    )
    bound.__enter__()
    try:
        # ``hold`` takes the lease and the ``running`` status in one write, renews the lease in
        # the background (losing it cancels this run, which then ends with ``LeaseLost``) and
        # releases it whatever happens, unless the run's last write (``_finish``) did
        # (a run cancelled while it takes them leaves the thread ``interrupted``)
        # a run without a new message carries on a thread nobody ended; one that ended (done,
        # failed, cancelled) has nothing to answer and stands as it ended — checked in the
        # lease's own transaction, so a run that raced the thread's end (a stale Temporal
        # attempt) cannot take it back to running after it
        unended = None if message is not None else set(CARRY_ON_FROM)
        taken = False
        try:
            async with store.leases.hold(
                thread_id, me, ttl_s=cfg.lease_ttl_s, start=Status.RUNNING, expected=unended
            ) as lease:
                taken = True
                run.lease = lease
                run.emit("started", status=Status.RUNNING)
                log.info("thread.started", kind=str(info.kind), model=model.spec)
                return await _drive(run)
        except StatusError:
            if taken or unended is None:
                raise
            return await _as_it_ended(store, thread_id)
    finally:
        bound.__exit__(None, None, None)


CARRY_ON_FROM = frozenset({Status.IDLE, Status.QUEUED, Status.RUNNING, Status.INTERRUPTED})
"""The statuses a run without a new message may take a thread from (its lease's ``expected``)."""


async def _as_it_ended(store: Store, thread_id: str) -> RunOutcome:
    """The outcome of a run without a message that found its thread ended: as stored, nothing
    run and nothing written."""
    info = await store.get_thread(thread_id)
    if info.status in CARRY_ON_FROM:  # refused for another reason than its end
        raise StatusError(f"{info.ref} could not be taken from {info.status}")
    last = await store.messages(thread_id, start=info.head_seq)
    text = _text_of(last[-1]) if last and last[-1].role == "assistant" else ""
    log.info("thread.already_ended", status=str(info.status))
    return RunOutcome(
        thread_id=thread_id,
        status=info.status,
        result=info.result,
        final_text=text,
        turns=0,
        usage=Usage(),
        error=info.error,
    )


async def _drive(run: _Run) -> RunOutcome:
    try:
        async with asyncio.timeout(run.config.limits.time_s):  # its error: ``_end_timed_out``
            await _answer_orphans(run)
            if run.message is not None:
                await store_message(run, NewMessage.user(run.message))
            return await _turns(run)
    except LeaseLost:
        # another runner owns the thread now: it writes the status, not us
        run.lease_lost = True
        log.warning("lease.lost", thread=format_ref(run.thread_id))
        raise
    except TimeoutError:
        return await finish_uncancelled(_end_timed_out(run))
    except ModelError as exc:
        return await _finish(
            run, Status.FAILED, error=f"model provider failed: {exc}", exception=exc
        )
    except ScriptError as exc:
        # the scripted model could not answer (no rule matches, an unknown task id): the
        # model's failure, said in its own words — not a crash of ours with a traceback, and
        # not raised on (every layer above would report it again)
        return await _finish(run, Status.FAILED, error=str(exc), exception=exc)
    except asyncio.CancelledError:
        # one shielded cleanup, run to its end whatever else is cancelled meanwhile: a second
        # cancellation must not skip the terminal status (nor race the answers into the record)
        await cleanup_cancelled(_end_interrupted(run), "thread.interrupt_not_stored")
        raise
    except DatabaseError as exc:
        # the world, not a bug (the disk is full, the database went away): one line, no
        # traceback; the terminal status is still attempted, and the error goes on up
        log.error("thread.store_failed", error=str(exc))
        await _finish(run, Status.FAILED, error=str(exc), exception=exc)
        raise
    except Exception as exc:
        log.exception("thread.crashed")
        await _finish(run, Status.FAILED, error=f"{type(exc).__name__}: {exc}", exception=exc)
        raise


async def _end_interrupted(run: _Run) -> None:
    if run.lease_lost:
        return  # the thread is another runner's now
    try:
        await _answer_orphans(run, replay=False, stopping=True)
        await _finish(run, Status.INTERRUPTED, error="interrupted")
    except LeaseLost as lost:
        # refused, and said so in the log: a late runner's last writes are refused here too
        run.lease_lost = True
        log.warning("lease.lost", thread=format_ref(run.thread_id), refused=str(lost))


async def _end_timed_out(run: _Run) -> RunOutcome:
    await _answer_orphans(run, replay=False)
    return await _finish(run, Status.FAILED, error=run.config.limits.timed_out)


async def _answer_orphans(run: _Run, *, replay: bool = True, stopping: bool = False) -> None:
    """The newest assistant turn may have tool calls nobody answered (the process died, or the
    run was stopped before they ran). Each is answered with the stored synthetic "interrupted"
    result — the tool is never re-run automatically — except tools that declare themselves
    ``replay_safe`` (reads, and ``dispatch``, whose dispatch rows make a replay reuse the workers
    it already started), which are run again when ``replay`` is on.

    ``stopping`` (Ctrl-C, a cancel): a turn whose every call is replay-safe is left unanswered,
    as a crash leaves it (``_calls.replayable``)."""
    history = await run.store.messages(run.thread_id)
    run.history = history
    run.requests.reset(history)
    if not history or history[-1].role != "assistant":
        return
    uses = [b for b in history[-1].content if isinstance(b, ToolUseBlock)]
    if not uses:
        return
    if stopping and replayable(run, uses):
        log.info("thread.left_for_replay", calls=[u.name for u in uses])
        return
    safe = [u for u in uses if replay and replay_safe(run, u)]
    outputs = await run_tools(run, safe) if safe else {}
    await answer(run, uses, outputs)
    if len(safe) < len(uses):
        log.warning("thread.orphans_answered", count=len(uses) - len(safe))


async def _turns(run: _Run) -> RunOutcome:
    cfg = run.config
    if await _recorded_submission(run):
        # a run that died between a worker's accepted submission and its end: it ends now
        return await _finish(run, Status.DONE)
    while True:
        history = run.history
        if not history:
            return await _finish(run, Status.FAILED, error="the thread has no messages to answer")
        if history[-1].role == "assistant":
            # nothing new to answer (e.g. resumed without a message): the thread stands as it
            # is — a worker's last words are its partial result, as when it ended with them
            run.final_text = _text_of(history[-1])
            if run.kind == Kind.WORKER and run.result is None:
                summary = run.final_text or EMPTY_REPLY_SUMMARY
                run.result = Result(status="partial", summary=summary[:2000])
            return await _finish(run, Status.DONE)
        spent = await _spent(run)
        if spent is not None:
            return await _finish(run, Status.FAILED, error=spent[0], exception=spent[1])
        request = run.requests.request()
        if run.hand_off is not None and cfg.context_tokens is not None:
            need = _tokens_of(run, request)
            if need > cfg.context_tokens:
                return await _hand_off(
                    run,
                    f"its next request would hold ~{need:,} tokens, over its ceiling of"
                    f" {cfg.context_tokens:,}",
                )
        try:
            response = await run.model.complete(request)
        except ContextTooLong as exc:
            if run.hand_off is None or not _has_own_turn(run):
                raise  # the provider's failure, as it was (exit 4): a successor would fail too
            return await _hand_off(run, f"the provider refused its request as too long: {exc}")
        u = response.usage
        run.counted = (
            u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
            len(request.messages),
        )
        run.turns += 1
        run.usage = run.usage + response.usage
        record = UsageRecord(
            model=response.model or run.model.spec,
            usage=response.usage,
            cost_usd=run.model.cost_usd(response.usage),
        )
        # the API refuses empty text blocks when they are sent back: never store one
        content = [
            b for b in response.content if not (isinstance(b, TextBlock) and not b.text.strip())
        ] or [TextBlock(text="(empty reply)")]
        stored = await store_message(
            run, NewMessage(role="assistant", content=content), usage=record
        )
        turn_msg = stored[-1]
        uses = [b for b in content if isinstance(b, ToolUseBlock)]
        run.emit("turn")
        log.info(
            "turn.stored",
            seq=turn_msg.seq,
            stop=response.stop_reason,
            tools=[u.name for u in uses],
            input_tokens=response.usage.input_tokens,
            cache_read=response.usage.cache_read_input_tokens,
        )
        ended = await _after_turn(run, response, turn_msg, uses)
        if ended is not None:
            return ended


async def _recorded_submission(run: _Run) -> bool:
    """Whether the history ends with a ``submit_result`` call answered as accepted (the run that
    made it died before it ended the thread): the submission is taken again from the stored
    call — validated and checked as it was — and the run ends with it, with no model call."""
    history = run.history
    if run.kind != Kind.WORKER or len(history) < 2 or history[-1].role != "user":
        return False
    calls = [b for b in history[-2].content if isinstance(b, ToolUseBlock)]
    answers = {b.tool_use_id: b for b in history[-1].content if isinstance(b, ToolResultBlock)}
    use = next((c for c in calls if c.name == SUBMIT_RESULT), None)
    if use is None or use.id not in answers or answers[use.id].is_error:
        return False
    return not (await submit(run, use)).is_error and run.result is not None


def _tokens_of(run: _Run, request: ModelRequest) -> int:
    """What ``request`` holds, in tokens: the provider's count of the newest request of this run
    plus an upper estimate of the messages since; estimated whole when there is no such count
    (a run's first request, a provider that reports none)."""
    if run.counted is not None and run.counted[0] > 0 and run.counted[1] <= len(request.messages):
        tokens, at = run.counted
        return tokens + messages_tokens(islice(request.messages, at, None))
    return request_tokens(request)


def _has_own_turn(run: _Run) -> bool:
    """Whether the thread has an assistant turn of its own (a fork's inherited ones aside): a
    thread without one would hand its successor everything it started with."""
    return any(m.role == "assistant" and m.thread_id == run.thread_id for m in run.history)


async def _hand_off(run: _Run, reason: str) -> RunOutcome:
    """End the thread ``done`` and start its successor (``run.hand_off``, one write), or — when
    the thread has no turn of its own yet, so a successor would start as full — fail it."""
    ref = format_ref(run.thread_id)
    if not _has_own_turn(run):
        return await _finish(
            run,
            Status.FAILED,
            error=f"{ref}: {reason}, before any turn of its own (its first messages alone fill"
            " the context: raise its ceiling)",
        )
    assert run.hand_off is not None and run.lease is not None
    began = time.perf_counter()
    try:
        successor = await finish_uncancelled(run.hand_off(run.lease, reason))
    except HandOffRefused as exc:
        return await _finish(run, Status.FAILED, error=f"{ref}: {reason}; {exc}", exception=exc)
    run.emit("handoff", status=Status.DONE, detail=successor.ref)
    took_ms = round((time.perf_counter() - began) * 1e3, 2)  # the successor's ledger and row
    log.info(
        "thread.handed_off", successor=successor.ref, reason=reason, turns=run.turns, ms=took_ms
    )
    return RunOutcome(
        thread_id=run.thread_id,
        status=Status.DONE,
        result=None,
        final_text="",
        turns=run.turns,
        usage=run.usage,
        continued_by=successor.id,
    )


async def _after_turn(
    run: _Run, response: ModelResponse, turn: Message, uses: list[ToolUseBlock]
) -> RunOutcome | None:
    stop = response.stop_reason
    if stop == "refusal":
        return await _finish(run, Status.FAILED, error="the model refused to continue")
    said = reply_text(response)
    once: str | None = None  # a cut-off reply said over: what it said once (``restated``)
    if stop == "max_tokens" and not uses:
        cut = restated(said)
        if cut is not None:
            once = said[:cut].rstrip()
        elif _restarted(run.history, said):
            log.warning("turn.restarted", seq=turn.seq)
            return await _finish(
                run,
                Status.FAILED,
                error=f"{format_ref(run.thread_id)}: asked to continue its cut-off reply, the"
                " model wrote it again from the start; stopped",
            )
    loop = repetition(said)
    # a lead's or a reader's text is its output (the report, the answer): cut off inside a
    # loop, what it said before the loop began again is kept. A worker's output is its
    # submit_result: its loop stops it, as any thread's loop that did not run to the cut-off
    if loop is not None and loop.is_loop and (once is None or run.kind == Kind.WORKER):
        # a model in a loop writes the same again when asked to go on: stop it now, its calls
        # (made beside the loop, or recognised inside it) answered and not run
        if uses:
            await answer(run, uses, {u.id: ToolOutput(STOPPED_TOOL, is_error=True) for u in uses})
        log.warning("turn.repeated", seq=turn.seq, block=loop.block, times=loop.times)
        return await _finish(
            run, Status.FAILED, error=f"{format_ref(run.thread_id)}: {loop.describe()}; stopped"
        )
    if once is not None:  # said its piece, then began it again: it ends there
        seen = loop.describe() if loop is not None and loop.is_loop else "the model said it again"
        log.warning(
            "turn.restated",
            message=f"{format_ref(run.thread_id)}: {seen} until the output limit; its reply is"
            f" kept up to where it began again ({len(once):,} of {len(said):,} characters)",
            seq=turn.seq,
        )
        said, stop = once, "end_turn"
    if stop == "max_tokens":
        run.cutoffs += 1
        if run.cutoffs > run.config.max_cutoffs:
            if uses:
                await answer(
                    run, uses, {u.id: ToolOutput(CUT_OFF_TOOL, is_error=True) for u in uses}
                )
            return await _finish(
                run,
                Status.FAILED,
                error=f"{format_ref(run.thread_id)}: {run.cutoffs} replies hit the output-token"
                f" limit ({run.config.max_cutoffs} continuations asked); stopped",
            )
        if uses:
            await answer(run, uses, {u.id: ToolOutput(CUT_OFF_TOOL, is_error=True) for u in uses})
        else:
            await store_message(run, NewMessage.user(CUT_OFF_TEXT))
        return None
    if stop == "pause_turn" and not uses:
        # the provider paused a long turn: the next call continues it from the stored turn
        await store_message(run, NewMessage.user("Continue."))
        return None
    if not uses:
        run.last_text = said or run.last_text
        nudge = await _nudge_for(run, empty=not said)
        if nudge is not None:
            run.nudges += 1
            log.info("turn.nudged", seq=turn.seq, nudge=run.nudges, empty=not said)
            await store_message(run, NewMessage.user(nudge))
            return None
        run.final_text = run.last_text or _text_of(turn)
        if run.kind == Kind.WORKER and run.result is None:
            summary = run.last_text or EMPTY_REPLY_SUMMARY
            run.result = Result(status="partial", summary=summary[:2000])
        return await _finish(run, Status.DONE)
    again = repeated_calls(run.history)  # the same call turn after turn: told, then stopped
    stuck = next((r for r in again.values() if r.stops), None)
    if stuck is not None:
        await answer(run, uses, {u.id: ToolOutput(STOPPED_CALL, is_error=True) for u in uses})
        log.warning("turn.repeated_call", seq=turn.seq, tool=stuck.name, times=stuck.times)
        return await _finish(
            run, Status.FAILED, error=f"{format_ref(run.thread_id)}: {stuck.describe()}; stopped"
        )
    outputs = await run_tools(run, [u for u in uses if u.id not in again])
    outputs |= {i: ToolOutput(r.refusal(), is_error=True) for i, r in again.items()}
    await answer(run, uses, outputs)
    if run.after_tools is not None:
        try:
            await run.after_tools(run.history[-1].seq)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("after_tools.failed", seq=run.history[-1].seq)
    if run.result is not None:
        return await _finish(run, Status.DONE)
    if run.invalid_submissions > run.config.max_invalid_submissions:
        return await _finish(
            run, Status.FAILED, error="submit_result kept failing validation; no result"
        )
    return None


def _restarted(history: Sequence[Message], said: str) -> bool:
    """``said`` answers the cut-off notice by beginning the cut-off reply again (``restarted``)."""
    if len(history) < 3:
        return False
    previous, asked = history[-3], history[-2]
    return (
        previous.role == "assistant"
        and _text_of(asked) == CUT_OFF_TEXT
        and restarted(_text_of(previous), said)
    )


async def _nudge_for(run: _Run, *, empty: bool) -> str | None:
    """The nudge that answers a turn ending without tool calls (see ``_nudges``), or None to end
    the run. Sent only while the next model call may still start (no limit reached: ``_spent``):
    a nudge must never turn a ``partial`` into a ``failed``."""
    text = nudge_text(
        run.kind,
        empty=empty,
        sent=run.nudges,
        allowed=result_nudges(run.model),
        has_result=run.result is not None,
        can_submit=SUBMIT_RESULT in {s.name for s in run.specs},
    )
    return None if text is None or await _spent(run) is not None else text


async def _spent(run: _Run) -> tuple[str, BudgetExhausted | None] | None:
    """The limit that stops the next model call (``Limits.reached``), the job's tokens read from
    its stored usage when it has a budget; the run's time is the deadline ``_drive`` runs under."""
    limits = run.config.limits
    job = (await run.store.usage.of_job(run.job_id)).total_tokens if limits.job_tokens else None
    return limits.reached(turns=run.turns, tokens=run.usage.total_tokens, job_tokens=job)


async def _finish(
    run: _Run,
    status: Status,
    *,
    error: str | None = None,
    exception: BaseException | None = None,
) -> RunOutcome:
    """Write the terminal status (with the result) — idempotent and finished even under
    cancellation — and only then report the end. ``error`` is stored with its secrets masked
    (``redact``): a provider's 401 may echo the key."""
    error = None if error is None else redact(error)
    duration = round(time.monotonic() - run.started, 3)
    result = run.result
    if result is None and run.kind == Kind.WORKER and status != Status.DONE:
        result = Result(status="failed", summary=error or str(status))
    if result is None and run.kind != Kind.WORKER and run.final_text:
        result = Result(status="done", summary=run.final_text[:2000])
    if (
        result is not None
        and result.check is None
        and run.check_result is not None
        and status not in (Status.INTERRUPTED, Status.CANCELLED)  # a stop: no more work
    ):
        result = result.model_copy(update={"check": await checked(run, result)})
    if result is not None:
        result = result.model_copy(
            update={
                "ref": format_ref(run.thread_id),
                "task": result.task or run.task_key,
                "turns": run.turns,
                "usage": run.usage,
                "duration_s": duration,
            }
        )

    # the lease is checked in the same write: a runner that lost it writes no status; that
    # write gives the lease up and marks the thread's dispatch row too (``Store.finish``)
    if run.lease is not None:
        await finish_uncancelled(run.store.finish(run.lease, status, error=error, result=result))
    else:
        await finish_uncancelled(
            run.store.set_status(
                run.thread_id, status, error=error, result=result, lease_owner=run.owner
            )
        )
    run.emit("finished", status=status, detail=error or "")
    log.info("thread.finished", status=str(status), turns=run.turns, error=error)
    return RunOutcome(
        thread_id=run.thread_id,
        status=status,
        result=result,
        final_text=run.final_text,
        turns=run.turns,
        usage=run.usage,
        error=error,
        exception=exception,
    )


def _text_of(msg: Message) -> str:
    return "\n".join(b.text for b in msg.content if isinstance(b, TextBlock)).strip()
