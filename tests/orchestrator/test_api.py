"""The Python API: ``Orchestrator`` with run_job, dispatch, read, resume, fork and search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator import JobOutcome, Orchestrator, load_job
from store import Status


def write_job(root: Path, tasks: int, rules: list[dict[str, Any]]) -> Path:
    (root / "ws").mkdir(exist_ok=True)
    (root / "script.json").write_text(json.dumps({"rules": rules}))
    body = "".join(
        f'\n[[task]]\nid = "t{i}"\ntitle = "task {i}"\nprompt = "part {i}"\n' for i in range(tasks)
    )
    path = root / "job.toml"
    path.write_text(
        '[job]\nname = "api"\ngoal = "g"\nworkspace = "ws"\nmodel = "scripted:script.json"\n'
        f"max_parallel = 8\n{body}"
    )
    return path


SUBMIT = {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}


async def test_a_job_file_with_many_tasks_dispatches_them_all(tmp_path: Path) -> None:
    job = write_job(
        tmp_path,
        70,
        [
            {"match": "Job: api", "turns": [{"text": "report"}]},
            {"match": "(?m)^Task ", "turns": [SUBMIT]},
        ],
    )
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        out = await orch.run_job(job)
    assert out.status == Status.DONE
    assert len(out.workers) == 70 and all(w.status == "done" for w in out.workers)


async def test_read_search_dispatch_resume_and_fork_from_python(tmp_path: Path) -> None:
    job = write_job(
        tmp_path,
        1,
        [
            {"match": "Job: api", "turns": [{"text": "report"}]},
            {
                "match": "(?m)^Task ",
                "turns": [
                    {
                        "tool_calls": [
                            {"name": "bash", "input": {"command": "echo needle-in-output"}}
                        ]
                    },
                    SUBMIT,
                ],
            },
            {"match": "again", "turns": [{"text": "did it again"}]},
            {"match": "(?m)^Task extra", "turns": [SUBMIT]},
        ],
    )
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        out = await orch.run_job(load_job(job))
        worker = out.workers[0].ref
        page = await orch.read(worker, mode="grep", pattern="needle")
        assert f"{worker}#3" in page.text
        hits = await orch.search("needle-in-output", job=out.job)
        assert {h.ref for h in hits} == {f"{worker}#2", f"{worker}#3"}  # the call and its output
        more = await orch.dispatch(out.job, [{"id": "extra", "title": "X", "prompt": "p"}])
        assert [o.status for o in more] == [Status.DONE]
        again = await orch.resume(worker, "do it again")
        assert isinstance(again, JobOutcome) and again.report == "did it again"
        fork = await orch.fork(f"{worker}#3", "again, differently", run=False)
        assert not isinstance(fork, JobOutcome)
        assert fork.status == Status.IDLE and fork.forked_from is not None
        ran = await orch.fork(f"{worker}#3", "again please")
        assert isinstance(ran, JobOutcome) and ran.status == Status.DONE and ran.ref != worker


async def test_a_leads_time_limit_does_not_count_the_time_its_workers_take(tmp_path: Path) -> None:
    """A lead waits on its dispatch while the workers work (each under its own ``timeout_s``):
    seen live, a 1.5B lead timed out at 900 s while its three workers took 13 minutes, and the
    job lost its report. The loop's ``timeout_s`` bounds workers and readers, not a lead."""
    from workers import Limits, LoopConfig

    slow = {"tool_calls": [{"name": "bash", "input": {"command": "sleep 2; echo slept"}}]}
    job = write_job(
        tmp_path,
        1,
        [
            {"match": "Job: api", "turns": [{"text": "report after the wait"}]},
            {"match": "(?m)^Task ", "turns": [slow, SUBMIT]},
        ],
    )
    config = LoopConfig(limits=Limits(time_s=1.0))
    async with await Orchestrator.open(str(tmp_path / "t.db"), config=config) as orch:
        out = await orch.run_job(job)
    assert out.status == Status.DONE, out
    assert out.report == "report after the wait"
    assert [w.status for w in out.workers] == ["done"]
