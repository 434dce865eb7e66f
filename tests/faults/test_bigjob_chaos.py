"""SIGKILL of jobs that outgrow their lead (issue 27, SPEC "Jobs larger than one context").

Each trial: a scripted job of 8–48 workers whose lead, with a small ``lead_context_tokens``,
must hand off several times (``tests/bigjob``) → ``run`` killed after a random number of stored
turns (and, one trial in two, the first ``resume`` killed too) → ``PRAGMA integrity_check`` →
``resume`` to the end → every task has exactly one dispatch row and one result, no worker ran
its command twice, every result reached a lead, no lead request exceeded the ceiling, the leads
form one chain (a handoff interrupted and done again left one successor), every tool call is
answered. ``THREADLOOM_FAULT_TRIALS`` sets the number of trials, ``THREADLOOM_FAULT_SEED`` the
seed (``tests/faults/conftest.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from store import Kind, Store
from tests.bigjob import big_job, problems
from tests.faults.conftest import integrity, reported_turns, seed, trials, with_store

CEILING = 6000


@dataclass
class Trial:
    index: int
    workers: int
    kills: list[int]
    outcome: str = ""
    handoffs: int = 0
    problems: list[str] = field(default_factory=list)


def _command(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", "--db", str(root / "threads.db"), *args]


def _run_until_killed(root: Path, args: list[str], after_turns: int) -> bool:
    """Start ``threadloom ARGS``; SIGKILL it once the job logs report ``after_turns`` stored
    turns in all. True when it was killed, False when it ended first."""
    proc = subprocess.Popen(
        _command(root, *args),
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    limit = time.monotonic() + 120
    while proc.poll() is None and len(reported_turns(root / "logs")) < after_turns:
        assert time.monotonic() < limit, "the job never got that far"
        time.sleep(0.002)
    if proc.poll() is not None:
        return False
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return True


async def _leads(store: Store) -> list[tuple[str, str | None]]:
    """The leads stored, newest first."""
    return [(t.ref, t.job_id) for t in await store.list_threads(kind=Kind.LEAD)]


def run_trial(root: Path, index: int, rng: random.Random) -> Trial:
    root.mkdir(parents=True)
    batches, size = rng.randint(2, 6), rng.randint(4, 8)
    job = big_job(root, batches=batches, size=size, ceiling=CEILING, summary_chars=600)
    workers = batches * size
    turns = workers * 2 + batches + 1  # every turn the job stores, its lead's report last
    kills = [rng.randrange(1, turns - 1)]
    if rng.random() < 0.5:
        kills.append(rng.randrange(kills[0], turns))
    trial = Trial(index, workers, kills)
    db = root / "threads.db"
    ended = not _run_until_killed(root, ["run", str(job)], kills[0])
    leads: list[tuple[str, str | None]] = with_store(db, _leads) if db.exists() else []
    if not leads:
        trial.outcome = "killed before the job existed"
        res = subprocess.run(
            _command(root, "--json", "run", str(job)),
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    else:
        newest = leads[0][0]
        if not ended and len(kills) > 1:
            _run_until_killed(root, ["resume", newest], kills[1])
            leads = with_store(db, _leads)
            newest = leads[0][0]
        trial.outcome = "finished before the kill" if ended else "killed mid-job"
        check = integrity(db)
        if check != "ok":
            trial.problems.append(f"integrity_check after the kill: {check}")
        res = subprocess.run(
            _command(root, "--json", "resume", newest),
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    if res.returncode != 0:
        trial.problems.append(f"resume/run exit {res.returncode}: {res.stderr[-600:]}")
        return trial
    job_ref = json.loads(res.stdout)["job"]

    async def final(store: Store) -> list[str]:
        found = await problems(store, db, job_ref[2:], tasks=workers, ceiling=CEILING)
        trial.handoffs = sum(
            1 for t in await store.list_threads(job_id=job_ref[2:], kind=Kind.LEAD) if t.continues
        )
        return found

    trial.problems += with_store(db, final)
    if integrity(db) != "ok":
        trial.problems.append(f"integrity_check after resume: {integrity(db)}")
    return trial


@pytest.mark.slow
def test_sigkill_during_jobs_that_hand_off_loses_no_result_and_runs_nothing_twice(
    tmp_path: Path,
) -> None:
    n, s = trials(), seed()
    rngs = [random.Random(s * 1000 + i) for i in range(n)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda i: run_trial(tmp_path / f"t{i}", i, rngs[i]), range(n)))
    failed = [t for t in results if t.problems]
    handoffs = sum(t.handoffs for t in results)
    summary = {
        "trials": n,
        "seed": s,
        "failures": len(failed),
        "outcomes": dict(Counter(t.outcome for t in results)),
        "workers": sum(t.workers for t in results),
        "handoffs": handoffs,
        "second_kills": sum(len(t.kills) > 1 for t in results),
    }
    print("\nbigjob chaos:", json.dumps(summary))
    assert not failed, "\n".join(
        f"trial {t.index} ({t.workers} workers, killed after {t.kills} turns, seed {s}):"
        f" {t.problems}"
        for t in failed[:5]
    )
    # the jobs really outgrew their leads, and the kills really landed inside them
    assert handoffs >= n
    assert Counter(t.outcome for t in results)["killed mid-job"] >= n // 2
