"""Handoffs through the ``threadloom`` command (SPEC "Jobs larger than one context"): a thread
whose next request would exceed its ceiling ends ``done`` and a successor of the same kind
carries on; the job sees one task with one result; no request ever exceeds the ceiling."""

from __future__ import annotations

import asyncio
import itertools
import re
import sqlite3
from typing import Any

from orchestrator import Orchestrator
from store import Kind, Store, ThreadInfo
from tests.bigjob import REPORT, big_job, problems
from tests.e2e.conftest import Env, answered_turns, bash, db_read, submit
from tests.fakes.chat_api import FakeChatAPI

WORKER_CEILING = 6000


async def _job_state(store: Store, job_ref: str) -> dict[str, Any]:
    job = (await store.resolve(job_ref)).thread
    threads = await store.list_threads(job_id=job.id, oldest_first=True)
    return {
        "threads": threads,
        "messages": {t.id: await store.messages(t.id) for t in threads},
        "dispatches": await store.dispatches.of_job(job.id),
    }


def largest_requests(env: Env) -> dict[str, int]:
    """Each thread's largest request as its model counted it (its usage rows' whole input)."""
    with sqlite3.connect(env.db) as conn:
        rows = conn.execute(
            "SELECT thread_id, max(input_tokens + cache_read_input_tokens"
            " + cache_creation_input_tokens) FROM usage GROUP BY thread_id"
        ).fetchall()
    return {str(t): int(n) for t, n in rows}


def worker_job(env: Env) -> Any:
    noisy = "seq 1 4000"  # ~19 KB of output a call: each seen capped, each still fills the context
    return env.job(
        "w",
        [
            {"match": "Job: w", "turns": [{"text": "Report: {{ref:big}}"}]},
            {
                "match": "You continue the work of",
                "turns": [bash("wc -l < n.txt"), submit("counted 4000 lines after the handoff")],
            },
            {
                "match": "(?m)^Task big:",
                "turns": [bash(f"{noisy} > n.txt; {noisy}")]
                + [bash(noisy)] * 12
                + [submit("never reached: the context fills first")],
            },
        ],
        [{"id": "big", "title": "Fill the context", "prompt": "run the noisy command"}],
        worker=f"context_tokens = {WORKER_CEILING}",
    )


def test_a_worker_whose_context_fills_hands_off_to_a_successor_of_the_same_task(
    env: Env,
) -> None:
    res = env.run("--json", "run", str(worker_job(env)))
    assert res.code == 0, res.stderr
    doc = res.json
    state = db_read(env, lambda s: _job_state(s, doc["job"]))
    workers: list[ThreadInfo] = [t for t in state["threads"] if t.kind == Kind.WORKER]
    assert len(workers) >= 2
    chain = [workers[0]]
    while chain[-1].continued_by is not None:
        chain.append(next(w for w in workers if w.id == chain[-1].continued_by))
    assert len(chain) == len(workers)  # every worker is one link of the task's one chain
    first, last = chain[0], chain[-1]
    assert all(w.status == "done" for w in chain)
    assert all(w.task and w.task["id"] == "big" for w in chain)
    for before, after in itertools.pairwise(chain):
        assert after.continues == before.id and after.parent_id == before.parent_id
        opening = state["messages"][after.id][0].text
        assert opening.startswith("Task big: Fill the context")
        assert f"You continue the work of {before.ref}" in opening
        assert "read_thread" in after.tools
    # the job sees one task with one result: the newest worker's
    assert [(w["task"], w["ref"]) for w in doc["workers"]] == [("big", last.ref)]
    assert doc["workers"][0]["summary"] == "counted 4000 lines after the handoff"
    assert doc["report"] == f"Report: {last.ref}"
    [row] = state["dispatches"]
    assert row.worker_id == last.id
    assert first.result is None and last.result is not None
    for w in chain:
        answered_turns(state["messages"][w.id], where=w.ref)
    largest = largest_requests(env)
    assert all(largest[w.id] <= WORKER_CEILING for w in chain), largest


def test_a_lead_whose_context_fills_hands_off_through_the_ledger_and_loses_nothing(
    env: Env,
) -> None:
    ceiling = 6000
    job = big_job(env.root, batches=6, size=5, ceiling=ceiling)
    res = env.run("--json", "run", str(job))
    assert res.code == 0, res.stderr
    doc = res.json
    assert doc["status"] == "done" and doc["report"] == REPORT
    assert doc["job"] != doc["lead"]  # the report is the newest lead's
    assert len(doc["workers"]) == 30
    state = db_read(env, lambda s: _job_state(s, doc["job"]))
    leads = [t for t in state["threads"] if t.kind == Kind.LEAD]
    assert len(leads) >= 3, [t.ref for t in leads]
    assert doc["lead"] == leads[-1].ref and doc["job"] == leads[0].ref
    for before, after in itertools.pairwise(leads):
        assert before.status == "done" and before.continued_by == after.id
        assert after.continues == before.id and after.job_id == leads[0].id
        first = state["messages"][after.id]
        assert first[0].role == "user" and first[0].text.startswith("Job ledger: big")
        # the ledger is the successor's only user message with text before its first call
        assert not [m for m in first[1:] if m.role == "user" and m.text]
    assert db_read(env, lambda s: problems(s, env.db, leads[0].id, tasks=30, ceiling=ceiling)) == []
    # the API renders the job's ledger as its newest lead would hand it off now: the same bytes
    # each time, every task in it, within half the ceiling
    ledgers = [asyncio.run(_ledger(env, ref)) for ref in (doc["job"], doc["lead"], doc["job"])]
    assert ledgers[0] == ledgers[1] == ledgers[2]
    text, tokens = ledgers[0]
    assert text.startswith("Job ledger: big") and tokens <= ceiling // 2
    assert all(f"[b{b:03d}-t{t:02d}]" in text for b in range(6) for t in range(5))


async def _ledger(env: Env, ref: str) -> tuple[str, int]:
    async with await Orchestrator.open(str(env.db)) as orch:
        ledger = await orch.ledger(ref)
    return ledger.text, ledger.tokens


def test_a_lead_context_below_the_jobs_minimum_is_refused_before_anything_is_stored(
    env: Env,
) -> None:
    job = big_job(env.root, batches=2, size=3, ceiling=900)
    res = env.run("run", str(job))
    assert res.code == 2, res.stderr
    [line] = res.stderr.strip().splitlines()
    assert "lead_context_tokens" in line
    named = re.search(r"at least ([\d,]+)", line)
    assert named is not None, line
    smallest = int(named[1].replace(",", ""))
    assert smallest > 900
    assert not env.db.exists() or db_read(env, lambda s: s.list_threads()) == []
    # the value it names works
    job = big_job(env.root, batches=1, size=3, ceiling=smallest)
    assert env.run("run", str(job)).code == 0


def test_a_lead_the_provider_refuses_as_too_long_hands_off_and_the_job_ends(env: Env) -> None:
    """The reactive path: llama-server's own overflow answer to the lead's request (after its
    first dispatch) makes the lead hand off; its successor's request, the ledger, is answered."""

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        said = " ".join(str(m.get("content")) for m in request["messages"])
        return {"content": "Report: T-ok" if "Job ledger:" in said else "not the ledger"}

    job = env.job(
        "o",
        [{"match": "(?m)^Task a:", "turns": [bash("echo a > a.txt"), submit("wrote a.txt")]}],
        [{"id": "a", "title": "Write a", "prompt": "write a.txt"}],
        worker="max_turns = 5\n",
        model=None,
    )
    with FakeChatAPI() as api:
        text = job.read_text().replace(
            'model = "scripted:o.json"',
            f'model = "openai:m@{api.base_url}"\nworker_model = "scripted:o.json"',
        )
        job.write_text(text)
        api.inject("llama_ctx", prompt=9000, ctx=8192)
        api.respond_with(reply)
        res = env.run("--json", "run", str(job))
        sent = list(api.chat_requests)
    assert res.code == 0, res.stderr
    doc = res.json
    assert doc["report"].startswith("Report:") and doc["job"] != doc["lead"]
    assert len(sent) == 2  # the refused request, then the successor's: no retry of the first
    assert "Job ledger:" not in str(sent[0]["messages"]) and "Job ledger: o" in str(sent[1])
    state = db_read(env, lambda s: _job_state(s, doc["job"]))
    first, second = [t for t in state["threads"] if t.kind == Kind.LEAD]
    assert first.continued_by == second.id and first.status == "done"
    assert "refused its request as too long" in (first.result.summary if first.result else "")
