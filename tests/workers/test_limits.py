"""One ``Limits`` object, checked in one place: each of its limits — turns, the thread's tokens,
the job's tokens (every thread of the job counted, from the stored usage rows) and time — stops a
run with the error, status and exception SPEC and the CLI rely on. Real SQLite, real tools, the
FunctionModel double."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from store import Kind, NewMessage, Status, Store, TextBlock, Usage, UsageRecord
from workers import (
    SUBMIT_RESULT,
    BudgetExhausted,
    Limits,
    LoopConfig,
    ModelRequest,
    ModelResponse,
    RunOutcome,
    build_tools,
    run_thread,
)
from workers.providers import FunctionModel, tool_response

TOOLS = ["list_files"]
COSTLY = Usage(input_tokens=60, output_tokens=50)  # 110 tokens a turn


def busy(usage: Usage | None = None) -> FunctionModel:
    """A model that never ends: a tool call every turn."""
    return FunctionModel(lambda _: tool_response(("list_files", {}), usage=usage))


async def new_worker(store: Store, parent_id: str | None = None) -> str:
    info = await store.create_thread(
        kind=Kind.WORKER,
        title="t",
        parent_id=parent_id,
        system_prompt="you are a worker",
        tools=[*TOOLS, SUBMIT_RESULT],
        model="function:test",
        status=Status.QUEUED,
        messages=[NewMessage.user("do the task")],
    )
    return info.id


async def run(store: Store, tid: str, model: Any, ws: Path, limits: Limits) -> RunOutcome:
    return await run_thread(
        store,
        tid,
        model=model,
        tools=build_tools(TOOLS),
        workspace=ws,
        config=LoopConfig(limits=limits),
    )


async def assert_failed(store: Store, outcome: RunOutcome, error: str) -> None:
    assert outcome.status == Status.FAILED and outcome.error == error
    stored = await store.get_thread(outcome.thread_id)
    assert stored.status == Status.FAILED and stored.error == error
    assert stored.result is not None and stored.result.status == "failed"


async def test_turns_stop_the_run(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)
    model = busy()
    outcome = await run(store, tid, model, workspace, Limits(turns=2))
    await assert_failed(store, outcome, "max_turns (2) reached without an end")
    assert outcome.turns == 2 and len(model.requests) == 2 and outcome.exception is None


async def test_the_threads_tokens_stop_the_run(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)
    model = busy(COSTLY)
    outcome = await run(store, tid, model, workspace, Limits(tokens=200))
    await assert_failed(store, outcome, "budget exhausted: 220 of 200 tokens for this thread")
    assert outcome.turns == 2 and isinstance(outcome.exception, BudgetExhausted)
    assert str(outcome.exception) == "220 of 200 tokens for this thread"


async def test_the_jobs_tokens_count_every_thread_of_the_job(store: Store, workspace: Path) -> None:
    async def lead_that_spent(tokens: int) -> str:
        info = await store.create_thread(kind=Kind.LEAD, messages=[NewMessage.user("goal")])
        said = NewMessage(role="assistant", content=[TextBlock(text="planned")])
        usage = UsageRecord(model="m", usage=Usage(input_tokens=tokens))
        await store.append(info.id, said, usage=usage)
        return info.id

    lead = await lead_that_spent(150)
    await lead_that_spent(10_000)  # another job's: not counted
    # the lead's 150 tokens are its job's: a worker of it may not start a model call
    tid = await new_worker(store, parent_id=lead)
    model = busy()
    outcome = await run(store, tid, model, workspace, Limits(job_tokens=150))
    await assert_failed(store, outcome, "budget exhausted: the job has used 150 of its 150 tokens")
    assert model.requests == [] and isinstance(outcome.exception, BudgetExhausted)
    # shared as it is spent: the worker's own turn takes the job over a larger budget
    tid = await new_worker(store, parent_id=lead)
    outcome = await run(store, tid, busy(COSTLY), workspace, Limits(job_tokens=200))
    await assert_failed(store, outcome, "budget exhausted: the job has used 260 of its 200 tokens")
    assert outcome.turns == 1


async def test_time_stops_the_run(store: Store, workspace: Path) -> None:
    tid = await new_worker(store)

    async def never(request: ModelRequest) -> ModelResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    outcome = await run(store, tid, FunctionModel(never), workspace, Limits(time_s=0.2))
    await assert_failed(store, outcome, "timed out after 0.2 s")


def test_the_first_limit_reached_is_the_one_said() -> None:
    every = Limits(turns=3, tokens=10, job_tokens=10)
    assert every.reached(turns=3, tokens=10, job_tokens=10) == (
        "max_turns (3) reached without an end",
        None,
    )
    said = every.reached(turns=2, tokens=10, job_tokens=10)
    assert said is not None and said[0] == "budget exhausted: 10 of 10 tokens for this thread"
    said = every.reached(turns=2, tokens=9, job_tokens=10)
    assert said is not None and said[0] == "budget exhausted: the job has used 10 of its 10 tokens"
    assert every.reached(turns=2, tokens=9, job_tokens=9) is None
    # None: no limit (a lead's time; a job without a budget)
    free = Limits(tokens=None, job_tokens=None, time_s=None)
    assert free.reached(turns=0, tokens=10**12, job_tokens=None) is None
