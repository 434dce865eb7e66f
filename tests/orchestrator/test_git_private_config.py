"""threadloom's git reads its configuration from a private copy, never from the repository's
``.git/config`` while it runs — so a driver planted at the worst moment (after any check threadloom
could make, just before git starts) still never runs.

Real git and real files throughout. The concurrent attacker of the escape corpus (another
worker's bash, plain runner, writing the shared ``.git/config`` and ``info/attributes``) is
placed deterministically: the spawn of the very git command that would run the driver plants it
first. The copy itself is checked against git's own reading of it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.isolation import git as gitrun, worktrees as wt
from tests.orchestrator.test_git_trust import make_repo, run_git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path)


def plant(repo: Path, marker: Path) -> None:
    """What the racing worker writes: a filter in the shared config, named for every file in
    the shared ``info/attributes``."""
    run_git(repo, "config", "filter.z.clean", f"touch {marker}; cat")
    run_git(repo, "config", "filter.z.smudge", f"touch {marker}; cat")
    info = repo / ".git" / "info"
    info.mkdir(exist_ok=True)
    with (info / "attributes").open("a") as f:
        f.write("* filter=z\n")


@pytest.fixture
def plant_before(
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[Callable[[list[str]], bool], Callable[[], None]], list[list[str]]]:
    """``plant_before(when, action)``: run ``action`` once, right before the first git process
    whose arguments satisfy ``when`` starts; returns the list of the argument lists seen."""
    real = asyncio.create_subprocess_exec

    def install(when: Callable[[list[str]], bool], action: Callable[[], None]) -> list[list[str]]:
        seen: list[list[str]] = []
        done: list[bool] = []

        async def spawn(*argv: str, **kw: Any) -> asyncio.subprocess.Process:
            args = list(argv)
            seen.append(args)
            if args and args[0] == "git" and not done and when(args):
                done.append(True)
                action()
            return await real(*argv, **kw)

        monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
        return seen

    return install  # type: ignore[return-value]


def _is(*words: str) -> Callable[[list[str]], bool]:
    return lambda args: all(w in args for w in words)


async def job_tree(repo: Path, name: str) -> tuple[str, Path]:
    """The job's base (drivers trusted as now) and where worker ``name``'s worktree goes."""
    base = await wt.prepare_job(repo)
    return base.base, await wt.common_dir(repo) / "threadloom" / "worktrees" / name


async def test_a_filter_planted_just_before_the_checkpoint_starts_never_runs(
    tmp_path: Path, repo: Path, plant_before: Any
) -> None:
    marker = tmp_path / "filter-ran"
    base, path = await job_tree(repo, "T1")
    await wt.add_worktree(repo, path, "threadloom/job/T1", base)
    (path / "new.txt").write_text("changed\n")
    seen = plant_before(_is("add", "-A"), lambda: plant(repo, marker))
    commit = await wt.Checkpointer(path, thread_id="T1", root=repo)(2)
    assert any("add" in a and "-A" in a for a in seen), "the checkpoint never ran git add"
    assert not marker.exists(), "threadloom's checkpoint ran a filter planted as it started"
    assert commit is not None and run_git(repo, "show", f"{commit}:new.txt") == "changed\n"
    # the repository's own git does read it (the plant is real, not a no-op): a changed file
    # (another size), so that git must clean it. An unchanged one is cleaned again only when
    # git's index write smudged it as racily clean (file and index in the same second), so
    # this proof failed whenever the checkpoint's index write crossed a second (seen in CI)
    (path / "new.txt").write_text("changed again\n")
    run_git(path, "add", "-A")
    assert marker.exists()


async def test_a_filter_planted_just_before_worktree_add_never_runs(
    tmp_path: Path, repo: Path, plant_before: Any
) -> None:
    marker = tmp_path / "filter-ran"
    base, path = await job_tree(repo, "T2")
    plant_before(_is("worktree", "add"), lambda: plant(repo, marker))
    await wt.add_worktree(repo, path, "threadloom/job/T2", base)
    assert not marker.exists(), "threadloom's worktree add ran a smudge filter planted as it began"
    assert (path / "a.txt").read_text() == "a\n"


async def test_a_new_worktree_points_at_the_repository_not_at_the_private_copy(
    repo: Path,
) -> None:
    base, path = await job_tree(repo, "T3")
    await wt.add_worktree(repo, path, "threadloom/job/T3", base)
    common = await wt.common_dir(repo)
    pointer = (path / ".git").read_text()
    assert pointer == f"gitdir: {common / 'worktrees' / 'T3'}\n"
    # the user's own git, with no private copy anywhere, sees the worktree and its branch
    assert run_git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "threadloom/job/T3"
    assert str(path) in run_git(repo, "worktree", "list")


async def test_the_private_copy_holds_the_repositorys_settings_and_only_trusted_drivers(
    tmp_path: Path, repo: Path
) -> None:
    # a setting that changes what git does (text eol conversion), the user's filter, odd values
    run_git(repo, "config", "filter.up.clean", "tr a-z A-Z")
    run_git(repo, "config", "core.autocrlf", "input")
    run_git(repo, "config", 'weird.sub "with" \\ and.dots.key', 'a "quoted" \\ value\twith tab')
    run_git(repo, "config", "weird.multi.line", "one\ntwo")
    run_git(repo, "config", "--add", "weird.multi.line", "three")
    inc = tmp_path / "inc.config"
    inc.write_text("[included]\n\tkey = from-include\n")
    run_git(repo, "config", "include.path", str(inc))
    base = await wt.prepare_job(repo)
    assert base.drivers == {"filter.up.clean": "tr a-z A-Z"}
    # a driver defined after the job started is not trusted; it must not be in the copy
    run_git(repo, "config", "filter.late.clean", "touch /nonexistent; cat")
    common = await wt.common_dir(repo)
    shadow = await gitrun.private_common_dir(common)
    assert not str(shadow).startswith(str(repo))
    listing = run_git(shadow, "config", "--file", str(shadow / "config"), "--list", "-z")
    entries = dict(e.partition("\n")[::2] for e in listing.split("\0") if e)
    assert entries["core.autocrlf"] == "input"
    assert entries['weird.sub "with" \\ and.dots.key'] == 'a "quoted" \\ value\twith tab'
    assert entries["included.key"] == "from-include"
    assert entries["filter.up.clean"] == "tr a-z A-Z"
    assert "filter.late.clean" not in entries
    assert not any(k.startswith(("include.", "includeif.")) for k in entries)
    values = [
        e.partition("\n")[2] for e in listing.split("\0") if e.startswith("weird.multi.line\n")
    ]
    assert values == ["one\ntwo", "three"]
    # everything else is the repository's own: objects, refs and the worktree records
    for name in ("objects", "refs", "worktrees", "HEAD", "info", "packed-refs"):
        assert (shadow / name).is_symlink() and os.readlink(shadow / name) == str(common / name)
    assert not (shadow / "hooks").exists()


async def test_refs_packed_through_the_private_copy_land_in_the_repository(repo: Path) -> None:
    base = await wt.prepare_job(repo)
    await gitrun.git("update-ref", "refs/threadloom/x/1", base.base, cwd=repo)
    # pack-refs runs on the private copy (not a no-driver command): packed-refs is written
    # through the link, into the user's .git, never into the temporary directory
    await gitrun.git("pack-refs", "--all", cwd=repo)
    assert "refs/threadloom/x/1" in (repo / ".git" / "packed-refs").read_text()
    shadow = await gitrun.private_common_dir(await wt.common_dir(repo))
    assert (shadow / "packed-refs").is_symlink()
    await gitrun.git("update-ref", "-d", "refs/threadloom/x/1", cwd=repo)
    await gitrun.git("gc", "--prune=now", "--quiet", cwd=repo)
    assert run_git(repo, "rev-parse", "HEAD").strip() == base.base
    assert "refs/threadloom/x/1" not in run_git(repo, "for-each-ref")
