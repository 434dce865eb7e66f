"""Git worktrees for ``isolation = "worktree"``: the job's base, one worktree and branch per
worker, a checkpoint commit per turn that changed files, diffs and merges.

Everything here runs ``git`` as a subprocess (``asyncio.create_subprocess_exec``, never a shell)
in an environment stripped of the ``GIT_*`` variables that would redirect it to another
repository or index. What it never does: touch the user's index, HEAD, working tree or checked-out
branch. The user's uncommitted work is captured with a temporary index (``GIT_INDEX_FILE``);
merges are computed with ``git merge-tree --write-tree`` (git 2.38+), which needs no working tree
at all; worktrees live under ``<git common dir>/threadloom/worktrees/<thread id>``, inside
``.git``, so they never show up as untracked files of the user's checkout.

Refs written (all private, under ``refs/threadloom/`` unless a branch):

- ``refs/threadloom/<job id>/base`` — the commit the job started from (HEAD, or a commit of the
  dirty working tree on top of HEAD);
- ``refs/threadloom/<thread id>/<seq>`` — the worker's files after message ``seq``;
- ``threadloom/<job id>/<task id>`` — the worker's branch, advanced by each checkpoint;
  ``threadloom/<job id>/merged`` — the default job branch that ``merge`` writes.

Errors: ``WorktreeError`` (git failed: exit 1) and its subclass ``RepoStateError`` (the user's
repository cannot be isolated or the request cannot be honoured: exit 2).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_REDIRECTING = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
)
_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "threadloom",
    "GIT_AUTHOR_EMAIL": "threadloom@localhost",
    "GIT_COMMITTER_NAME": "threadloom",
    "GIT_COMMITTER_EMAIL": "threadloom@localhost",
}
NONE_HINT = 'use isolation = "none" to let workers share the directory'


class WorktreeError(Exception):
    """A git operation of worktree isolation failed."""


class RepoStateError(WorktreeError):
    """The user's repository cannot be isolated as asked (not a repository, a merge in
    progress, a branch checked out elsewhere …); the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class GitResult:
    code: int
    out: str
    err: str


_identity_ok: dict[str, bool] = {}


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for every git call: nothing inherited may redirect git elsewhere, no
    prompt may wait for a terminal, output is not localised."""
    env = {k: v for k, v in os.environ.items() if k not in _REDIRECTING}
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"})
    if extra:
        env.update(extra)
    return env


SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
"""Nothing in the repository runs because threadloom ran git: no hooks (``worktree add`` would
run post-checkout, a merge commit pre-merge-commit), no fsmonitor command."""


async def git(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    ok: Sequence[int] = (0,),
) -> GitResult:
    """Run ``git ARGS`` in ``cwd``; raise ``WorktreeError`` naming the command when its exit
    code is not in ``ok`` (unless ``check`` is off)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *SAFE_CONFIG,
            *args,
            cwd=cwd,
            env=git_env(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as missing:
        raise RepoStateError(
            f"git is not installed (needed by worktree isolation); {NONE_HINT}"
        ) from missing
    out, err = await proc.communicate()
    res = GitResult(
        proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    )
    if check and res.code not in ok:
        detail = " ".join(res.err.split()) or f"exit {res.code}"
        raise WorktreeError(f"git {' '.join(args[:3])} failed in {cwd}: {detail}")
    return res


async def identity_env(root: Path) -> dict[str, str]:
    """The user's own git identity is used for checkpoint and merge commits; when none is
    configured (a fresh machine, CI), a neutral one instead of failing the worker."""
    key = str(root)
    if key not in _identity_ok:
        res = await git("var", "GIT_COMMITTER_IDENT", cwd=root, check=False)
        _identity_ok[key] = res.code == 0
    return {} if _identity_ok[key] else dict(_FALLBACK_IDENTITY)


# ----------------------------------------------------------------- the user's repository


@dataclass(frozen=True, slots=True)
class JobBase:
    """Where a worktree job starts: the repository's top level, the workspace's path inside it,
    and the base commit (HEAD, or a commit of the dirty tree on top of HEAD)."""

    root: Path
    rel: str
    base: str
    head: str | None
    dirty: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "rel": self.rel,
            "base": self.base,
            "head": self.head,
            "dirty": self.dirty,
        }


async def repo_root(workspace: Path) -> Path:
    """The top level of the repository holding ``workspace``, or ``RepoStateError``."""
    res = await git("rev-parse", "--show-toplevel", cwd=workspace, check=False)
    if res.code != 0:
        raise RepoStateError(
            f'{workspace}: isolation = "worktree" needs a git repository, and this is not one'
            f" (run git init and commit, or {NONE_HINT})"
        )
    return _real(Path(res.out.strip()))


def _real(path: Path) -> Path:
    # a local stat or two: not worth a thread hop
    return path.resolve()


def _exists(path: Path) -> bool:
    return path.exists()


async def common_dir(root: Path) -> Path:
    res = await git("rev-parse", "--git-common-dir", cwd=root)
    path = Path(res.out.strip())
    return (path if path.is_absolute() else root / path).resolve()


async def prepare_job(workspace: Path) -> JobBase:
    """Check the workspace can be isolated and capture its base, touching nothing of the
    user's: a merge in progress or unmerged paths are refused (``RepoStateError``); a dirty
    working tree (modified, deleted or untracked-and-not-ignored files) becomes a commit on top
    of HEAD built with a temporary index, so the workers start from what the user sees."""
    workspace = _real(workspace)
    root = await repo_root(workspace)
    gitdir = Path((await git("rev-parse", "--absolute-git-dir", cwd=root)).out.strip())
    if _exists(gitdir / "MERGE_HEAD"):
        raise RepoStateError(
            f"{root}: a merge is in progress (MERGE_HEAD exists); finish it (git commit) or"
            f" abort it (git merge --abort) before starting a worktree job, or {NONE_HINT}"
        )
    unmerged = (await git("ls-files", "--unmerged", cwd=root)).out.strip()
    if unmerged:
        files = sorted({line.split("\t", 1)[-1] for line in unmerged.splitlines()})
        raise RepoStateError(
            f"{root}: unresolved merge conflicts in {', '.join(files[:5])}"
            f"{' …' if len(files) > 5 else ''}; resolve them first, or {NONE_HINT}"
        )
    head_res = await git("rev-parse", "-q", "--verify", "HEAD^{commit}", cwd=root, check=False)
    head = head_res.out.strip() or None
    status = await git("status", "--porcelain", "-z", "--untracked-files=all", cwd=root)
    dirty = bool(status.out) or head is None
    base = head if head and not dirty else await snapshot_tree(root, gitdir, head)
    rel = workspace.relative_to(root).as_posix() if workspace != root else ""
    return JobBase(root=root, rel=rel, base=base, head=head, dirty=base != head)


async def snapshot_tree(root: Path, gitdir: Path, head: str | None) -> str:
    """A commit of the working tree as it is (on top of ``head``), built in a temporary index
    seeded from the user's (so unchanged files are not hashed again); the user's index, HEAD
    and files are not touched."""
    with tempfile.TemporaryDirectory(prefix="threadloom-index-") as tmp:
        index = Path(tmp) / "index"
        if (gitdir / "index").exists():
            shutil.copyfile(gitdir / "index", index)
        env = {"GIT_INDEX_FILE": str(index), **await identity_env(root)}
        await git("add", "-A", cwd=root, env=env)
        tree = (await git("write-tree", cwd=root, env=env)).out.strip()
    if head is not None:
        head_tree = (await git("rev-parse", f"{head}^{{tree}}", cwd=root)).out.strip()
        if tree == head_tree:
            return head
    parents = ["-p", head] if head else []
    msg = "threadloom: the working tree at the start of the job (uncommitted changes included)"
    env = await identity_env(root)
    return (await git("commit-tree", tree, *parents, "-m", msg, cwd=root, env=env)).out.strip()


async def set_ref(root: Path, ref: str, commit: str) -> None:
    await git("update-ref", ref, commit, cwd=root)


async def ref_exists(root: Path, ref: str) -> bool:
    res = await git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", cwd=root, check=False)
    return res.code == 0


async def resolve_commit(root: Path, ref: str) -> str | None:
    res = await git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", cwd=root, check=False)
    return res.out.strip() or None


def job_base_ref(job_id: str) -> str:
    return f"refs/threadloom/{job_id}/base"


def checkpoint_ref(thread_id: str, seq: int) -> str:
    return f"refs/threadloom/{thread_id}/{seq}"


def merged_branch(job_id: str) -> str:
    return f"threadloom/{job_id}/merged"


def slug(text: str) -> str:
    """A string safe as one component of a branch name."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-")
    s = re.sub(r"\.{2,}", ".", s).removesuffix(".lock")
    return s[:60] or "task"


async def free_branch(root: Path, wanted: str, fallback: str) -> str:
    """``wanted`` unless such a branch exists (or is the job branch), then ``fallback``."""
    if not wanted.endswith("/merged") and not await ref_exists(root, f"refs/heads/{wanted}"):
        return wanted
    return fallback


# ----------------------------------------------------------------- worktrees


@dataclass
class _Locks:
    by_root: dict[str, asyncio.Lock] = field(default_factory=dict)

    def of(self, root: Path) -> asyncio.Lock:
        return self.by_root.setdefault(str(root), asyncio.Lock())


# ``git worktree add``/``prune`` rewrite the shared .git/worktrees admin area: one at a time
_LOCKS = _Locks()


async def add_worktree(root: Path, path: Path, branch: str, start: str) -> None:
    """A worktree at ``path`` with ``branch`` checked out at ``start`` (the branch is created,
    or reset to ``start`` when it exists: a worktree is only ever recreated from a checkpoint
    that the branch holds already). Stale registrations of removed worktrees are pruned."""
    async with _LOCKS.of(root):
        await git("worktree", "prune", cwd=root)
        path.parent.mkdir(parents=True, exist_ok=True)
        await git("worktree", "add", "--quiet", "-B", branch, str(path), start, cwd=root)


async def remove_worktree(root: Path, path: Path) -> bool:
    """Remove a worktree (its files; its branch and refs stay). False when it was gone."""
    async with _LOCKS.of(root):
        existed = _exists(path)
        res = await git("worktree", "remove", "--force", str(path), cwd=root, check=False)
        if res.code != 0 and _exists(path):
            shutil.rmtree(path, ignore_errors=True)
        await git("worktree", "prune", cwd=root)
        return existed


async def is_worktree(path: Path) -> bool:
    if not _exists(path / ".git"):
        return False
    res = await git("rev-parse", "--show-toplevel", cwd=path, check=False)
    return res.code == 0 and _real(Path(res.out.strip())) == _real(path)


async def checked_out_in(root: Path, branch: str) -> Path | None:
    """The worktree (the user's checkout included) where ``branch`` is checked out, if any."""
    res = await git("worktree", "list", "--porcelain", cwd=root)
    current: Path | None = None
    for line in res.out.splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :])
        elif line == f"branch refs/heads/{branch}":
            return current
    return None


class Checkpointer:
    """Commits a worktree's files after a turn, when they changed.

    Uses the worktree's own index (the worktree is the worker's, nobody else's), so unchanged
    files are not re-hashed: ``add -A``, ``write-tree``, and — only when the tree differs from
    HEAD's — ``commit-tree`` plus one ``update-ref`` transaction that advances the worker's
    branch and writes the checkpoint ref. A turn whose tools changed nothing records nothing
    (returns None); a commit the worker made itself with ``git commit`` is recorded as is."""

    def __init__(self, worktree: Path, *, thread_id: str, last: str | None = None) -> None:
        self.worktree = worktree
        self.thread_id = thread_id
        self.last = last

    async def __call__(self, seq: int) -> str | None:
        env = await identity_env(self.worktree)
        await git("add", "-A", cwd=self.worktree, env=env)
        tree = (await git("write-tree", cwd=self.worktree, env=env)).out.strip()
        head, head_tree = (
            await git("rev-parse", "HEAD", "HEAD^{tree}", cwd=self.worktree)
        ).out.split()
        if self.last is None:
            self.last = head
        if tree == head_tree:
            if head == self.last:
                return None
            commit = head
            updates = f"update {checkpoint_ref(self.thread_id, seq)} {commit}\n"
        else:
            msg = f"threadloom: T-{self.thread_id}#{seq}"
            commit = (
                await git("commit-tree", tree, "-p", head, "-m", msg, cwd=self.worktree, env=env)
            ).out.strip()
            ref = checkpoint_ref(self.thread_id, seq)
            updates = f"update HEAD {commit} {head}\nupdate {ref} {commit}\n"
        await _update_refs(self.worktree, updates)
        self.last = commit
        return commit


async def _update_refs(cwd: Path, lines: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "git",
        *SAFE_CONFIG,
        "update-ref",
        "--stdin",
        cwd=cwd,
        env=git_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate(lines.encode())
    if proc.returncode:
        raise WorktreeError(f"git update-ref failed in {cwd}: {' '.join(err.decode().split())}")


# ----------------------------------------------------------------- diffs and merges


async def diff(root: Path, base: str, tip: str, *, stat: bool = False) -> str:
    args = ["diff", "--no-color", "--no-ext-diff"]
    if stat:
        args.append("--stat=100")
    return (await git(*args, base, tip, cwd=root)).out


async def diff_stat(root: Path, base: str, tip: str) -> str:
    """``git diff --stat`` of the work, or ``no changes``."""
    text = (await diff(root, base, tip, stat=True)).rstrip()
    return text or "no changes"


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


async def delete_private(root: Path, *, thread_id: str, branch: str | None) -> list[str]:
    """Delete a thread's checkpoint refs and its branch; returns what was deleted."""
    res = await git(
        "for-each-ref", "--format=%(refname)", f"refs/threadloom/{thread_id}/", cwd=root
    )
    refs = res.out.split()
    if branch and await ref_exists(root, f"refs/heads/{branch}"):
        refs.append(f"refs/heads/{branch}")
    if refs:
        await _update_refs(root, "".join(f"delete {r}\n" for r in refs))
    return refs
