"""Worktree isolation of a job, between the store and git (``worktrees``): the three calls
the runtime makes around a worker's run — ``ensure``, ``checkpointer``, ``finish`` — and ``gc``.

What is stored where:

- the lead's task JSON holds ``isolation`` = ``{root, rel, base, head, dirty, drivers}``
  (``JobBase``): the repository, the workspace's path inside it, the base commit (also kept at
  ``refs/threadloom/<job id>/base`` so git never collects it), and the filter, merge and diff
  drivers the repository's configuration had when the job started — the only ones threadloom's
  git runs for the job, whichever process runs it (a job recorded without ``drivers`` trusts
  none);
- each worker's task JSON holds ``workspace`` (its worktree, plus ``rel``) and ``worktree`` =
  ``{thread, path, branch, base, root}``. ``thread`` names the owner: a fork starts with a copy
  of its source's task, sees that the worktree is not its own, and gets a fresh one;
- each checkpoint is a row ``(thread, seq, commit)`` in the store, and the ref
  ``refs/threadloom/<thread id>/<seq>``.

A worktree is created when its thread first runs, at the checkpoint in force at the thread's
last message (the job base when there is none) — the same rule makes a fork start from its fork
point's files and recreates a deleted worktree on resume.

With ``[job] remote`` (``JobBase.remote``, workers on many hosts) the worktrees are made from
this host's mirror of the remote instead of the lead's repository (``remote``): the worker's
``worktree`` record keeps the lead's repository as ``root``, its ``workspace`` is where the host
running it now put it; checkpoints and branches are pushed before they are recorded, and the
lead's repository fetches them before ``diff``, ``merge`` and ``gc``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from store import Result, Status, Store, ThreadInfo

from . import git, remote as rm, worktrees as wt

log = structlog.get_logger("threadloom.isolation")

WORKTREES_DIR = ("threadloom", "worktrees")


@dataclass(frozen=True, slots=True)
class WorkerTree:
    """A worker's worktree as recorded in its task JSON."""

    thread: str
    path: Path
    branch: str
    base: str
    root: Path
    rel: str

    @classmethod
    def of(cls, info: ThreadInfo) -> WorkerTree | None:
        task = info.task or {}
        raw = task.get("worktree")
        if not isinstance(raw, dict):
            return None
        return cls(
            thread=str(raw["thread"]),
            path=Path(raw["path"]),
            branch=str(raw["branch"]),
            base=str(raw["base"]),
            root=Path(raw["root"]),
            rel=str(raw.get("rel", "")),
        )

    @property
    def workspace(self) -> Path:
        return self.path / self.rel if self.rel else self.path

    def task_fields(self) -> dict[str, Any]:
        return {
            "workspace": str(self.workspace),
            "worktree": {
                "thread": self.thread,
                "path": str(self.path),
                "branch": self.branch,
                "base": self.base,
                "root": str(self.root),
                "rel": self.rel,
            },
        }


class Isolation:
    """Worktree isolation of one job: where its worktrees go, how they are named, created,
    checkpointed, and how a worker's result is given its branch and diff stat."""

    def __init__(
        self,
        store: Store,
        *,
        job_id: str,
        base: wt.JobBase,
        worktrees: Path,
        db: Path | None = None,
        mirror: rm.Mirror | None = None,
    ) -> None:
        self.store = store
        self.excludes = wt.capture_excludes(base.root, db)
        self.job_id = job_id
        self.base = base
        self.worktrees = worktrees
        self.mirror = mirror
        self._taken: set[str] = set()

    @classmethod
    async def of_job(
        cls, store: Store, lead: ThreadInfo, *, db: Path | None = None
    ) -> Isolation | None:
        """The isolation of the job ``lead`` runs, or None (``isolation = "none"``). ``db`` is
        the database file, never captured by a checkpoint when it lies inside the repository."""
        base = _stored_base(lead)
        if base is None:
            return None
        if base.remote is not None:
            # nothing of the lead's repository is touched: this host may not even have it
            mirror = rm.Mirror(base.remote, rm.mirror_path(base.remote))
            return cls(
                store, job_id=lead.id, base=base, worktrees=mirror.path.joinpath(*WORKTREES_DIR),
                db=db, mirror=mirror,
            )  # fmt: skip
        await base.trust()
        common = await git.common_dir(base.root)
        return cls(
            store, job_id=lead.id, base=base, worktrees=common.joinpath(*WORKTREES_DIR), db=db
        )

    # ------------------------------------------------------------------ naming

    async def _branch(self, wanted: str, fallback: str) -> str:
        name = wanted if wanted not in self._taken else fallback
        if self.mirror is None:  # a remote job's names are new: its job's, or a fork's id
            name = await wt.free_branch(self.base.root, name, fallback)
        self._taken.add(name)
        return name

    async def for_new_worker(self, thread_id: str, task_id: str) -> WorkerTree:
        """Where a new worker will work: ``threadloom/<job>/<task id>`` (with the thread's id
        appended if that branch exists already)."""
        prefix = f"threadloom/{self.job_id}/{wt.slug(task_id)}"
        branch = await self._branch(prefix, f"{prefix}-{thread_id[-6:]}")
        return self._tree(thread_id, branch)

    def _tree(self, thread_id: str, branch: str) -> WorkerTree:
        return WorkerTree(
            thread=thread_id,
            path=self.worktrees / thread_id,
            branch=branch,
            base=self.base.base,
            root=self.base.root,
            rel=self.base.rel,
        )

    # ------------------------------------------------------------------ running

    async def ensure(self, info: ThreadInfo) -> tuple[ThreadInfo, WorkerTree | None]:
        """Make the thread's worktree exist before it runs. A thread carrying another thread's
        worktree (a fork) is given its own first; a worktree that was removed is recreated at
        the thread's last checkpoint."""
        tree = WorkerTree.of(info)
        if tree is None:
            return info, None
        if tree.thread != info.id:
            task_id = str((info.task or {}).get("id") or "task")
            prefix = f"threadloom/{self.job_id}/{wt.slug(task_id)}-fork-{info.id[-6:]}"
            tree = self._tree(info.id, await self._branch(prefix, f"{prefix}-{info.id[-10:-6]}"))
            info = await self.store.update_thread(
                info.id, task={**(info.task or {}), **tree.task_fields()}
            )
        if self.mirror is not None:
            return await self._ensure_mirrored(info, tree, self.mirror)
        if not await wt.is_worktree(tree.root, tree.path):
            found = await self.store.checkpoints.at(info.id, info.head_seq)
            start = found[1] if found else tree.base
            await wt.add_worktree(tree.root, tree.path, tree.branch, start)
            log.info(
                "worktree.created",
                thread=info.ref,
                path=str(tree.path),
                branch=tree.branch,
                at=found[0] if found else None,
            )
        return info, tree

    async def _ensure_mirrored(
        self, info: ThreadInfo, tree: WorkerTree, mirror: rm.Mirror
    ) -> tuple[ThreadInfo, WorkerTree]:
        """A remote job's worktree on this host: from the mirror, at the checkpoint in force
        (fetched when the mirror lacks it). One found at another commit — this host ran the
        thread before another host moved it on — is made again from the store's checkpoint."""
        local = dataclasses.replace(tree, path=self.worktrees / info.id, root=mirror.path)
        found = await self.store.checkpoints.at(info.id, info.head_seq)
        start = found[1] if found else tree.base
        await mirror.open()
        if await wt.is_worktree(local.root, local.path):
            if await wt.worktree_head(local.root, local.path) == start:
                return await self._placed(info, local), local
            log.info("worktree.stale", thread=info.ref, path=str(local.path), at=start)
            await wt.remove_worktree(local.root, local.path)
        await mirror.ensure_commit(start)
        await wt.add_worktree(local.root, local.path, local.branch, start)
        log.info(
            "worktree.created",
            thread=info.ref,
            path=str(local.path),
            branch=local.branch,
            at=found[0] if found else None,
            remote=mirror.shown,
        )
        return await self._placed(info, local), local

    async def _placed(self, info: ThreadInfo, local: WorkerTree) -> ThreadInfo:
        """The thread's ``workspace`` is where this host put its worktree (its tools run there)."""
        task = info.task or {}
        if task.get("workspace") == str(local.workspace):
            return info
        return await self.store.update_thread(
            info.id, task={**task, "workspace": str(local.workspace)}
        )

    async def checkpointer(
        self, info: ThreadInfo, tree: WorkerTree
    ) -> Callable[[int], Awaitable[None]]:
        """The loop's ``after_tools`` hook: a checkpoint of the worktree after each turn that
        changed files, recorded with the tool-results message."""
        head = await wt.worktree_head(tree.root, tree.path)
        cp = wt.Checkpointer(
            tree.path, thread_id=info.id, last=head, root=tree.root, excludes=self.excludes
        )

        async def after_tools(seq: int) -> None:
            commit = await cp(seq)
            if commit is not None:
                if self.mirror is not None:  # on the remote before the store names it
                    await self.mirror.push(
                        self.job_id, branch=tree.branch, checkpoint=(info.id, seq)
                    )
                await self.store.checkpoints.record(info.id, seq, commit)

        return after_tools

    async def changes(self, tree: WorkerTree) -> dict[str, str]:
        """The worker's workspace against the job's base now (``worktrees.worktree_changes``):
        what the result check compares a result's ``changes`` with."""
        return await wt.worktree_changes(
            tree.path, base=tree.base, rel=tree.rel, root=tree.root, excludes=self.excludes
        )

    async def finish(
        self, info: ThreadInfo, tree: WorkerTree, result: Result | None
    ) -> Result | None:
        """The result with the worker's branch and diff stat against the job base, stored.
        A remote job's worker leaves no worktree on its host: everything is on the remote, and
        a resume or fork makes one again from its checkpoint, on whichever host runs it."""
        if result is None:
            return None
        if self.mirror is not None:  # the branch exists on the remote even with no checkpoint
            await self.mirror.push(self.job_id, branch=tree.branch, checkpoint=None)
        tip = await git.resolve_commit(tree.root, f"refs/heads/{tree.branch}") or tree.base
        stat = await wt.diff_stat(tree.root, tree.base, tip)
        result = result.model_copy(update={"branch": tree.branch, "diff_stat": stat})
        await self.store.set_result(info.id, result)
        if self.mirror is not None and await wt.remove_worktree(tree.root, tree.path):
            log.info("worktree.removed", thread=info.ref, path=str(tree.path))
        return result


async def job_base(lead: ThreadInfo) -> wt.JobBase | None:
    """The base of the job ``lead`` runs (None without worktree isolation), its drivers
    registered as the repository's trusted ones before any git of the job runs. A remote job's
    branches and checkpoints are fetched into the lead's repository first (``diff``, ``merge``
    and ``gc`` work there)."""
    base = _stored_base(lead)
    if base is None:
        return None
    await base.trust()
    if base.remote is not None:
        await rm.fetch_job(base.root, base.remote, lead.id)
    return base


def _stored_base(lead: ThreadInfo) -> wt.JobBase | None:
    raw = (lead.task or {}).get("isolation")
    if not isinstance(raw, dict):
        return None
    drivers = raw.get("drivers")
    base = wt.JobBase(
        root=Path(raw["root"]),
        rel=str(raw.get("rel", "")),
        base=str(raw["base"]),
        head=raw.get("head"),
        dirty=bool(raw.get("dirty")),
        drivers={str(k): str(v) for k, v in drivers.items()} if isinstance(drivers, dict) else {},
        remote=str(raw["remote"]) if raw.get("remote") else None,
    )
    return base


async def job_writes(workspace: Path) -> list[Path]:
    """Where a worktree job of ``workspace`` writes, besides the workspace: the repository's
    top level and its git common directory (objects, refs, the workers' worktrees). Not a
    repository: ``RepoStateError``."""
    root = await wt.repo_root(workspace)
    return [root, await git.common_dir(root)]


async def start_job(
    workspace: Path, *, db: Path | None = None, remote: str | None = None
) -> wt.JobBase:
    """Check the workspace and capture the job's base (before anything is stored); ``db``, the
    database file, is left out of it (with ``.threadloom/`` and the job logs). With ``remote``
    the base is pushed there first (a remote that fails is exit 2, nothing stored)."""
    base = await wt.prepare_job(workspace, db=db)
    if remote is None:
        return base
    await rm.publish_base(base.root, base.base, remote)
    return dataclasses.replace(base, remote=remote)


async def record_job_base(base: wt.JobBase, job_id: str) -> None:
    await git.set_ref(base.root, wt.job_base_ref(job_id), base.base)


# ----------------------------------------------------------------- gc


@dataclass
class GcReport:
    removed: list[dict[str, str]]
    kept: list[dict[str, str]]
    deleted_refs: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "kept": self.kept, "deleted_refs": self.deleted_refs}


FINISHED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})


async def gc(store: Store, *, job_id: str | None = None, branches: bool = False) -> GcReport:
    """Remove the worktrees of finished jobs (every thread done, failed or cancelled — an
    interrupted or running job keeps its worktrees, so it can be resumed as it was). Branches
    and checkpoint refs are kept unless ``branches``: a removed worktree is recreated from its
    last checkpoint if its thread is resumed. A remote job's worktrees are on its hosts, never
    touched here; with ``branches`` its refs go from the lead's repository and the remote."""
    report = GcReport([], [], [])
    leads = [await store.get_thread(job_id)] if job_id else await store.list_threads(kind="lead")
    for lead in leads:
        if (base := await job_base(lead)) is None:
            continue
        remote = base.remote
        threads = await store.job_tree(lead.id)
        busy = [t for t in threads if t.status not in FINISHED and t.status != Status.IDLE]
        for t in threads:
            tree = WorkerTree.of(t)
            if tree is None or tree.thread != t.id:
                continue
            if busy:
                report.kept.append(
                    {
                        "ref": t.ref,
                        "worktree": str(tree.path),
                        "reason": f"job {lead.ref} is not finished ({busy[0].ref} is"
                        f" {busy[0].status})",
                    }
                )
                continue
            if remote is None and await wt.remove_worktree(tree.root, tree.path):
                report.removed.append({"ref": t.ref, "worktree": str(tree.path)})
            if branches:
                deleted = await wt.delete_private(tree.root, thread_id=t.id, branch=tree.branch)
                if remote is not None:
                    names = [rm.remote_names(lead.id, r) for r in deleted]
                    await rm.delete_remote(tree.root, remote, names)
                report.deleted_refs += deleted
        if branches and not busy:
            root = Path(lead.task["isolation"]["root"])  # type: ignore[index]
            report.deleted_refs += await wt.delete_private(root, thread_id=lead.id, branch=None)
    return report
