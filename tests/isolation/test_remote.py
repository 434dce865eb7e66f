"""Worktree isolation across hosts without Temporal (``[job] remote``): jobs run in-process on
the scripted model, with a bare repository in ``tmp_path`` as the remote and
``THREADLOOM_MIRRORS`` pointed at one directory per "host". Real git throughout.

The base, each worker's branch and every checkpoint land in the remote; the worktrees come
from the host's mirror, never from the lead's repository; ``diff`` and ``merge`` see the work
from the lead's repository after a fetch; a fork or a resume on another host restores the files
of its checkpoint, and a host that ran a thread before remakes its stale worktree. A bad remote
is one line, exit 2, nothing stored; a URL with a credential is refused by the job file.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator
from orchestrator.errors import JobFileError, RepoStateError
from orchestrator.isolation import remote as rm
from orchestrator.jobs import parse_job
from store import Status
from tests.orchestrator.test_cli_helpers import assert_one_error_line, invoke
from tests.orchestrator.test_worktrees import git, job_file, lead_rule, outputs, read, submit, write

TASKS = [
    {"id": "a", "title": "A", "prompt": "write a"},
    {"id": "b", "title": "B", "prompt": "write b"},
]
RULES = [
    lead_rule(),
    {"match": "(?m)^Task a:", "turns": [write("a.txt", "v1\n"), write("a.txt", "v2\n"),
                                         submit("a written")]},
    {"match": "(?m)^Task b:", "turns": [write("b.txt", "from b\n"), submit("b written")]},
    {"match": "try again", "turns": [read("a.txt"), submit("fork read")]},
    {"match": "more please", "turns": [write("a.txt", "v3\n"), submit("v3")]},
    {"match": "look again", "turns": [read("a.txt"), submit("looked")]},
]  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "shared.txt").write_text("original\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    return bare


def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str) -> Path:
    """From now on this process is host ``name``: its mirrors live in its own directory."""
    home = tmp_path / "hosts" / name
    monkeypatch.setenv(rm.MIRRORS_ENV, str(home))
    return home


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split() for line in out.splitlines())


@pytest.fixture
async def orch(tmp_path: Path) -> Any:
    o = await Orchestrator.open(str(tmp_path / "threads.db"))
    try:
        yield o
    finally:
        await o.close()


async def run_job(tmp_path: Path, repo: Path, remote: Path, orch: Orchestrator) -> dict[str, Any]:
    extra = f'remote = "{remote.as_uri()}"'
    outcome = await orch.run_job(job_file(tmp_path, repo, RULES, TASKS, extra=extra))
    assert outcome.status == Status.DONE, outcome.error
    workers = {w.task: await orch.store.get_thread(w.ref[2:]) for w in outcome.workers}
    return {"job": outcome.job[2:], "a": workers["a"], "b": workers["b"]}


async def test_base_branches_and_checkpoints_land_in_the_remote_and_diff_merge_see_them(
    tmp_path: Path, repo: Path, remote: Path, orch: Orchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = host(monkeypatch, tmp_path, "one")
    ran = await run_job(tmp_path, repo, remote, orch)
    job, a, b = ran["job"], ran["a"], ran["b"]
    there = refs(remote)
    base = a.task["worktree"]["base"]
    assert there[rm.base_ref(base)] == base
    for w in (a, b):
        assert f"refs/heads/threadloom/{job}/{w.task['id']}" in there
        # every checkpoint the store names is on the remote, under the job's namespace
        cps = await orch.store.checkpoints.of_thread(w.id)
        assert cps
        for seq, commit in cps:
            assert there[rm.remote_checkpoint_ref(job, w.id, seq)] == commit
        # the worker worked in a worktree of this host's mirror, not of the lead's repository,
        # and left none behind once its work was on the remote
        assert Path(w.task["workspace"]).is_relative_to(home)
        assert not Path(w.task["workspace"]).exists()
    assert [s for s, _ in await orch.store.checkpoints.of_thread(a.id)] == [3, 5]
    assert git(repo, "worktree", "list").count("\n") == 1
    assert not any(r.startswith(f"refs/heads/threadloom/{job}/") for r in refs(repo))

    d = await orch.diff(a.ref)  # fetched into the lead's repository first
    assert "+v2" in d["diff"] and d["branch"] == a.result.branch
    early = await orch.diff(f"{a.ref}#3")
    assert "+v1" in early["diff"]
    assert git(repo, "show", f"{a.result.branch}:a.txt") == "v2\n"
    merged = await orch.merge([a.ref, b.ref])
    assert not merged["conflicts"] and len(merged["merged"]) == 2
    assert git(repo, "show", f"{merged['into']}:b.txt") == "from b\n"
    assert git(repo, "show", f"{merged['into']}:a.txt") == "v2\n"
    assert git(repo, "status", "--porcelain") == ""  # the user's checkout untouched


async def test_a_fork_and_a_resume_on_another_host_restore_the_checkpoints_files(
    tmp_path: Path, repo: Path, remote: Path, orch: Orchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    host(monkeypatch, tmp_path, "one")
    a = (await run_job(tmp_path, repo, remote, orch))["a"]
    two = host(monkeypatch, tmp_path, "two")
    forked = await orch.fork(f"{a.ref}#3", "try again")
    fork = await orch.store.get_thread(forked.ref[2:])
    assert fork.status == Status.DONE
    assert "v1" in outputs(await orch.store.messages(fork.id, start=4))[0]  # the files of #3
    assert Path(fork.task["workspace"]).is_relative_to(two)  # type: ignore[index]

    # the worker goes on on host two, then back on host one: one's worktree (at v2) is stale
    assert (await orch.resume(a.ref, "more please")).status == Status.DONE
    host(monkeypatch, tmp_path, "one")
    assert (await orch.resume(a.ref, "look again")).status == Status.DONE
    assert "v3" in outputs(await orch.store.messages(a.id))[-2]


async def test_gc_branches_deletes_the_jobs_refs_here_and_on_the_remote(
    tmp_path: Path, repo: Path, remote: Path, orch: Orchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    host(monkeypatch, tmp_path, "one")
    ran = await run_job(tmp_path, repo, remote, orch)
    job = ran["job"]
    report = await orch.gc(job=f"T-{job}", branches=True)
    assert report["removed"] == []  # worktrees are the hosts', never touched from here
    assert f"refs/heads/threadloom/{job}/a" in report["deleted_refs"]
    left = refs(remote)
    assert not [r for r in left if r.startswith((f"refs/heads/threadloom/{job}/",
                                                 f"refs/threadloom/jobs/{job}/"))]  # fmt: skip
    assert not [r for r in refs(repo) if r.startswith(f"refs/heads/threadloom/{job}/")]


def _bad_remote_run(tmp_path: Path, repo: Path, url: str) -> Any:
    path = job_file(tmp_path, repo, RULES, TASKS, extra=f'remote = "{url}"')
    return invoke("run", str(path), db=tmp_path / "threads.db")


@pytest.mark.parametrize("kind", ["missing", "not-a-repo", "refused"])
async def test_a_bad_remote_is_one_line_exit_2_naming_it_with_nothing_stored(
    tmp_path: Path, repo: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host(monkeypatch, tmp_path, "one")
    target = tmp_path / kind
    if kind == "not-a-repo":
        target.mkdir()
        (target / "README").write_text("just a folder\n")
    elif kind == "refused":
        subprocess.run(["git", "init", "-q", "--bare", str(target)], check=True)
        subprocess.run(["git", "-C", str(target), "config", "receive.maxInputSize", "1"],
                       check=True)  # fmt: skip
    res = await asyncio.to_thread(_bad_remote_run, tmp_path, repo, target.as_uri())
    assert res.exit_code == 2, res.output
    assert_one_error_line(res.stderr, "job.remote", f"remote {target.as_uri()}")
    async with await Orchestrator.open(str(tmp_path / "threads.db")) as o:
        assert await o.store.list_threads() == []


def test_the_job_file_refuses_credentials_and_remote_without_worktrees(tmp_path: Path) -> None:
    head = '[job]\nname = "n"\ngoal = "g"\nisolation = "worktree"\n'
    with pytest.raises(JobFileError) as err:
        parse_job(head + 'remote = "https://me:s3cret@example.com/r.git"\n', name="j.toml",
                  base_dir=tmp_path)  # fmt: skip
    assert str(err.value).startswith("j.toml:5: job.remote: the URL holds a credential")
    assert "s3cret" not in str(err.value) and "me:" not in str(err.value)
    with pytest.raises(JobFileError, match=r"j\.toml:5: job\.remote: the URL holds a credential"):
        parse_job(head + 'remote = "https://tok@example.com/r.git"\n', name="j.toml",
                  base_dir=tmp_path)  # fmt: skip
    with pytest.raises(JobFileError, match=r'j.toml:4: job.remote: needs isolation = "worktree"'):
        parse_job('[job]\nname = "n"\ngoal = "g"\nremote = "/r.git"\n', name="j.toml",
                  base_dir=tmp_path)  # fmt: skip
    ssh = parse_job(head + 'remote = "git@example.com:team/r.git"\n', name="j", base_dir=tmp_path)
    assert ssh.remote == "git@example.com:team/r.git"
    rel = parse_job(head + 'remote = "shared/r.git"\n', name="j", base_dir=tmp_path)
    assert rel.remote == str(tmp_path.resolve() / "shared" / "r.git")


def test_urls_are_shown_with_their_user_info_masked() -> None:
    assert rm.redact("fatal: https://me:pw@h.example/r.git gone") == (
        "fatal: https://***@h.example/r.git gone"
    )
    assert rm.redact("ssh://git@h/r") == "ssh://***@h/r"
    assert rm.redact("/plain/path.git") == "/plain/path.git"
    assert "pw" not in str(rm.mirror_path("https://me:pw@h.example/r.git", Path("/m")))


async def test_a_mirror_fetches_a_missing_commit_and_pushes_branch_and_checkpoint(
    tmp_path: Path, repo: Path, remote: Path
) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    await rm.publish_base(repo, head, str(remote))
    mirror = rm.Mirror(str(remote), rm.mirror_path(str(remote), tmp_path / "m"))
    await mirror.ensure_commit(head)  # fetched by commit into a fresh bare mirror
    assert git(mirror.path, "cat-file", "-t", head).strip() == "commit"
    git(mirror.path, "update-ref", "refs/heads/threadloom/J/t", head)
    git(mirror.path, "update-ref", "refs/threadloom/T1/3", head)
    await mirror.push("J", branch="threadloom/J/t", checkpoint=("T1", 3))
    there = refs(remote)
    assert there["refs/heads/threadloom/J/t"] == head
    assert there[rm.remote_checkpoint_ref("J", "T1", 3)] == head
    await rm.fetch_job(repo, str(remote), "J")  # the lead's side: local names back
    assert refs(repo)["refs/threadloom/T1/3"] == head
    with pytest.raises(Exception, match=r"remote .*nowhere.*: fetching"):
        await rm.Mirror(str(tmp_path / "nowhere"), tmp_path / "m2.git").ensure_commit("a" * 40)
    with pytest.raises(RepoStateError):
        await rm.publish_base(repo, head, str(tmp_path / "nowhere"))


async def test_network_git_honours_the_hosts_own_configuration_and_nothing_else_does(
    tmp_path: Path, repo: Path, remote: Path, orch: Orchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's global configuration reaches the remote (here ``url.*.insteadOf``, as a
    credential helper would); threadloom's other git still reads none of it."""
    home = tmp_path / "home"
    home.mkdir()
    alias = "https://git.example.invalid/team/r.git"
    (home / ".gitconfig").write_text(
        f'[url "{remote.as_uri()}"]\n\tinsteadOf = {alias}\n[core]\n\thooksPath = /nowhere\n'
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setattr(rm, "_transport", None)
    pairs = await rm.transport_config()
    assert f"url.{remote.as_uri()}.insteadof={alias}" in pairs
    assert not any("hookspath" in p.lower() for p in pairs)  # only what reaching a remote needs
    host(monkeypatch, tmp_path, "one")
    outcome = await orch.run_job(
        job_file(tmp_path, repo, RULES, TASKS, extra=f'remote = "{alias}"')
    )
    assert outcome.status == Status.DONE, outcome.error
    job = outcome.job[2:]
    assert f"refs/heads/threadloom/{job}/a" in refs(remote)
    lead = await orch.store.get_thread(job)
    assert lead.task["isolation"]["remote"] == alias  # type: ignore[index]
