"""The job's ledger (SPEC "Jobs larger than one context", ``runtime.ledger``) over a real SQLite
store: a job's state written as its runtime writes it — a lead that dispatches and hands off to
a successor that dispatches more, workers that end with checked results or still run, a worker
that handed off, a fork. Same state, same bytes; within its budget at 10, 100 and 1,000 tasks,
the oldest entries collapsing first; refused with a minimum that really works."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from orchestrator.errors import EXIT_USAGE, LedgerTooLarge, exit_code_for
from orchestrator.jobs import JobSpec, parse_job
from orchestrator.runtime.ledger import (
    LAST_WORDS_CHARS,
    MAX_QUESTIONS,
    SUMMARY_CHARS,
    Ledger,
    _one_line,
    check_lead_context,
    job_ledger,
    minimum_lead_context,
)
from orchestrator.runtime.prompts import lead_system_prompt
from store import (
    Check,
    Kind,
    Lease,
    NewMessage,
    NewWorker,
    Result,
    SpawnRequest,
    Status,
    Store,
    TextBlock,
    ThreadInfo,
    ToolResultBlock,
    ToolUseBlock,
    format_ref,
    new_id,
)
from workers import estimate_tokens

JOB = JobSpec(name="sweep-ledger", goal="Fix every failing test of the monorepo.", workspace="/w")
VERDICTS = ("verified", "unverified", "contradicted")
MARKS = {"verified": "✓", "unverified": "?", "contradicted": "✗"}
LONG = "The failing assertion came from a stale fixture; regenerated it and reran the suite. " * 20
LAST_WORDS = "Reviewed the first results; t0003 contradicts itself, re-check it before the report."


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[tuple[Store, Path]]:
    path = tmp_path / "ledger.db"
    store = await Store.open(str(path))
    yield store, path
    await store.close()


@dataclass
class Job:
    job_id: str  # the first lead's id
    lead: ThreadInfo  # the lead handing off now (the first one's successor)
    keys: list[str]  # task ids, in dispatch order
    workers: dict[str, ThreadInfo]  # each task's newest worker
    running: list[str]  # tasks still running (queued, running, interrupted)
    fork: ThreadInfo | None
    last_words_ref: str


def _key(i: int) -> str:
    return f"t{i:04d}"


def _result(i: int, questions: Sequence[str] = ()) -> Result:
    return Result(
        status="done",
        summary=f"task {i}: {LONG}"[:2000],
        open_questions=list(questions),
        check=Check(verdict=VERDICTS[i % 3]),
    )


async def _dispatch(store: Store, lead_id: str, keys: Sequence[str]) -> list[ThreadInfo]:
    workers = [
        NewWorker(
            i,
            key,
            title=f"Fix {key} in module {key}",
            task={"id": key, "title": f"Fix {key} in module {key}", "prompt": "fix it"},
            messages=(NewMessage.user(f"Task {key}"),),
        )
        for i, key in enumerate(keys)
    ]
    spawned = await store.dispatches.spawn(
        SpawnRequest(lead_id, f"toolu_{new_id()}", tuple(workers))
    )
    return [w for w, _ in spawned]


async def _turn(store: Store, lead_id: str, text: str | None) -> int:
    """One lead turn (text, if any, and a tool call) and its tool result: the turn's seq."""
    use = ToolUseBlock(id=f"toolu_{new_id()}", name="read_thread", input={"ref": "T-x"})
    said = [TextBlock(text=text)] if text else []
    [turn, _] = await store.append(
        lead_id,
        [
            NewMessage(role="assistant", content=[*said, use]),
            NewMessage(role="user", content=[ToolResultBlock(tool_use_id=use.id, content="ok")]),
        ],
    )
    return turn.seq


async def _build(
    store: Store,
    n: int,
    *,
    running: int = 3,
    words: str = LAST_WORDS,
    spec: JobSpec = JOB,
    fork: bool = True,
) -> Job:
    """A job of ``n`` dispatched tasks over two leads (the first handed off after dispatching
    half), all done with checked results but the last ``running`` (queued, running,
    interrupted); task 1's worker handed off to a successor; a fork of task 0's worker."""
    first = await store.create_thread(
        kind=Kind.LEAD,
        title=spec.name,
        task={"job": spec.model_dump(mode="json")},
        status=Status.QUEUED,
        messages=[NewMessage.user(f"Job: {spec.name}")],
    )
    keys = [_key(i) for i in range(n)]
    workers = await _dispatch(store, first.id, keys[: n // 2])
    await _turn(store, first.id, "The first lead's words, not the last ones.")
    await store.leases.acquire(first.id, "A", ttl_s=60, start=Status.RUNNING)
    lead = await store.hand_off(
        Lease(first.id, "A"),
        result=None,
        successor={"id": new_id()},
        messages=[NewMessage.user("Job ledger: the first lead's")],
    )
    workers += await _dispatch(store, lead.id, keys[n // 2 :])
    seq = await _turn(store, lead.id, words)
    await _turn(store, lead.id, None)  # a newer assistant turn without text
    # task 1's worker hands off to a successor worker: the task's entry names the successor
    await store.leases.acquire(workers[1].id, "W", ttl_s=60, start=Status.RUNNING)
    workers[1] = await store.hand_off(
        Lease(workers[1].id, "W"),
        result=None,
        successor={"id": new_id()},
        messages=[NewMessage.user("Task t0001, continued")],
    )
    done = workers[: n - running]
    await asyncio.gather(*(store.set_status(w.id, Status.RUNNING) for w in done))
    await asyncio.gather(
        *(
            store.set_status(
                w.id, Status.DONE, result=_result(i, [f"is {_key(i)} flaky?"] if i % 7 == 0 else [])
            )
            for i, w in enumerate(done)
        )
    )
    still = workers[n - running :]
    if running >= 2:
        await store.set_status(still[1].id, Status.RUNNING)  # no runner: reads interrupted
    if running >= 3:
        await store.set_status(still[2].id, Status.INTERRUPTED)
    forked = None
    if fork:
        forked = await store.fork(workers[0].id, parent_id=lead.id, status=Status.QUEUED)
    return Job(
        job_id=first.id,
        lead=await store.get_thread(lead.id),
        keys=keys,
        workers={k: await store.get_thread(w.id) for k, w in zip(keys, workers, strict=True)},
        running=keys[n - running :],
        fork=forked,
        last_words_ref=format_ref(lead.id, seq),
    )


async def _ledger(store: Store, job: Job, budget: int = 1_000_000) -> Ledger:
    return await job_ledger(store, JOB, job.job_id, budget=budget, previous=job.lead)


async def test_the_ledger_says_the_jobs_state(db: tuple[Store, Path]) -> None:
    store, _ = db
    job = await _build(store, 12)
    ledger = await _ledger(store, job)
    text = ledger.text
    assert text.splitlines()[0] == f"Job ledger: {JOB.name} ({format_ref(job.job_id)})"
    assert f"Goal: {JOB.goal}" in text and f"Workspace: {JOB.workspace_path}" in text
    assert (ledger.tasks, ledger.collapsed, ledger.tokens) == (13, 0, estimate_tokens(text))
    lines = text.splitlines()
    for i, key in enumerate(job.keys):
        w = job.workers[key]
        [head] = [line for line in lines if line.startswith(f"- [{key}] ") and w.ref in line]
        if key in job.running:  # queued, running and interrupted alike, no result yet
            assert head == f"- [{key}] running {w.ref} Fix {key} in module {key}"
            assert lines[lines.index(head) + 1].startswith(("- [", "Other worker threads"))
        else:
            mark = MARKS[VERDICTS[i % 3]]
            assert head == f"- [{key}] done {mark} {w.ref} Fix {key} in module {key}"
            nxt = lines[lines.index(head) + 1]
            assert nxt.startswith(f"  done: task {i}: The failing") and nxt.endswith("…")
            assert len(nxt) == len("  done: ") + SUMMARY_CHARS
    # task 1's newest worker is the successor; its entry points to the earlier turns
    assert job.workers["t0001"].continues is not None
    assert f"  continues {format_ref(job.workers['t0001'].continues)}" in text
    # the fork is an entry of its own, under the dispatched tasks
    others = lines.index("Other worker threads of the job (forks, and their successors):")
    assert job.fork is not None
    assert lines[others + 1] == f"- [t0000] running {job.fork.ref} {job.fork.title}"
    assert lines[others + 2] == f"  fork of {format_ref(job.workers['t0000'].id, 1)}"
    still = [line for line in lines if line.startswith("Still running (")]
    why = "their results reach you as they end"
    assert still == [f"Still running (4; {why}): t0009, t0010, t0011, t0000"]
    assert "Open questions (2):\n- t0007: is t0007 flaky?\n- t0000: is t0000 flaky?" in text
    assert f"The previous lead's last words ({job.last_words_ref}):\n{LAST_WORDS}\n" in text
    assert "first lead's words" not in text
    assert f"Leads so far, oldest first: {format_ref(job.job_id)}, {job.lead.ref}" in text
    assert lines[-1].startswith("Nothing was summarized: every thread named here is whole")
    assert "Do not dispatch again a task that is done." in lines[-1]


async def test_the_same_state_renders_the_same_bytes(db: tuple[Store, Path]) -> None:
    store, path = db
    job = await _build(store, 30)
    budget = (await _ledger(store, job)).tokens // 2  # half of it collapses
    one, two = await _ledger(store, job, budget), await _ledger(store, job, budget)
    assert 0 < one.collapsed < one.tasks
    other = await Store.open(str(path))
    try:
        three = await _ledger(other, job, budget)
    finally:
        await other.close()
    assert one.text.encode() == two.text.encode() == three.text.encode()
    assert one == two == three


@pytest.mark.parametrize("n", [10, 100, 1_000])
async def test_the_budget_holds_and_the_oldest_collapse_first(
    db: tuple[Store, Path], n: int
) -> None:
    store, _ = db
    job = await _build(store, n)
    whole = await _ledger(store, job)
    assert whole.collapsed == 0
    for budget in (whole.tokens * 2 // 3, whole.tokens // 3):
        started = time.perf_counter()
        ledger = await _ledger(store, job, budget)
        took = time.perf_counter() - started
        print(f"ledger of {n} tasks within {budget:,} tokens: {took * 1000:.1f} ms")
        assert ledger.tokens == estimate_tokens(ledger.text) <= budget
        assert 0 < ledger.collapsed < ledger.tasks == n + 1
        _assert_collapsed_oldest_first(ledger, job)


def _assert_collapsed_oldest_first(ledger: Ledger, job: Job) -> None:
    """The ledger's ``collapsed`` oldest entries are one line each (id, status, verdict, ref)
    and every later one is detailed (its title, and a done task's summary below it)."""
    lines = ledger.text.splitlines()
    for i, key in enumerate(job.keys):
        w = job.workers[key]
        status = "running" if key in job.running else f"done {MARKS[VERDICTS[i % 3]]}"
        one = f"- [{key}] {status} {w.ref}"
        [head] = [line for line in lines if line.startswith(f"- [{key}] ") and w.ref in line]
        if i < ledger.collapsed:
            assert head == one
            assert lines[lines.index(head) + 1].startswith(("- [", "Other worker threads"))
        else:
            assert head == f"{one} Fix {key} in module {key}"
            if key not in job.running:
                assert lines[lines.index(head) + 1].startswith(f"  done: task {i}: ")


async def test_every_entry_collapsed_when_the_budget_is_tight(db: tuple[Store, Path]) -> None:
    store, _ = db
    job = await _build(store, 40)
    with pytest.raises(LedgerTooLarge) as caught:
        await _ledger(store, job, budget=10)
    err = caught.value
    assert exit_code_for(err) == EXIT_USAGE
    assert str(err).startswith(f"lead_context_tokens must be at least {err.minimum:,} ")
    assert err.minimum == 2 * err.needed
    fits = await _ledger(store, job, err.minimum // 2)
    assert fits.tokens == err.needed and fits.collapsed == fits.tasks == 41
    for key in job.keys:
        w = job.workers[key]
        assert f"- [{key}] " in fits.text and w.ref in fits.text
    assert "  done: " not in fits.text and "Still running" not in fits.text
    assert f"The previous lead's last words: {job.last_words_ref}" in fits.text
    with pytest.raises(LedgerTooLarge):
        await _ledger(store, job, (err.minimum - 1) // 2)
    # with the successor's prefix counted, the same rule as minimum_lead_context's
    with pytest.raises(LedgerTooLarge) as counted:
        await job_ledger(store, JOB, job.job_id, budget=10, previous=job.lead, prefix_tokens=500)
    assert counted.value.minimum == 500 + 2 * err.needed


async def test_long_last_words_are_cut_with_their_ref(db: tuple[Store, Path]) -> None:
    store, _ = db
    job = await _build(store, 4, words="x" * 5_000)
    text = (await _ledger(store, job)).text
    said = text.split(f"The previous lead's last words ({job.last_words_ref}):\n")[1]
    assert said.startswith("x" * LAST_WORDS_CHARS + f"… (cut: read_thread {job.last_words_ref}")
    assert "x" * (LAST_WORDS_CHARS + 1) not in text


async def test_open_questions_are_bounded(db: tuple[Store, Path]) -> None:
    store, _ = db
    job = await _build(store, 100, running=0)
    text = (await _ledger(store, job)).text
    asked = [k for i, k in enumerate(job.keys) if i % 7 == 0]
    assert f"Open questions ({MAX_QUESTIONS} of {len(asked)}, newest results first):" in text
    shown = [line for line in text.splitlines() if line.endswith(" flaky?")]
    assert shown == [f"- {k}: is {k} flaky?" for k in reversed(asked)][:MAX_QUESTIONS]


JOB_FILE = """
[job]
name = "migrate"
goal = "Move every module to the new logging API."
workspace = "."

{tasks}
"""


async def test_the_minimum_of_a_job_file_holds_its_ledger(
    db: tuple[Store, Path], tmp_path: Path
) -> None:
    store, _ = db
    tasks = "\n".join(
        f'[[task]]\nid = "{_key(i)}"\ntitle = "Migrate module {i}"\nprompt = "Migrate it."\n'
        for i in range(60)
    )
    spec = parse_job(JOB_FILE.format(tasks=tasks), name="job.toml", base_dir=tmp_path)
    prefix = estimate_tokens(lead_system_prompt())
    minimum = minimum_lead_context(spec, prefix_tokens=prefix)
    bare = minimum_lead_context(spec.model_copy(update={"tasks": []}), prefix_tokens=prefix)
    assert minimum > bare > prefix
    # the job as it runs: every task of the file dispatched, ended or running, two leads
    job = await _build(store, 60, spec=spec, fork=False)
    ledger = await job_ledger(
        store, spec, job.job_id, budget=minimum // 2, previous=job.lead, prefix_tokens=prefix
    )
    assert ledger.tokens <= minimum // 2
    with pytest.raises(LedgerTooLarge) as caught:
        await job_ledger(store, spec, job.job_id, budget=0, previous=job.lead, prefix_tokens=prefix)
    # the minimum for the file is never below what its running job needs, and near it
    assert 0.9 * minimum < caught.value.minimum <= minimum


def test_a_lead_context_below_the_minimum_is_refused(tmp_path: Path) -> None:
    tasks = "\n".join(
        f'[[task]]\nid = "{_key(i)}"\ntitle = "Migrate module {i}"\nprompt = "Migrate it."\n'
        for i in range(200)
    )
    spec = parse_job(JOB_FILE.format(tasks=tasks), name="job.toml", base_dir=tmp_path)
    minimum = minimum_lead_context(spec, prefix_tokens=3_000)
    at = spec.model_copy(update={"lead_context_tokens": minimum})
    assert check_lead_context(at, prefix_tokens=3_000) == minimum
    below = spec.model_copy(update={"lead_context_tokens": minimum - 1})
    with pytest.raises(LedgerTooLarge) as caught:
        check_lead_context(below, prefix_tokens=3_000)
    assert caught.value.minimum == minimum and exit_code_for(caught.value) == EXIT_USAGE
    assert f"at least {minimum:,} for this job" in str(caught.value)
    assert "each of its 200 tasks in one line" in str(caught.value)


@given(st.text(alphabet="ab \n\t\u2028", max_size=200), st.integers(1, 60))
def test_a_long_text_is_flattened_from_its_head_only_as_the_whole_would_be(
    text: str, limit: int
) -> None:
    flat = " ".join(text.split())
    assert _one_line(text, limit) == (flat if len(flat) <= limit else flat[: limit - 1] + "…")
