"""Worktree isolation with real git: a worktree and branch per worker, a checkpoint per turn
that changed files, forks and resumes that restore the files, diffs, merges that report
conflicts, gc — and the repository states that are refused or captured.

Jobs run in-process through ``Orchestrator`` on the scripted model; the workers use the file
tools (not bash), so nothing here depends on a sandbox being installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator
from orchestrator.errors import RepoStateError
from store import Status, Store, ToolResultBlock
from tests.orchestrator.test_cli_helpers import invoke, json_out

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def git(repo: Path, *args: str) -> str:
    res = subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **IDENTITY},
    )
    return res.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "shared.txt").write_text("original\n")
    (root / "notes.md").write_text("notes\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write_file", "input": {"path": path, "content": content}}]}


def read(path: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read_file", "input": {"path": path}}]}


def submit(summary: str) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": summary}}]
    }


def job_file(
    tmp_path: Path,
    repo: Path,
    rules: list[dict[str, Any]],
    tasks: list[dict[str, str]],
    *,
    name: str = "wt",
    extra: str = "",
) -> Path:
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps({"rules": rules}))
    lines = [
        "[job]",
        f'name = "{name}"',
        'goal = "the goal"',
        f"workspace = {json.dumps(str(repo))}",
        f'model = "scripted:{script.name}"',
        'isolation = "worktree"',
        "max_parallel = 2",
        extra,
        "[job.worker]",
        'tools = ["read_file", "write_file", "edit_file", "list_files"]',
    ]
    for t in tasks:
        lines += ["", "[[task]]"] + [f"{k} = {json.dumps(v)}" for k, v in t.items()]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def lead_rule(name: str = "wt") -> dict[str, Any]:
    return {"match": f"Job: {name}", "turns": [{"text": "report"}]}


def outputs(msgs: list[Any]) -> list[str]:
    out = []
    for m in msgs:
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                out.append(b.content if isinstance(b.content, str) else b.content[0].text)
    return out


def branch_file(repo: Path, branch: str, path: str) -> str:
    return git(repo, "show", f"{branch}:{path}")


async def cli(*args: str, db: Path) -> Any:
    """``threadloom`` in-process, on a thread of its own (it runs its own event loop)."""
    return await asyncio.to_thread(invoke, *args, db=db)


@pytest.fixture
async def orch(tmp_path: Path) -> Any:
    o = await Orchestrator.open(str(tmp_path / "threads.db"))
    try:
        yield o
    finally:
        await o.close()


async def run_two_editors(tmp_path: Path, repo: Path, orch: Orchestrator) -> dict[str, Any]:
    rules = [
        lead_rule(),
        {
            "match": "(?m)^Task a:",
            "turns": [write("shared.txt", "from a\n"), read("shared.txt"), submit("a edited")],
        },
        {
            "match": "(?m)^Task b:",
            "turns": [write("shared.txt", "from b\n"), read("shared.txt"), submit("b edited")],
        },
    ]
    tasks = [
        {"id": "a", "title": "Edit as a", "prompt": "edit shared.txt"},
        {"id": "b", "title": "Edit as b", "prompt": "edit shared.txt"},
    ]
    outcome = await orch.run_job(job_file(tmp_path, repo, rules, tasks))
    assert outcome.status == Status.DONE, outcome.error
    workers = {w.task: await orch.store.get_thread(w.ref[2:]) for w in outcome.workers}
    return {"outcome": outcome, "workers": workers}


# ----------------------------------------------------------------- the tests


async def test_parallel_workers_editing_one_file_see_only_their_own_edits_and_merge_conflicts(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    ran = await run_two_editors(tmp_path, repo, orch)
    a, b = ran["workers"]["a"], ran["workers"]["b"]
    for w, mine in ((a, "from a"), (b, "from b")):
        reads = [o for o in outputs(await orch.store.messages(w.id)) if "from " in o]
        assert reads and all(mine in o for o in reads), reads
        assert (
            w.result is not None
            and w.result.branch == f"threadloom/{ran['outcome'].job[2:]}/{w.task['id']}"
        )  # type: ignore[index]
        assert "shared.txt" in (w.result.diff_stat or "")
        assert branch_file(repo, w.result.branch, "shared.txt") == f"{mine}\n"
    # the user's checkout was never touched
    assert (repo / "shared.txt").read_text() == "original\n"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--show-current").strip() == "main"

    res = await cli("--json", "merge", a.ref, b.ref, db=tmp_path / "threads.db")
    assert res.exit_code == 1, res.output
    doc = json_out(res)
    assert [m["ref"] for m in doc["merged"]] == [a.ref]
    assert doc["conflicts"] == [
        {"ref": b.ref, "branch": b.result.branch, "files": ["shared.txt"]}  # type: ignore[union-attr]
    ]
    assert doc["into"].endswith("/merged") and doc["created"] is True
    assert branch_file(repo, doc["into"], "shared.txt") == "from a\n"
    assert git(repo, "status", "--porcelain") == "" and (repo / "shared.txt").read_text() == (
        "original\n"
    )


async def test_a_fork_at_an_early_message_gets_the_files_of_then_and_leaves_its_parent_alone(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    rules = [
        lead_rule(),
        {
            "match": "(?m)^Task w:",
            "turns": [write("f.txt", "v1\n"), write("f.txt", "v2\n"), submit("wrote v2")],
        },
        {"match": "try again", "turns": [read("f.txt"), write("f.txt", "fork\n"), submit("fork")]},
    ]
    outcome = await orch.run_job(
        job_file(tmp_path, repo, rules, [{"id": "w", "title": "W", "prompt": "write"}])
    )
    parent = await orch.store.get_thread(outcome.workers[0].ref[2:])
    ptree = Path(parent.task["worktree"]["path"])  # type: ignore[index]
    assert (ptree / "f.txt").read_text() == "v2\n"
    # checkpoints at the tool results of the two writes (#3, #5); none for the submit turn
    assert [s for s, _ in await orch.store.checkpoints.of_thread(parent.id)] == [3, 5]

    forked = await orch.fork(f"{parent.ref}#3", "try again")
    assert not isinstance(forked, Store) and forked.status == Status.DONE  # type: ignore[union-attr]
    fork = await orch.store.get_thread(forked.ref[2:])  # type: ignore[union-attr]
    assert "v1" in outputs(await orch.store.messages(fork.id, start=4))[0]  # the files of #3
    ftree = Path(fork.task["worktree"]["path"])  # type: ignore[index]
    assert ftree != ptree and (ftree / "f.txt").read_text() == "fork\n"
    assert fork.result is not None and fork.result.branch != parent.result.branch  # type: ignore[union-attr]
    assert branch_file(repo, fork.result.branch or "", "f.txt") == "fork\n"
    # the parent's worktree and branch are untouched
    assert (ptree / "f.txt").read_text() == "v2\n"
    assert branch_file(repo, parent.result.branch or "", "f.txt") == "v2\n"  # type: ignore[union-attr]


async def test_resume_after_the_worktree_was_deleted_recreates_it_from_the_last_checkpoint(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    rules = [
        lead_rule(),
        {"match": "(?m)^Task w:", "turns": [write("g.txt", "kept\n"), submit("wrote g")]},
        {"match": "look again", "turns": [read("g.txt"), submit("still there")]},
    ]
    outcome = await orch.run_job(
        job_file(tmp_path, repo, rules, [{"id": "w", "title": "W", "prompt": "write"}])
    )
    w = await orch.store.get_thread(outcome.workers[0].ref[2:])
    tree = Path(w.task["worktree"]["path"])  # type: ignore[index]
    shutil.rmtree(tree)
    again = await orch.resume(w.ref, "look again")
    assert again.status == Status.DONE
    assert (tree / "g.txt").read_text() == "kept\n"
    assert "kept" in outputs(await orch.store.messages(w.id))[-2]


async def test_a_workspace_that_is_not_a_git_repository_is_refused_before_anything_is_stored(
    tmp_path: Path, orch: Orchestrator
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    job = job_file(tmp_path, plain, [lead_rule()], [])
    with pytest.raises(RepoStateError, match=r'not one.*isolation = "none"'):
        await orch.run_job(job)
    assert await orch.store.list_threads() == []
    res = await cli("run", str(job), db=tmp_path / "threads.db")
    assert res.exit_code == 2
    assert 'isolation = "none"' in res.stderr and len(res.stderr.strip().splitlines()) == 1


async def test_a_merge_in_progress_is_refused_with_exit_2(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "shared.txt").write_text("other\n")
    git(repo, "commit", "-q", "-am", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "shared.txt").write_text("main\n")
    git(repo, "commit", "-q", "-am", "main")
    subprocess.run(["git", "merge", "other"], cwd=repo, capture_output=True, check=False)
    job = job_file(tmp_path, repo, [lead_rule()], [])
    with pytest.raises(RepoStateError, match="merge is in progress"):
        await orch.run_job(job)
    res = await cli("run", str(job), db=tmp_path / "threads.db")
    assert res.exit_code == 2 and 'isolation = "none"' in res.stderr
    assert await orch.store.list_threads() == []


async def test_a_dirty_tree_is_the_base_of_the_workers_and_stays_as_the_user_left_it(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    (repo / "shared.txt").write_text("uncommitted\n")
    (repo / "new.txt").write_text("untracked\n")
    (repo / "notes.md").unlink()
    git(repo, "add", "shared.txt")  # staged, and then changed again below
    (repo / "shared.txt").write_text("uncommitted, changed after staging\n")
    before = (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"))
    staged = git(repo, "diff", "--cached")
    rules = [
        lead_rule(),
        {"match": "(?m)^Task w:", "turns": [read("shared.txt"), read("new.txt"), submit("read")]},
    ]
    outcome = await orch.run_job(
        job_file(tmp_path, repo, rules, [{"id": "w", "title": "W", "prompt": "read"}])
    )
    w = await orch.store.get_thread(outcome.workers[0].ref[2:])
    seen = outputs(await orch.store.messages(w.id))
    assert "changed after staging" in seen[0] and "untracked" in seen[1]
    tree = Path(w.task["worktree"]["path"])  # type: ignore[index]
    assert not (tree / "notes.md").exists()
    lead = await orch.store.get_thread(outcome.lead[2:])
    iso = lead.task["isolation"]  # type: ignore[index]
    assert iso["dirty"] is True and iso["base"] != iso["head"]
    assert git(repo, "rev-parse", f"refs/threadloom/{lead.id}/base").strip() == iso["base"]
    # nothing of the user's moved: HEAD, index, working tree, untracked files
    assert (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")) == before
    assert git(repo, "diff", "--cached") == staged
    assert (repo / "new.txt").read_text() == "untracked\n"
    assert ".git" not in git(repo, "status", "--porcelain", "--untracked-files=all")


# ----------------------------------------------------------------- diff, merge, gc, checkpoints


async def test_turns_that_change_nothing_record_no_checkpoint(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    rules = [
        lead_rule(),
        {
            "match": "(?m)^Task w:",
            "turns": [read("shared.txt"), write("x.txt", "x\n"), read("x.txt"), submit("ok")],
        },
    ]
    outcome = await orch.run_job(
        job_file(tmp_path, repo, rules, [{"id": "w", "title": "W", "prompt": "go"}])
    )
    w = await orch.store.get_thread(outcome.workers[0].ref[2:])
    cps = await orch.store.checkpoints.of_thread(w.id)
    assert [s for s, _ in cps] == [5]
    assert git(repo, "rev-parse", f"refs/threadloom/{w.id}/5").strip() == cps[0][1]
    assert await orch.store.checkpoints.at(w.id, 4) is None
    assert await orch.store.checkpoints.at(w.id) == cps[0]


async def test_diff_prints_the_workers_changes_against_the_base(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    ran = await run_two_editors(tmp_path, repo, orch)
    a = ran["workers"]["a"]
    res = await cli("diff", a.ref, db=tmp_path / "threads.db")
    assert res.exit_code == 0, res.output
    assert "-original" in res.stdout and "+from a" in res.stdout
    early = await cli("--json", "diff", f"{a.ref}#2", db=tmp_path / "threads.db")
    assert json_out(early)["diff"] == ""  # before the write's result, nothing had changed
    stat = await cli("diff", "--stat", a.ref, db=tmp_path / "threads.db")
    assert "shared.txt" in stat.stdout and "1 file changed" in stat.stdout


async def test_merge_never_moves_a_checked_out_branch_and_merges_disjoint_work(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    rules = [
        lead_rule(),
        {"match": "(?m)^Task a:", "turns": [write("a.txt", "a\n"), submit("a")]},
        {"match": "(?m)^Task b:", "turns": [write("b.txt", "b\n"), submit("b")]},
    ]
    tasks = [{"id": x, "title": x, "prompt": x} for x in ("a", "b")]
    outcome = await orch.run_job(job_file(tmp_path, repo, rules, tasks))
    refs = [w.ref for w in outcome.workers]
    db = tmp_path / "threads.db"
    refused = await cli("merge", *refs, "--into", "main", db=db)
    assert refused.exit_code == 2 and "checked out" in refused.stderr
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "HEAD")
    res = await cli("--json", "merge", *refs, db=db)
    assert res.exit_code == 0, res.output
    doc = json_out(res)
    assert len(doc["merged"]) == 2 and doc["conflicts"] == []
    assert sorted(git(repo, "ls-tree", "--name-only", doc["into"]).split()) == [
        "a.txt",
        "b.txt",
        "notes.md",
        "shared.txt",
    ]
    assert len(git(repo, "rev-list", "--merges", doc["into"]).split()) == 2  # --no-ff
    again = json_out(await cli("--json", "merge", *refs, db=db))
    assert len(again["already_merged"]) == 2 and again["head"] == doc["head"]


async def test_the_lead_merges_with_its_merge_tool_and_hears_the_conflicts(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    rules = [
        {
            "match": "Job: wt",
            "turns": [
                {"tool_calls": [{"name": "merge", "input": {"refs": ["{{ref:a}}", "{{ref:b}}"]}}]},
                {"text": "merged what I could"},
            ],
        },
        {"match": "(?m)^Task a:", "turns": [write("shared.txt", "A\n"), submit("a")]},
        {"match": "(?m)^Task b:", "turns": [write("shared.txt", "B\n"), submit("b")]},
    ]
    tasks = [{"id": x, "title": x, "prompt": x} for x in ("a", "b")]
    outcome = await orch.run_job(job_file(tmp_path, repo, rules, tasks))
    lead = await orch.store.get_thread(outcome.lead[2:])
    assert "merge" in lead.tools
    text = outputs(await orch.store.messages(lead.id))[-1]
    assert '"files": ["shared.txt"]' in text and "NOT merged" in text


async def test_gc_removes_finished_jobs_worktrees_keeps_branches_and_interrupted_jobs(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    ran = await run_two_editors(tmp_path, repo, orch)
    a = ran["workers"]["a"]
    tree = Path(a.task["worktree"]["path"])
    db = tmp_path / "threads.db"

    # an interrupted thread in the job keeps every worktree of the job
    await orch.store.set_status(a.id, Status.RUNNING)
    await orch.store.set_status(a.id, Status.INTERRUPTED)
    kept = json_out(await cli("--json", "gc", db=db))
    assert kept["removed"] == [] and len(kept["kept"]) == 2 and tree.is_dir()

    await orch.store.set_status(a.id, Status.RUNNING)
    await orch.store.set_status(a.id, Status.DONE)
    doc = json_out(await cli("--json", "gc", db=db))
    assert {r["ref"] for r in doc["removed"]} == {w.ref for w in ran["workers"].values()}
    assert not tree.exists() and doc["deleted_refs"] == []
    assert a.result.branch in git(repo, "branch", "--list", "threadloom/*")
    assert "threadloom/" not in git(repo, "worktree", "list")

    doc = json_out(await cli("--json", "gc", "--branches", db=db))
    assert f"refs/heads/{a.result.branch}" in doc["deleted_refs"]
    assert git(repo, "for-each-ref", "refs/threadloom/") == ""
    assert git(repo, "branch", "--list", "threadloom/*") == ""


async def test_checkpoint_at_walks_the_fork_ancestry(tmp_path: Path) -> None:
    from store import NewMessage

    store = await Store.open(str(tmp_path / "cp.db"))
    try:
        t = await store.create_thread(
            kind="worker", messages=[NewMessage.user(f"m{i}") for i in range(1)]
        )
        for i in range(5):
            await store.append(
                t.id,
                [NewMessage(role="assistant", content=[{"type": "text", "text": f"a{i}"}])],  # type: ignore[list-item]
            )
            await store.append(t.id, NewMessage.user(f"u{i}"))
        await store.checkpoints.record(t.id, 3, "c3")
        await store.checkpoints.record(t.id, 7, "c7")
        fork = await store.fork(t.id, at=5)
        await store.append(
            fork.id,
            NewMessage(role="assistant", content=[{"type": "text", "text": "f"}]),  # type: ignore[list-item]
        )
        assert await store.checkpoints.at(fork.id) == (3, "c3")  # the parent's #7 is past #5
        await store.checkpoints.record(fork.id, 6, "f6")
        assert await store.checkpoints.at(fork.id) == (6, "f6")
        assert await store.checkpoints.at(fork.id, 5) == (3, "c3")
        assert await store.checkpoints.at(t.id) == (7, "c7")
        assert await store.checkpoints.at(t.id, 2) is None
        await store.checkpoints.record(t.id, 7, "c7b")  # a replayed step replaces its checkpoint
        assert await store.checkpoints.at(t.id, 8) == (7, "c7b")
    finally:
        await store.close()


async def test_repository_hooks_never_run_because_threadloom_ran_git(
    tmp_path: Path, repo: Path, orch: Orchestrator
) -> None:
    ran = tmp_path / "hook-ran"
    hooks = repo / ".git" / "hooks"
    for name in ("post-checkout", "pre-commit", "post-commit", "pre-merge-commit", "post-merge"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {ran}\n")
        hook.chmod(0o755)
    await run_two_editors(tmp_path, repo, orch)
    assert not ran.exists(), ran.read_text()


@pytest.mark.parametrize("layout", ["readme", "elsewhere-in-repo"])
async def test_the_database_and_threadloom_dirs_never_enter_a_base_commit_or_checkpoint(
    tmp_path: Path, repo: Path, layout: str
) -> None:
    """README's layout (the database in the workspace's ``.threadloom/``) and a database kept
    elsewhere inside the repository: neither it, its ``-wal``/``-shm``, the job logs nor any
    ``.threadloom/`` directory become git objects, in the base commit or any checkpoint."""
    db = repo / (".threadloom/threads.db" if layout == "readme" else "data/tl.db")
    logs = db.parent / "logs"
    logs.mkdir(parents=True)
    secret = "transcript-of-an-earlier-job-5f1e"
    (logs / "old-job.log").write_text(f"{secret}\n")
    (repo / "sub" / ".threadloom").mkdir(parents=True)
    (repo / "sub" / ".threadloom" / "state").write_text(f"{secret}\n")
    (repo / "dirty.txt").write_text("uncommitted\n")  # so the base is a snapshot commit
    rules = [
        lead_rule(),
        {
            "match": "(?m)^Task w:",
            "turns": [
                write("x.txt", "x\n"),
                write("deep/.threadloom/planted", f"{secret}\n"),
                submit("ok"),
            ],
        },
    ]
    o = await Orchestrator.open(str(db))
    try:
        outcome = await o.run_job(
            job_file(tmp_path, repo, rules, [{"id": "w", "title": "W", "prompt": "go"}])
        )
        assert outcome.status == Status.DONE, outcome.error
        lead = await o.store.get_thread(outcome.lead[2:])
        w = await o.store.get_thread(outcome.workers[0].ref[2:])
        cps = await o.store.checkpoints.of_thread(w.id)
    finally:
        await o.close()
    base = lead.task["isolation"]["base"]  # type: ignore[index]
    assert lead.task["isolation"]["dirty"] is True  # type: ignore[index]
    assert cps
    rel_db = db.relative_to(repo).as_posix()
    for commit in [base, *(c for _, c in cps)]:
        paths = git(repo, "ls-tree", "-r", "--name-only", commit).split()
        assert "dirty.txt" in paths
        leaked = [p for p in paths if ".threadloom" in p.split("/") or p.startswith(rel_db)]
        leaked += [p for p in paths if p.startswith(f"{Path(rel_db).parent.as_posix()}/logs")]
        assert leaked == [], f"{commit} captured {leaked}"
    assert "x.txt" in git(repo, "ls-tree", "-r", "--name-only", cps[-1][1]).split()
    # no object at all holds the database or the logs' contents
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=repo, capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert b"SQLite format 3" not in objects
    assert secret.encode() not in objects
