"""Git worktrees for ``isolation = "worktree"``: the job's base, one worktree and branch per
worker, a checkpoint commit per turn that changed files, diffs and merges.

Every git runs through ``git.git`` (controlled configuration, the user's drivers only, its
process group killed on cancel). A worktree is never found through its ``.git`` file: git is
given ``--git-dir``/``--work-tree``, the git dir being the one git made for it under
``<common dir>/worktrees/``, verified before each use
(``verify_tree``: a rewritten ``.git`` file is restored with a warning, a ``config.worktree``
removed, an altered ``commondir`` refused). Base commits and checkpoints never capture
``.threadloom/`` or the database and its logs (``capture_excludes``).
What it never does: touch the user's index, HEAD, working tree or checked-out
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
repository cannot be isolated or the request cannot be honoured: exit 2), from
``orchestrator.errors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ..errors import RepoStateError, WorktreeError
from .git import (
    NONE_HINT,
    GitTree,
    common_dir,
    git,
    identity_env,
    parse_drivers,
    real_path,
    ref_exists,
    trust_drivers,
    update_refs,
)

log = structlog.get_logger("threadloom.worktrees")

PRIVATE_DIR = ".threadloom"
_ALWAYS_EXCLUDED = (
    f":(exclude,glob)**/{PRIVATE_DIR}",
    f":(exclude,glob)**/{PRIVATE_DIR}/**",
)


DB_FILES = ("", "-wal", "-shm", "-journal", "-writer")
"""The suffixes of a SQLite database's files: itself, SQLite's ``-wal``/``-shm``/``-journal``
and the store's writer queue ``-writer`` (``store._engine``): never captured, never reachable by
a tool (``runtime.job``)."""


def capture_excludes(root: Path, db: Path | None) -> tuple[str, ...]:
    """Pathspecs for what a base commit or checkpoint never captures: every ``.threadloom/``
    directory, and — when the database lives inside the repository elsewhere — the database's
    files (``DB_FILES``) and the ``logs`` directory beside it."""
    out = list(_ALWAYS_EXCLUDED)
    if db is not None:
        db = db.absolute()
        db = db.parent.resolve() / db.name
        if db.is_relative_to(root):
            rel = db.relative_to(root)
            names = [rel.name + sfx for sfx in DB_FILES]
            paths = [rel.with_name(n) for n in names] + [rel.parent / "logs"]
            out += [f":(exclude,literal){p.as_posix()}" for p in paths]
    return tuple(out)


async def _drop_excluded(
    root: Path,
    env: Mapping[str, str],
    excludes: Sequence[str],
    head: str | None,
    tree: GitTree | None = None,
) -> None:
    """Excluded paths already in the index (seeded from the user's, or committed at HEAD) keep
    HEAD's version — never a newer one — so nothing new from them is ever written as an
    object; with no HEAD they are dropped from the index."""
    include = [p.replace(":(exclude,", ":(", 1) for p in excludes]
    found = await git("ls-files", "-z", "--", *include, cwd=root, env=env, tree=tree)
    if not found.out:
        return
    if head is not None:
        await git("reset", "-q", head, "--", *include, cwd=root, env=env, tree=tree, ok=(0, 1))
    else:
        await git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *include,
                  cwd=root, env=env, tree=tree)  # fmt: skip


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
    drivers: dict[str, str] = field(default_factory=dict)
    """The repository's driver keys at the start of the job (``drivers_of``): the only filters,
    merge and diff drivers threadloom's git runs during the job."""
    remote: str | None = None
    """``[job] remote``: the repository the job's base, branches and checkpoints cross
    machines through (``remote``); None for a job on one machine."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "root": str(self.root),
            "rel": self.rel,
            "base": self.base,
            "head": self.head,
            "dirty": self.dirty,
            "drivers": dict(self.drivers),
        }
        if self.remote is not None:
            out["remote"] = self.remote
        return out

    async def trust(self) -> None:
        """Register ``drivers`` as the repository's trusted ones (a new process resuming,
        diffing or merging the job calls this with the base read back from the task JSON)."""
        trust_drivers(self.root, await common_dir(self.root), self.drivers)


async def repo_root(workspace: Path) -> Path:
    """The top level of the repository holding ``workspace``, or ``RepoStateError``."""
    res = await git("rev-parse", "--show-toplevel", cwd=workspace, check=False)
    if res.code != 0:
        raise RepoStateError(
            f'{workspace}: isolation = "worktree" needs a git repository, and this is not one'
            f" (run git init and commit, or {NONE_HINT})"
        )
    return real_path(Path(res.out.strip()))


def _exists(path: Path) -> bool:
    return path.exists()


async def drivers_of(root: Path) -> dict[str, str]:
    """The repository's driver keys as they are now (``git config --list -z``, includes
    followed; system and global configuration are never read)."""
    return parse_drivers((await git("config", "--list", "-z", cwd=root, check=False)).out)


async def prepare_job(workspace: Path, *, db: Path | None = None) -> JobBase:
    """Check the workspace can be isolated and capture its base, touching nothing of the
    user's: a merge in progress or unmerged paths are refused (``RepoStateError``); a dirty
    working tree (modified, deleted or untracked-and-not-ignored files) becomes a commit on top
    of HEAD built with a temporary index, so the workers start from what the user sees.
    ``.threadloom/`` and the database ``db`` (with its logs) are never part of it."""
    workspace = real_path(workspace)
    root = await repo_root(workspace)
    drivers = await drivers_of(root)
    trust_drivers(root, await common_dir(root), drivers)
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
    excludes = capture_excludes(root, db)
    status = await git(
        "status", "--porcelain", "-z", "--untracked-files=all", "--", ".", *excludes, cwd=root
    )
    dirty = bool(status.out) or head is None
    base = head if head and not dirty else await snapshot_tree(root, gitdir, head, excludes)
    rel = workspace.relative_to(root).as_posix() if workspace != root else ""
    return JobBase(root=root, rel=rel, base=base, head=head, dirty=base != head, drivers=drivers)


async def snapshot_tree(
    root: Path, gitdir: Path, head: str | None, excludes: Sequence[str] = _ALWAYS_EXCLUDED
) -> str:
    """A commit of the working tree as it is (on top of ``head``), built in a temporary index
    seeded from the user's (so unchanged files are not hashed again); the user's index, HEAD
    and files are not touched."""
    with tempfile.TemporaryDirectory(prefix="threadloom-index-") as tmp:
        index = Path(tmp) / "index"
        if (gitdir / "index").exists():
            shutil.copyfile(gitdir / "index", index)
        env = {"GIT_INDEX_FILE": str(index), **await identity_env(root)}
        await git("add", "-A", "--", ".", *excludes, cwd=root, env=env)
        await _drop_excluded(root, env, excludes, head)
        tree = (await git("write-tree", cwd=root, env=env)).out.strip()
    if head is not None:
        head_tree = (await git("rev-parse", f"{head}^{{tree}}", cwd=root)).out.strip()
        if tree == head_tree:
            return head
    parents = ["-p", head] if head else []
    msg = "threadloom: the working tree at the start of the job (uncommitted changes included)"
    env = await identity_env(root)
    return (await git("commit-tree", tree, *parents, "-m", msg, cwd=root, env=env)).out.strip()


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
        # git wrote the .git file through the private common dir threadloom's git uses (see
        # git.private_common_dir), which lives only as long as this process: point it home
        gitdir = _admin_dir(await common_dir(root), path)
        if gitdir is None:
            raise WorktreeError(f"git worktree add made no worktree at {path}")
        (path / ".git").write_text(f"gitdir: {gitdir}\n")


async def remove_worktree(root: Path, path: Path) -> bool:
    """Remove a worktree (its files; its branch and refs stay). False when it was gone."""
    async with _LOCKS.of(root):
        existed = _exists(path)
        with contextlib.suppress(WorktreeError):
            verify_tree(await common_dir(root), path)  # a tampered .git file points home again
        res = await git("worktree", "remove", "--force", str(path), cwd=root, check=False)
        if res.code != 0 and _exists(path):
            shutil.rmtree(path, ignore_errors=True)
        await git("worktree", "prune", cwd=root)
        return existed


def _admin_dir(common: Path, path: Path) -> Path | None:
    """The git dir git created for the worktree at ``path``: the entry of
    ``<common>/worktrees/`` whose ``gitdir`` file names ``<path>/.git`` (read from the user's
    ``.git``, never from the worktree)."""
    want = real_path(path)
    admin = common / "worktrees"
    if not admin.is_dir():
        return None
    for entry in sorted(admin.iterdir()):
        with contextlib.suppress(OSError):
            named = Path((entry / "gitdir").read_text().strip())
            if named.name == ".git" and real_path(named.parent) == want:
                return entry
    return None


def _read_git_file(dotgit: Path) -> Path | None:
    if dotgit.is_symlink() or not dotgit.is_file():
        return None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = dotgit.read_text()
        if text.startswith("gitdir: "):
            return Path(text[len("gitdir: ") :].strip())
    return None


def verify_tree(common: Path, path: Path) -> GitTree | None:
    """The worktree at ``path`` with the git dir threadloom created for it, checked before any
    git command acts on it, or None when ``path`` is not a registered worktree of ``common``.

    - the git dir is ``<common>/worktrees/<name>`` whose ``gitdir`` names ``<path>/.git``, and
      its ``commondir`` leads back to ``common`` (else ``WorktreeError``: the user's ``.git``
      was altered, nothing is done);
    - a ``.git`` file that no longer points there (rewritten, replaced by a directory or a
      symlink) is restored and a warning logged; git is given the verified git dir anyway;
    - a ``config.worktree`` in that git dir (threadloom never writes one) is removed, so no
      worktree-specific configuration or include can take effect."""
    if not path.is_dir():
        return None
    gitdir = _admin_dir(common, path)
    if gitdir is None:
        return None
    try:
        back = real_path(gitdir / (gitdir / "commondir").read_text().strip())
    except OSError as exc:
        raise WorktreeError(f"{gitdir}: no readable commondir ({exc})") from exc
    if back != real_path(common):
        raise WorktreeError(
            f"{gitdir}: its commondir leads to {back}, not to {common}: the repository's"
            " worktree records were altered; threadloom will not run git on this worktree"
        )
    dotgit = path / ".git"
    pointed = _read_git_file(dotgit)
    target = None if pointed is None else pointed if pointed.is_absolute() else path / pointed
    if target is None or real_path(target) != real_path(gitdir):
        log.warning(
            "worktree.git_file_restored",
            worktree=str(path),
            found=str(pointed) if pointed is not None else "not a gitdir file",
            restored=str(gitdir),
        )
        if dotgit.is_dir() and not dotgit.is_symlink():
            shutil.rmtree(dotgit)
        else:
            with contextlib.suppress(FileNotFoundError):
                dotgit.unlink()
        dotgit.write_text(f"gitdir: {gitdir}\n")
    cfg = gitdir / "config.worktree"
    if cfg.exists() or cfg.is_symlink():
        log.warning("worktree.config_removed", worktree=str(path), file=str(cfg))
        cfg.unlink()
    return GitTree(git_dir=gitdir, work_tree=real_path(path), common=real_path(common))


async def open_tree(root: Path, path: Path) -> GitTree:
    """``verify_tree`` of the worktree at ``path`` of the repository at ``root``, or
    ``WorktreeError`` when it is not one of its worktrees."""
    found = verify_tree(await common_dir(root), path)
    if found is None:
        raise WorktreeError(f"{path} is not a worktree of {root}")
    return found


async def is_worktree(root: Path, path: Path) -> bool:
    """True when ``path`` is a registered, verified worktree of ``root`` with a valid HEAD."""
    tree = verify_tree(await common_dir(root), path)
    if tree is None:
        return False
    res = await git("rev-parse", "-q", "--verify", "HEAD", cwd=tree.work_tree, tree=tree,
                    check=False)  # fmt: skip
    return res.code == 0


async def worktree_head(root: Path, path: Path) -> str:
    tree = await open_tree(root, path)
    return (await git("rev-parse", "HEAD", cwd=tree.work_tree, tree=tree)).out.strip()


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
    (returns None); a commit the worker made itself with ``git commit`` is recorded as is.

    Before each checkpoint the worktree's git dir is verified (``verify_tree``) and every git
    command is given it explicitly; ``.threadloom/`` and the database files (``excludes``) are
    never added."""

    def __init__(
        self,
        worktree: Path,
        *,
        thread_id: str,
        last: str | None = None,
        root: Path | None = None,
        excludes: Sequence[str] = _ALWAYS_EXCLUDED,
    ) -> None:
        self.worktree = worktree
        self.thread_id = thread_id
        self.last = last
        self.root = root
        self.excludes = tuple(excludes)
        self._common_dir: Path | None = None

    async def _common(self) -> Path:
        if self._common_dir is None:
            # no repository named: the worktree's own common dir (the benchmark's case)
            self._common_dir = await common_dir(self.root or self.worktree)
        return self._common_dir

    async def __call__(self, seq: int) -> str | None:
        common = await self._common()
        tree = verify_tree(common, self.worktree)
        if tree is None:
            raise WorktreeError(f"{self.worktree} is not a worktree of {common}: no checkpoint")
        cwd = tree.work_tree
        env = await identity_env(self.root or cwd)
        head, head_tree = (
            await git("rev-parse", "HEAD", "HEAD^{tree}", cwd=cwd, tree=tree)
        ).out.split()
        await git("add", "-A", "--", ".", *self.excludes, cwd=cwd, env=env, tree=tree)
        await _drop_excluded(cwd, env, self.excludes, head, tree)
        tree_id = (await git("write-tree", cwd=cwd, env=env, tree=tree)).out.strip()
        if self.last is None:
            self.last = head
        if tree_id == head_tree:
            if head == self.last:
                return None
            commit = head
            updates = f"update {checkpoint_ref(self.thread_id, seq)} {commit}\n"
        else:
            msg = f"threadloom: T-{self.thread_id}#{seq}"
            commit = (
                await git("commit-tree", tree_id, "-p", head, "-m", msg, cwd=cwd, env=env,
                          tree=tree)
            ).out.strip()  # fmt: skip
            ref = checkpoint_ref(self.thread_id, seq)
            updates = f"update HEAD {commit} {head}\nupdate {ref} {commit}\n"
        await update_refs(cwd, updates, tree=tree)
        self.last = commit
        return commit


_ACTIONS = {"A": "added", "M": "modified", "T": "modified", "D": "deleted"}


async def worktree_changes(
    worktree: Path,
    *,
    base: str,
    rel: str = "",
    root: Path | None = None,
    excludes: Sequence[str] = _ALWAYS_EXCLUDED,
) -> dict[str, str]:
    """Every path of the workspace (``rel`` inside the worktree) whose files differ now from
    ``base`` — committed, staged or not, untracked but not ignored — as ``{path: "added" |
    "modified" | "deleted"}``, paths relative to the workspace; ``__pycache__`` and ``*.pyc``
    left out (SPEC "Checked results"). The worktree's own index is brought up to date (``add
    -A``, as each checkpoint does: the worktree is the worker's alone); git runs as for a
    checkpoint, under the verified git dir and threadloom's configuration."""
    common = await common_dir(root or worktree)
    tree = verify_tree(common, worktree)
    if tree is None:
        raise WorktreeError(f"{worktree} is not a worktree of {common}: no diff")
    cwd = tree.work_tree
    env = await identity_env(root or cwd)
    head = (await git("rev-parse", "HEAD", cwd=cwd, tree=tree)).out.strip()
    await git("add", "-A", "--", ".", *excludes, cwd=cwd, env=env, tree=tree)
    await _drop_excluded(cwd, env, excludes, head, tree)
    out = (
        await git(
            "diff", "--cached", "--name-status", "-z", "--no-renames", "--no-ext-diff", base,
            cwd=cwd, env=env, tree=tree,
        )
    ).out  # fmt: skip
    fields = out.split("\0")
    prefix = rel.strip("/") + "/" if rel.strip("/") else ""
    changes: dict[str, str] = {}
    for status, path in zip(fields[0::2], fields[1::2], strict=False):
        action = _ACTIONS.get(status[:1])
        if action is None or not path.startswith(prefix):
            continue
        path = path[len(prefix) :]
        parts = path.split("/")
        if "__pycache__" in parts or path.endswith(".pyc"):
            continue
        changes[path] = action
    return changes


# ----------------------------------------------------------------- diffs and merges


async def diff(root: Path, base: str, tip: str, *, stat: bool = False) -> str:
    args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"]
    if stat:
        args.append("--stat=100")
    return (await git(*args, base, tip, cwd=root)).out


async def diff_stat(root: Path, base: str, tip: str) -> str:
    """``git diff --stat`` of the work, or ``no changes``."""
    text = (await diff(root, base, tip, stat=True)).rstrip()
    return text or "no changes"


async def delete_private(root: Path, *, thread_id: str, branch: str | None) -> list[str]:
    """Delete a thread's checkpoint refs and its branch; returns what was deleted."""
    res = await git(
        "for-each-ref", "--format=%(refname)", f"refs/threadloom/{thread_id}/", cwd=root
    )
    refs = res.out.split()
    if branch and await ref_exists(root, f"refs/heads/{branch}"):
        refs.append(f"refs/heads/{branch}")
    if refs:
        await update_refs(root, "".join(f"delete {r}\n" for r in refs))
    return refs
