"""Diffs and merges of workers' branches: ``merge`` computes each merge with ``git merge-tree
--write-tree`` (git 2.38+), which needs no working tree at all, and never moves a checked-out
branch; ``worker_diff``/``merge_refs`` take worker refs (``T-…``, ``T-…#n``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store import Store, ThreadInfo, format_ref

from ..errors import RepoStateError
from .git import git, identity_env, ref_exists, resolve_commit
from .job import WorkerTree, job_base
from .worktrees import checked_out_in, diff, merged_branch


@dataclass(frozen=True, slots=True)
class MergeItem:
    label: str  # the worker's ref
    branch: str


@dataclass
class MergeReport:
    into: str
    created: bool
    head: str = ""
    merged: list[dict[str, Any]] = field(default_factory=list)
    already: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "into": self.into,
            "created": self.created,
            "head": self.head,
            "merged": self.merged,
            "already_merged": self.already,
            "conflicts": self.conflicts,
        }


async def merge(root: Path, items: Sequence[MergeItem], *, into: str, start: str) -> MergeReport:
    """Merge each branch into ``into`` (created at ``start`` when missing), in order, as
    ``git merge --no-ff`` would — with ``git merge-tree``, so no working tree is involved. A
    branch that conflicts is not merged: its conflicted files are reported and the next branch
    is tried. ``into`` may not be checked out anywhere (the user's current branch is never
    moved under their working tree); the branch is updated with a compare-and-swap."""
    if (where := await checked_out_in(root, into)) is not None:
        raise RepoStateError(
            f"branch {into} is checked out in {where}: threadloom never merges into a checked-out"
            f" branch; merge into a job branch (the default), then run git merge there yourself"
        )
    fmt = await git("check-ref-format", "--branch", into, cwd=root, check=False)
    if fmt.code != 0:
        raise RepoStateError(f"{into!r} is not a valid branch name")
    old = await resolve_commit(root, f"refs/heads/{into}")
    report = MergeReport(into=into, created=old is None)
    tip = old or start
    env = await identity_env(root)
    for item in items:
        if not await ref_exists(root, f"refs/heads/{item.branch}"):
            raise RepoStateError(f"{item.label}: its branch {item.branch} does not exist")
        entry = {"ref": item.label, "branch": item.branch}
        anc = await git(
            "merge-base", "--is-ancestor", item.branch, tip, cwd=root, check=False, ok=(0, 1)
        )
        if anc.code == 0:
            report.already.append(entry)
            continue
        res = await git(
            "merge-tree", "--write-tree", "--name-only", "--no-messages", tip, item.branch,
            cwd=root, ok=(0, 1),
        )  # fmt: skip
        lines = res.out.splitlines()
        if res.code == 1:
            report.conflicts.append({**entry, "files": sorted(set(lines[1:]))})
            continue
        msg = f"Merge {item.branch} ({item.label})"
        tip = (
            await git("commit-tree", lines[0], "-p", tip, "-p", item.branch, "-m", msg,
                      cwd=root, env=env)
        ).out.strip()  # fmt: skip
        report.merged.append({**entry, "commit": tip})
    if tip != old:
        await git("update-ref", f"refs/heads/{into}", tip, old or "", cwd=root)
    report.head = tip
    return report


async def tree_of(store: Store, ref: str) -> tuple[ThreadInfo, WorkerTree, int | None]:
    """A worker ref (``T-…`` or ``T-…#n``) → its thread, worktree record and anchor."""
    resolved = await store.resolve(ref)
    info = resolved.thread
    tree = WorkerTree.of(info)
    if tree is None:
        raise RepoStateError(
            f'{info.ref} has no worktree: its job did not run with isolation = "worktree"'
        )
    if tree.thread != info.id:
        raise RepoStateError(f"{info.ref} is a fork that has not run yet: it has no files")
    await job_base(await store.get_thread(info.job_id))
    return info, tree, resolved.end if resolved.start is not None else None


async def worker_diff(store: Store, ref: str, *, stat: bool = False) -> dict[str, Any]:
    """The worker's work against the job base: its branch, or its files at message n."""
    info, tree, at = await tree_of(store, ref)
    if at is not None:
        found = await store.checkpoints.at(info.id, at)
        tip = found[1] if found else tree.base
        label = f"{format_ref(info.id, at)}"
    else:
        tip = await resolve_commit(tree.root, f"refs/heads/{tree.branch}") or tree.base
        label = tree.branch
    text = await diff(tree.root, tree.base, tip, stat=stat)
    return {
        "ref": info.ref,
        "branch": tree.branch,
        "base": tree.base,
        "tip": tip,
        "of": label,
        "diff": text,
    }


async def merge_refs(store: Store, refs: list[str], *, into: str | None = None) -> MergeReport:
    """Merge the branches of the worker refs into ``into`` (default: the job branch
    ``threadloom/<job id>/merged``, created at the job base). Conflicts are reported, never
    resolved."""
    if not refs:
        raise RepoStateError("merge needs at least one worker ref")
    items: list[MergeItem] = []
    trees: list[WorkerTree] = []
    jobs: set[str] = set()
    for ref in refs:
        info, tree, _ = await tree_of(store, ref)
        items.append(MergeItem(label=info.ref, branch=tree.branch))
        trees.append(tree)
        jobs.add(info.job_id)
    roots = {t.root for t in trees}
    if len(roots) > 1:
        raise RepoStateError("the refs' worktrees belong to different repositories")
    if into is None:
        if len(jobs) > 1:
            raise RepoStateError("the refs belong to different jobs: name a branch with --into")
        into = merged_branch(next(iter(jobs)))
    return await merge(trees[0].root, items, into=into, start=trees[0].base)
