"""Worktree isolation across hosts: ``[job] remote = "GIT URL"`` names a repository every
machine reaches, and it carries everything git that crosses machines.

- The lead pushes the job's base commit there before anything is stored
  (``publish_base``: ``refs/threadloom/bases/<commit>``), so a remote that is unreachable, not a
  repository or refuses the push is one line, exit 2, with nothing stored.
- Each host that runs workers keeps a bare mirror of it (``Mirror``: ``<mirrors
  home>/<name>-<hash of the URL>.git``; the home is env ``THREADLOOM_MIRRORS``, else
  ``.threadloom/mirrors`` under the process's working directory). A worker's worktree is
  made from the mirror, at the checkpoint in force (or the base), fetched by commit when the
  mirror lacks it — so a fork or a resume restores the files on whichever host runs it.
- After each turn that changed files, the host pushes the worker's branch and the checkpoint
  (``refs/threadloom/jobs/<job>/checkpoints/<thread>/<seq>`` on the remote) *before* the store
  records the checkpoint: a checkpoint in the store is always one the remote has.
- ``fetch_job`` brings a job's branches and checkpoints into the lead's repository (checkpoints
  under their local names ``refs/threadloom/<thread>/<seq>``) before ``diff``, ``merge`` and
  ``gc`` (``job.job_base``).

Every git runs through ``git.git`` (no system or global configuration, program-naming settings
overridden, its process group killed on cancel). The exception is what reaching a remote needs
from the host: its credential helpers, ``url.*.insteadOf``, ``core.sshCommand`` and the TLS and
proxy settings of ``http.*`` are read from the host's own system and global configuration
(``transport_config``) and given to the network commands only, as ``-c`` overrides. threadloom
stores no credential: a URL with a password (or any user info over HTTP) is refused in the job
file, and every URL shown in a log or an error has its user info masked (``redact``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import structlog

from ..errors import RepoStateError, WorktreeError
from .git import git, git_env

log = structlog.get_logger("threadloom.remote")

MIRRORS_ENV = "THREADLOOM_MIRRORS"

_TRANSPORT_KEY = re.compile(
    r"credential\..*|core\.sshcommand|url\..+\.(insteadof|pushinsteadof)"
    r"|http\.(.+\.)?(sslcainfo|sslcapath|sslverify|sslcert|sslkey|proxy|cookiefile|version)"
)
"""The host's own configuration a network command honours: how to authenticate (credential
helpers, the SSH command), where a URL really points, and how to reach it. Header-borne
credentials (``http.extraHeader``) are not passed: they would be visible in the process list."""

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@\s]+)@")


def redact(text: str) -> str:
    """``text`` with the user info of every URL in it masked (``https://***@host/…``)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


def base_ref(commit: str) -> str:
    return f"refs/threadloom/bases/{commit}"


def remote_checkpoint_ref(job_id: str, thread_id: str, seq: int) -> str:
    return f"refs/threadloom/jobs/{job_id}/checkpoints/{thread_id}/{seq}"


# ----------------------------------------------------------------- the host's transport config

_transport: tuple[str, ...] | None = None


def _read_transport_config() -> tuple[str, ...]:
    env = git_env({"GIT_CEILING_DIRECTORIES": "/"})
    for key in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL"):
        env.pop(key, None)
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        env["GIT_CONFIG_GLOBAL"] = os.environ["GIT_CONFIG_GLOBAL"]
    res = subprocess.run(
        ["git", "config", "--list", "-z", "--includes"],
        capture_output=True, text=True, env=env, cwd="/", check=False, timeout=30,
    )  # fmt: skip
    pairs: list[str] = []
    ssh = False
    for entry in res.stdout.split("\0") if res.returncode == 0 else []:
        key, _, value = entry.partition("\n")
        if _TRANSPORT_KEY.fullmatch(key):
            pairs += ["-c", f"{key}={value}"]
            ssh = ssh or key == "core.sshcommand"
    if not ssh:  # never wait for a passphrase or a host-key answer nobody will type
        pairs += ["-c", "core.sshCommand=ssh -o BatchMode=yes"]
    return tuple(pairs)


async def transport_config() -> tuple[str, ...]:
    """``-c`` pairs of the host's system and global configuration that reaching a remote needs
    (``_TRANSPORT_KEY``), read once per process as plain values."""
    global _transport
    if _transport is None:
        _transport = await asyncio.to_thread(_read_transport_config)
    return _transport


async def _net(what: str, url: str, *args: str, cwd: Path) -> None:
    """A network git command (``fetch``/``push``) to ``url``; its failure is one line naming
    the remote (user info masked) and git's reason (``WorktreeError``)."""
    res = await git(*await transport_config(), *args, cwd=cwd, check=False)
    if res.code != 0:
        lines = [x.strip() for x in res.err.splitlines() if x.strip()]
        reason = next((x for x in lines if x.startswith(("fatal:", "error:", "!"))), None)
        detail = redact(" ".join((reason or " ".join(lines) or f"exit {res.code}").split()))
        raise WorktreeError(f"remote {redact(url)}: {what} failed: {detail}")


# ----------------------------------------------------------------- the lead's side


async def publish_base(root: Path, commit: str, url: str) -> None:
    """Push the job's base commit to the remote (before the job is stored); ``RepoStateError``
    (exit 2) naming the remote when it cannot be reached, is not a repository or refuses."""
    try:
        await _net(
            "pushing the job's base", url, "push", "--quiet", "--no-verify", url,
            f"{commit}:{base_ref(commit)}", cwd=root,
        )  # fmt: skip
    except WorktreeError as exc:
        raise RepoStateError(
            f"job.remote: {exc} (credentials come from this host's git configuration)"
        ) from None
    log.info("remote.base_pushed", remote=redact(url), base=commit)


async def fetch_job(root: Path, url: str, job_id: str) -> None:
    """The job's worker branches and checkpoints from the remote into the repository at
    ``root`` (the lead's): ``threadloom/<job>/*`` but the job branch ``merge`` writes, and each
    checkpoint under its local name."""
    await _net(
        "fetching the job's branches", url, "fetch", "--quiet", "--no-tags",
        "--no-write-fetch-head", url,
        f"+refs/heads/threadloom/{job_id}/*:refs/heads/threadloom/{job_id}/*",
        f"^refs/heads/threadloom/{job_id}/merged",
        f"+refs/threadloom/jobs/{job_id}/checkpoints/*:refs/threadloom/*",
        cwd=root,
    )  # fmt: skip


async def delete_remote(root: Path, url: str, refs: Sequence[str]) -> list[str]:
    """Delete ``refs`` (local names: branches and checkpoint refs of the job) on the remote;
    returns the remote names deleted. Refs the remote does not have are skipped."""
    if not refs:
        return []
    res = await git(*await transport_config(), "ls-remote", "--refs", url, cwd=root, check=False)
    if res.code != 0:
        raise WorktreeError(f"remote {redact(url)}: listing refs failed: {redact(res.err.strip())}")
    there = {line.split("\t", 1)[1] for line in res.out.splitlines() if "\t" in line}
    wanted = [r for r in refs if r in there]
    if wanted:
        await _net("deleting refs", url, "push", "--quiet", "--no-verify", url,
                   *(f":{r}" for r in wanted), cwd=root)  # fmt: skip
    return wanted


def remote_names(job_id: str, local: str) -> str:
    """The remote's name of a local branch or checkpoint ref of the job."""
    parts = local.split("/")
    if local.startswith("refs/threadloom/") and len(parts) == 4 and parts[3].isdigit():
        return remote_checkpoint_ref(job_id, parts[2], int(parts[3]))
    return local


# ----------------------------------------------------------------- a host's mirror


def mirrors_home() -> Path:
    given = os.environ.get(MIRRORS_ENV)
    return Path(given).resolve() if given else Path.cwd() / ".threadloom" / "mirrors"


def mirror_path(url: str, home: Path | None = None) -> Path:
    """Where this host mirrors ``url``: a readable name and a hash of the whole URL."""
    tail = re.sub(r"\.git$", "", redact(url).rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip(".-")[:40] or "remote"
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return (home or mirrors_home()) / f"{name}-{digest}.git"


_LOCKS: dict[str, asyncio.Lock] = {}


@contextlib.asynccontextmanager
async def _exclusive(path: Path) -> AsyncIterator[None]:
    """One fetch or init of a mirror at a time: in this process (an asyncio lock) and across
    processes sharing the directory (``flock`` on a file beside it)."""
    lock = _LOCKS.setdefault(str(path), asyncio.Lock())
    async with lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock


class Mirror:
    """This host's bare mirror of a job's remote: worktrees are made from it, commits fetched
    into it on demand, branches and checkpoints pushed from it."""

    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path
        self._ready = False

    @property
    def shown(self) -> str:
        return redact(self.url)

    async def open(self) -> None:
        """Create the mirror (``git init --bare``) when this host has none yet."""
        if self._ready:
            return
        async with _exclusive(self.path):
            if not (self.path / "HEAD").is_file():
                self.path.mkdir(parents=True, exist_ok=True)
                await git("init", "--quiet", "--bare", str(self.path), cwd=self.path.parent)
                log.info("remote.mirror_created", remote=self.shown, path=str(self.path))
        self._ready = True

    async def has(self, commit: str) -> bool:
        res = await git("cat-file", "-e", f"{commit}^{{commit}}", cwd=self.path, check=False)
        return res.code == 0

    async def ensure_commit(self, commit: str) -> None:
        """``commit`` (the base or a checkpoint) in the mirror, fetched from the remote when
        missing; ``WorktreeError`` naming the remote when it cannot be had."""
        await self.open()
        if await self.has(commit):
            return
        async with _exclusive(self.path):
            if await self.has(commit):
                return
            await _net(f"fetching {commit[:12]}", self.url, "fetch", "--quiet", "--no-tags",
                       "--no-write-fetch-head", self.url, commit, cwd=self.path)  # fmt: skip
        if not await self.has(commit):
            raise WorktreeError(f"remote {self.shown}: has no commit {commit}")
        log.info("remote.fetched", remote=self.shown, commit=commit)

    async def push(self, job_id: str, *, branch: str, checkpoint: tuple[str, int] | None) -> None:
        """The worker's branch (forced: it is the thread's own, one runner at a time) and, with
        ``checkpoint`` (thread id, seq), that checkpoint, to the remote."""
        specs = [f"+refs/heads/{branch}:refs/heads/{branch}"]
        if checkpoint is not None:
            thread_id, seq = checkpoint
            local = f"refs/threadloom/{thread_id}/{seq}"
            specs.append(f"+{local}:{remote_checkpoint_ref(job_id, thread_id, seq)}")
        await _net("pushing the worker's branch", self.url, "push", "--quiet", "--no-verify",
                   self.url, *specs, cwd=self.path)  # fmt: skip
