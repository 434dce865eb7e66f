"""threadloom's own git never runs what a worker planted, and never outlives its caller.

Real git throughout: a worker's worktree whose ``.git`` file was rewritten to point at a
repository the worker made (with a clean filter, fsmonitor and hooks of its own), a planted
``config.worktree``, the user's own fsmonitor; and a git that blocks forever on a FIFO, cancelled
or timed out, whose process must be gone afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator
from orchestrator.isolation import WorkerTree, git as gitrun, job_base, merge as mg, worktrees as wt
from store import Status

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def run_git(repo: Path, *args: str) -> str:
    res = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True,
        env={**os.environ, **IDENTITY},
    )  # fmt: skip
    return res.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path)


def make_repo(tmp_path: Path) -> Path:
    """A repository with one commit (``a.txt``) at ``tmp_path/repo``."""
    root = tmp_path / "repo"
    root.mkdir()
    run_git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    run_git(root, "add", "-A")
    run_git(root, "commit", "-q", "-m", "initial")
    return root


def attacker_repo(tmp_path: Path, marker: Path) -> Path:
    """A repository the worker made: a clean/smudge filter, an fsmonitor and hooks that all
    leave ``marker`` behind if anything runs them."""
    evil = tmp_path / "evil"
    evil.mkdir()
    run_git(evil, "init", "-q")
    hooks = evil / "hooks"
    hooks.mkdir()
    for name in ("pre-commit", "post-commit", "reference-transaction", "post-index-change"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / name).chmod(0o755)
    for key, value in (
        ("filter.evil.clean", f"touch {marker}; cat"),
        ("filter.evil.smudge", f"touch {marker}; cat"),
        ("filter.evil.required", "true"),
        ("core.fsmonitor", f"touch {marker}"),
        ("core.hooksPath", str(hooks)),
        ("core.pager", f"touch {marker}"),
    ):
        run_git(evil, "config", key, value)
    return evil


async def new_worktree(repo: Path, name: str = "T1") -> tuple[Path, Path, str]:
    base = await wt.prepare_job(repo)
    common = await wt.common_dir(repo)
    path = common / "threadloom" / "worktrees" / name
    await wt.add_worktree(repo, path, f"threadloom/job/{name}", base.base)
    return common, path, base.base


async def test_a_rewritten_dot_git_file_never_makes_threadloom_run_the_attackers_filter(
    tmp_path: Path, repo: Path
) -> None:
    marker = Path("/tmp") / f"pwned-{uuid.uuid4().hex}"
    user_marker = tmp_path / "user-fsmonitor-ran"
    # the user's own fsmonitor, and worktree-specific config switched on (sparse checkouts do)
    run_git(repo, "config", "core.fsmonitor", f"touch {user_marker}")
    run_git(repo, "config", "extensions.worktreeConfig", "true")
    common, path, base = await new_worktree(repo)
    admin = common / "worktrees" / "T1"
    assert (path / ".git").read_text().strip() == f"gitdir: {admin}"
    evil = attacker_repo(tmp_path, marker)
    # the worker's moves: its .git file now points at its own repository, every file goes
    # through the evil filter, and a config.worktree names the filter too
    (path / ".git").write_text(f"gitdir: {evil / '.git'}\n")
    (path / ".gitattributes").write_text("* filter=evil\n")
    (path / "new.txt").write_text("work\n")
    (admin / "config.worktree").write_text(
        f'[filter "evil"]\n\tclean = touch {marker}; cat\n[include]\n\tpath = {evil}/.git/config\n'
    )
    try:
        cp = wt.Checkpointer(path, thread_id="T1", root=repo)
        commit = await cp(3)
        assert not marker.exists(), "threadloom's git ran the worker's filter"
        assert not user_marker.exists(), "threadloom's git ran the repository's fsmonitor"
        # the checkpoint went to the user's repository, with the worker's files
        assert commit is not None
        assert run_git(repo, "rev-parse", "refs/threadloom/T1/3").strip() == commit
        assert run_git(repo, "rev-parse", "threadloom/job/T1").strip() == commit
        assert run_git(repo, "show", f"{commit}:new.txt") == "work\n"
        assert run_git(repo, "rev-parse", f"{commit}^").strip() == base
        # nothing landed in the attacker's repository
        assert run_git(evil, "for-each-ref") == ""
        assert run_git(evil, "count-objects").startswith("0 objects")
        # the .git file points home again, the planted config is gone
        assert (path / ".git").read_text().strip() == f"gitdir: {admin}"
        assert not (admin / "config.worktree").exists()
        # and the next turn is checkpointed as usual, with nothing run either
        (path / "new.txt").write_text("more work\n")
        again = await cp(5)
        assert again is not None and run_git(repo, "show", f"{again}:new.txt") == "more work\n"
        assert not marker.exists() and not user_marker.exists()
    finally:
        marker.unlink(missing_ok=True)


async def test_a_dot_git_directory_planted_in_the_worktree_is_replaced_by_the_real_pointer(
    tmp_path: Path, repo: Path
) -> None:
    marker = tmp_path / "pwned"
    common, path, _ = await new_worktree(repo)
    (path / ".git").unlink()
    run_git(path, "init", "-q")  # the worker's own repository, right in its worktree
    run_git(path, "config", "filter.evil.clean", f"touch {marker}; cat")
    (path / ".gitattributes").write_text("* filter=evil\n")
    assert await wt.is_worktree(repo, path)
    commit = await wt.Checkpointer(path, thread_id="T1", root=repo)(2)
    assert not marker.exists()
    assert commit is not None and run_git(repo, "cat-file", "-t", commit).strip() == "commit"
    assert (path / ".git").read_text().strip() == f"gitdir: {common / 'worktrees' / 'T1'}"


async def test_an_altered_commondir_is_refused_before_any_git_runs(repo: Path) -> None:
    common, path, _ = await new_worktree(repo)
    (common / "worktrees" / "T1" / "commondir").write_text("/nonexistent\n")
    with pytest.raises(wt.WorktreeError, match="commondir"):
        await wt.Checkpointer(path, thread_id="T1", root=repo)(2)


async def test_a_worker_running_bash_rewrites_its_dot_git_and_the_checkpoint_still_is_safe(
    tmp_path: Path, repo: Path
) -> None:
    """The issue's attack end to end: a worker's bash (plain runner) builds a repository with a
    clean filter, points its worktree's ``.git`` at it and adds a ``.gitattributes``; the
    per-turn checkpoint then runs."""
    marker = Path("/tmp") / f"pwned-{uuid.uuid4().hex}"
    evil = tmp_path / "evil"
    script = (
        f"git init -q {evil} && git -C {evil} config filter.evil.clean 'touch {marker}; cat'"
        f" && git -C {evil} config core.fsmonitor 'touch {marker}'"
        f" && printf 'gitdir: {evil}/.git\\n' > .git && echo '* filter=evil' > .gitattributes"
        " && echo work > new.txt"
    )
    job = _bash_job(tmp_path, repo, script)
    orch = await Orchestrator.open(str(tmp_path / "threads.db"))
    try:
        outcome = await orch.run_job(job)
        assert outcome.status == Status.DONE, outcome.error
        w = await orch.store.get_thread(outcome.workers[0].ref[2:])
        cps = await orch.store.checkpoints.of_thread(w.id)
        assert not marker.exists(), "threadloom's git ran the worker's filter"
        assert cps, "the turn's files were not checkpointed"
        seq, commit = cps[0]
        assert run_git(repo, "rev-parse", f"refs/threadloom/{w.id}/{seq}").strip() == commit
        assert run_git(repo, "show", f"{commit}:new.txt") == "work\n"
        assert run_git(evil, "for-each-ref") == ""
    finally:
        await orch.close()
        marker.unlink(missing_ok=True)


# ----------------------------------------------------------------- item 15: no git left behind


def _pid_reading(fifo: Path) -> int:
    """The pid of our child git reading ``fifo`` (it is running: it opened the FIFO)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if str(fifo).encode() in cmd and cmd[0].endswith(b"git") and stat[1] == me:
            return int(entry.name)
    raise AssertionError(f"no git child reading {fifo}")


def _gone(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "X"


async def _blocked_git(tmp_path: Path, repo: Path, timeout: float | None) -> tuple[Any, int, int]:
    fifo = tmp_path / f"fifo-{uuid.uuid4().hex}"
    os.mkfifo(fifo)
    task = asyncio.ensure_future(wt.git("hash-object", str(fifo), cwd=repo, timeout=timeout))
    # opening the FIFO for writing returns once git has opened it for reading: git is running,
    # and blocks reading it (nothing is written, the writer stays open)
    writer = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)
    return task, _pid_reading(fifo), writer


async def test_a_cancelled_git_is_killed_and_reaped(tmp_path: Path, repo: Path) -> None:
    task, pid, writer = await _blocked_git(tmp_path, repo, None)
    try:
        assert os.getpgid(pid) == pid  # a process group of its own, killed as one
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _gone(pid), f"git {pid} is still there after its caller was cancelled"
    finally:
        os.close(writer)


async def test_a_git_past_its_timeout_is_killed_and_reaped(tmp_path: Path, repo: Path) -> None:
    task, pid, writer = await _blocked_git(tmp_path, repo, 0.5)
    try:
        with pytest.raises(wt.WorktreeError, match="killed"):
            await task
        assert _gone(pid)
    finally:
        os.close(writer)


# ----------------------------------------------------------------- drivers planted in .git/config


def _plant_filter(repo: Path, marker: Path, *, process: bool) -> None:
    """What a plain-runner worker's bash can do: define a filter in the repository's config."""
    run_git(repo, "config", "filter.y.clean", f"touch {marker}; cat")
    run_git(repo, "config", "filter.y.smudge", f"touch {marker}; cat")
    run_git(repo, "config", "filter.y.required", "true")
    if process:
        run_git(repo, "config", "filter.y.process", f"touch {marker}")


@pytest.mark.parametrize("process", [False, True])
async def test_a_filter_a_worker_plants_in_the_repository_config_never_runs(
    tmp_path: Path, repo: Path, process: bool
) -> None:
    marker = tmp_path / "filter-ran"
    _common, path, _base = await new_worktree(repo)
    _plant_filter(repo, marker, process=process)
    (path / ".gitattributes").write_text("* filter=y\n")
    (path / "a.txt").write_text("changed\n")
    commit = await wt.Checkpointer(path, thread_id="T1", root=repo)(2)
    assert not marker.exists(), "threadloom's checkpoint ran a filter planted during the job"
    assert commit is not None and run_git(repo, "show", f"{commit}:a.txt") == "changed\n"


async def test_a_filter_named_in_info_attributes_never_runs(tmp_path: Path, repo: Path) -> None:
    marker = tmp_path / "filter-ran"
    common, path, _base = await new_worktree(repo)
    _plant_filter(repo, marker, process=True)
    (common / "info").mkdir(exist_ok=True)
    (common / "info" / "attributes").write_text("* filter=y\n")
    (path / "a.txt").write_text("changed\n")
    commit = await wt.Checkpointer(path, thread_id="T1", root=repo)(2)
    assert not marker.exists()
    assert commit is not None and run_git(repo, "show", f"{commit}:a.txt") == "changed\n"


async def test_a_driver_brought_in_by_a_planted_include_never_runs(
    tmp_path: Path, repo: Path
) -> None:
    marker = tmp_path / "filter-ran"
    _common, path, _base = await new_worktree(repo)
    extra = tmp_path / "extra.config"
    extra.write_text(f'[filter "z"]\n\tprocess = touch {marker}\n\tclean = touch {marker}\n')
    run_git(repo, "config", "include.path", str(extra))
    run_git(repo, "config", f"includeIf.gitdir:{tmp_path}/.path", str(extra))
    (path / ".gitattributes").write_text("* filter=z\n")
    (path / "a.txt").write_text("changed\n")
    commit = await wt.Checkpointer(path, thread_id="T1", root=repo)(2)
    assert not marker.exists()
    assert commit is not None


async def test_a_worker_redefining_the_users_filter_gets_the_users_filter(
    tmp_path: Path, repo: Path
) -> None:
    marker = tmp_path / "filter-ran"
    (repo / ".gitattributes").write_text("*.txt filter=up\n")
    run_git(repo, "add", ".gitattributes")
    run_git(repo, "commit", "-q", "-m", "attributes")
    # the user's own filter, configured before the job: it keeps working in checkpoints
    run_git(repo, "config", "filter.up.clean", "tr a-z A-Z")
    _common, path, _base = await new_worktree(repo)
    (path / "a.txt").write_text("lower\n")
    first = await wt.Checkpointer(path, thread_id="T1", root=repo)(2)
    assert first is not None and run_git(repo, "show", f"{first}:a.txt") == "LOWER\n"
    # the worker rewrites it: threadloom still runs the user's command, not the worker's
    run_git(repo, "config", "filter.up.clean", f"touch {marker}; cat")
    (path / "a.txt").write_text("again\n")
    second = await wt.Checkpointer(path, thread_id="T1", root=repo)(3)
    assert not marker.exists()
    assert second is not None and run_git(repo, "show", f"{second}:a.txt") == "AGAIN\n"


async def test_a_merge_driver_planted_during_the_job_never_runs(tmp_path: Path, repo: Path) -> None:
    marker = tmp_path / "driver-ran"
    base = await wt.prepare_job(repo)
    common = await wt.common_dir(repo)
    trees = []
    for name, text in (("T1", "one\n"), ("T2", "two\n")):
        path = common / "threadloom" / "worktrees" / name
        await wt.add_worktree(repo, path, f"threadloom/job/{name}", base.base)
        (path / "a.txt").write_text(text)
        assert await wt.Checkpointer(path, thread_id=name, root=repo)(2) is not None
        trees.append(mg.MergeItem(label=name, branch=f"threadloom/job/{name}"))
    run_git(repo, "config", "merge.m.driver", f"touch {marker}; exit 0")
    (repo / ".gitattributes").write_text("* merge=m\n")
    (common / "info").mkdir(exist_ok=True)
    (common / "info" / "attributes").write_text("* merge=m\n")
    report = await mg.merge(repo, trees, into="threadloom/job/merged", start=base.base)
    assert not marker.exists(), "threadloom's merge ran a merge driver planted during the job"
    assert [m["ref"] for m in report.merged] == ["T1"]
    assert [c["ref"] for c in report.conflicts] == ["T2"]


async def test_a_worker_running_bash_plants_a_filter_and_only_the_users_own_filter_runs(
    tmp_path: Path, repo: Path
) -> None:
    """The escape corpus's attack end to end (plain runner): the worker's bash defines filter
    ``y`` (clean and process) in the repository's config and names it for every file; the
    user's own upper-casing filter, configured before the job, still applies to checkpoints —
    also once the job's base is read back from the lead's task JSON by another process."""
    marker = tmp_path / "planted-filter-ran"
    (repo / ".gitattributes").write_text("*.up filter=up\n")
    run_git(repo, "add", ".gitattributes")
    run_git(repo, "commit", "-q", "-m", "attributes")
    run_git(repo, "config", "filter.up.clean", "tr a-z A-Z")
    script = (
        f"git config filter.y.clean 'touch {marker}; cat'"
        f" && git config filter.y.process 'touch {marker}'"
        " && printf '* filter=y\\n*.up filter=up\\n' > .gitattributes"
        " && echo work > new.txt && echo shout > a.up"
    )
    job = _bash_job(tmp_path, repo, script)
    orch = await Orchestrator.open(str(tmp_path / "threads.db"))
    try:
        outcome = await orch.run_job(job)
        assert outcome.status == Status.DONE, outcome.error
        # the worker's own git add (inside its bash) is its business; threadloom's ran nothing
        assert not marker.exists(), "threadloom's checkpoint ran the worker's filter"
        w = await orch.store.get_thread(outcome.workers[0].ref[2:])
        cps = await orch.store.checkpoints.of_thread(w.id)
        assert cps, "the turn's files were not checkpointed"
        commit = cps[-1][1]
        assert run_git(repo, "show", f"{commit}:new.txt") == "work\n"
        assert run_git(repo, "show", f"{commit}:a.up") == "SHOUT\n"
        lead = await orch.store.get_thread(w.job_id)
        assert lead.task is not None
        assert lead.task["isolation"]["drivers"] == {"filter.up.clean": "tr a-z A-Z"}
        # another process: nothing registered until the base is read back from the task JSON
        gitrun._TRUSTED.clear()
        base = await job_base(lead)
        assert base is not None and base.drivers == {"filter.up.clean": "tr a-z A-Z"}
        tree = WorkerTree.of(w)
        assert tree is not None
        (tree.path / "a.up").write_text("again\n")
        again = await wt.Checkpointer(tree.path, thread_id=w.id, root=repo)(99)
        assert again is not None and run_git(repo, "show", f"{again}:a.up") == "AGAIN\n"
        assert not marker.exists()
    finally:
        await orch.close()


def _bash_job(tmp_path: Path, repo: Path, script: str) -> Path:
    """A worktree job (plain runner) whose one worker runs ``script`` in bash, then submits."""
    rules = [
        {"match": "Job: trust", "turns": [{"text": "report"}]},
        {
            "match": "(?m)^Task w:",
            "turns": [
                {"tool_calls": [{"name": "bash", "input": {"command": script}}]},
                {"tool_calls": [{"name": "submit_result",
                                 "input": {"status": "done", "summary": "ok"}}]},
            ],
        },
    ]  # fmt: skip
    (tmp_path / "trust.json").write_text(json.dumps({"rules": rules}))
    job = tmp_path / "trust.toml"
    lines = [
        "[job]", 'name = "trust"', 'goal = "g"', f"workspace = {json.dumps(str(repo))}",
        'model = "scripted:trust.json"', 'isolation = "worktree"', 'sandbox = "none"',
        "[job.worker]", 'tools = ["bash"]', "", "[[task]]", 'id = "w"', 'title = "W"',
        'prompt = "go"',
    ]  # fmt: skip
    job.write_text("\n".join(lines) + "\n")
    return job
