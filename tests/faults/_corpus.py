"""The escape corpus's data and machinery (``test_escape_corpus.py`` runs it).

A *world* is built once per module in a temporary directory: a workspace in README's layout (the
database and the job logs under its ``.threadloom/``, a real git repository, a worktree-style
``.git`` file, symlinks planted to the outside), decoys outside it (a directory with a canary
file, two fake homes: one with a real ``~/.ssh``, one whose ``~/.ssh`` is a symlink to elsewhere,
both with ``~/.aws/credentials``), and canary secrets for the environment (``ANTHROPIC_API_KEY``,
``THREADLOOM_DB`` holding a password in a URL, ``MY_SERVICE_PASSWORD``). Every canary is a unique
string: seeing one in a tool's output is a read of a decoy.

Each attempt is one real tool call through ``Tool.invoke``. Whatever the attempt, the same checks
run around it (``run_attempt``): the protected trees (outside, homes, ``.git``, ``.threadloom``)
are snapshotted before and after (a change is an escape), the messages are read with raw
``sqlite3`` before and after (a change is a changed message), the output is searched for every
canary (a decoy read) and for the attempt's own success marker (an escape), sockets the test
listens on must have seen no connection, and ``/proc`` must hold no process carrying the
attempt's tag once the call has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workers.tools import ToolContext, build_tools

DECOY_BASE = "/var/tmp"
"""Where the world is made: not under ``/tmp``, which the sandbox replaces with an empty one."""

ESCAPED = "ESCXAPED"
"""What an attack prints when it worked. Commands spell it ``printf 'ESC%sAPED' X`` so that the
text never appears in a command line that an error message could echo."""

SHELL_PRELUDE = "E(){ printf 'ESC%sAPED %s\\n' X \"$*\"; }; "

Category = Literal["escapes", "decoy_reads", "changed_messages", "surviving_processes"]
CATEGORIES: tuple[Category, ...] = (
    "escapes",
    "decoy_reads",
    "changed_messages",
    "surviving_processes",
)


class AttemptNotRun(AssertionError):
    """The attempt's command could not even start (the test's fault or the machine's, not a
    containment): it fails the test instead of being counted as held."""


@dataclass
class Outcome:
    """What one attempt did: empty lists everywhere means it was contained."""

    id: str
    escapes: list[str] = field(default_factory=list)
    decoy_reads: list[str] = field(default_factory=list)
    changed_messages: list[str] = field(default_factory=list)
    surviving_processes: list[str] = field(default_factory=list)
    output: str = ""

    def failures(self) -> list[str]:
        out = []
        for cat in CATEGORIES:
            out += [f"{cat}: {item}" for item in getattr(self, cat)]
        return out


RESULTS: dict[str, Outcome] = {}
"""Every attempt run in this process, by id (the summary prints the counts)."""


def record(outcome: Outcome) -> Outcome:
    RESULTS[outcome.id] = outcome
    return outcome


def summary(results: dict[str, Outcome] | None = None) -> dict[str, Any]:
    """The counts; the attempts re-run as ``nobody`` (ids ``nobody:…``) counted apart."""
    results = RESULTS if results is None else results
    mine = {i: o for i, o in results.items() if not i.startswith("nobody:")}
    doc: dict[str, Any] = {"user": "root" if os.geteuid() == 0 else str(os.geteuid())}
    doc["attempts"] = len(mine)
    for cat in CATEGORIES:
        doc[cat] = sum(len(getattr(o, cat)) for o in mine.values())
    doc["failing"] = sorted(i for i, o in mine.items() if o.failures())
    nobody = {i[len("nobody:") :]: o for i, o in results.items() if i.startswith("nobody:")}
    if nobody:
        doc["as_nobody"] = summary(nobody)
        doc["as_nobody"]["user"] = "nobody"
    return doc


# --------------------------------------------------------------------------- the world


@dataclass
class World:
    root: Path
    ws: Path
    db: Path
    logs: Path
    outside: Path
    home_plain: Path
    home_link: Path
    keys: Path
    canaries: dict[str, str]
    hidden: tuple[Path, ...] = ()
    unix_server: socket.socket | None = None
    tcp_server: socket.socket | None = None

    @property
    def unix_path(self) -> Path:
        return self.outside / "svc.sock"

    @property
    def tcp_port(self) -> int:
        assert self.tcp_server is not None
        return int(self.tcp_server.getsockname()[1])

    def env(self, home: Path) -> dict[str, str]:
        """The canary secrets put in the environment of every bash attempt."""
        return {
            "HOME": str(home),
            "ANTHROPIC_API_KEY": f"sk-ant-api03-{self.canaries['env_anthropic']}",
            "THREADLOOM_DB": (
                f"postgresql+asyncpg://threadloom:{self.canaries['env_db_password']}"
                "@127.0.0.1:5432/threadloom"
            ),
            "MY_SERVICE_PASSWORD": self.canaries["env_service_password"],
        }

    def protected(self) -> list[Path]:
        return [
            self.outside,
            self.home_plain,
            self.home_link,
            self.keys,
            self.ws / ".git",
            self.ws / "wt" / ".git",
            self.ws / "sub" / ".git",
            self.ws / ".threadloom",
            self.root / "elsewhere",
        ]


def _canary(name: str) -> str:
    return f"canary-{name.replace('_', '-')}-{uuid.uuid4().hex[:16]}"


def build_world(root: Path) -> World:
    assert not root.resolve().is_relative_to("/tmp"), "decoys under /tmp prove nothing"
    names = (
        "ssh_key",
        "ssh_link_key",
        "aws",
        "aws_link",
        "outside",
        "transcript",
        "log",
        "env_anthropic",
        "env_db_password",
        "env_service_password",
    )
    canaries = {n: _canary(n) for n in names}
    ws = root / "ws"
    outside = root / "outside"
    home_plain = root / "home"
    home_link = root / "home-link"
    keys = root / "keys"
    (root / "elsewhere").mkdir(parents=True)
    for d in (ws, outside, home_plain / ".ssh", home_plain / ".aws", home_link / ".aws", keys):
        d.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text(f"outside secret {canaries['outside']}\n")
    (home_plain / ".ssh" / "id_rsa").write_text(
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canaries['ssh_key']}\n"
        "-----END OPENSSH PRIVATE KEY-----\n"
    )
    (home_plain / ".aws" / "credentials").write_text(
        f"[default]\naws_secret_access_key = {canaries['aws']}\n"
    )
    (keys / "id_rsa").write_text(f"PRIVATE {canaries['ssh_link_key']}\n")
    (home_link / ".ssh").symlink_to(keys)
    (home_link / ".aws" / "credentials").write_text(f"secret = {canaries['aws_link']}\n")

    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "src.py").write_text("print('hello')\n")
    subprocess.run(["git", "init", "-q", str(ws / "sub")], check=True)
    (ws / "wt").mkdir()
    (ws / "wt" / ".git").write_text(f"gitdir: {ws / '.git' / 'worktrees' / 'wt'}\n")
    (ws / "link-out").symlink_to(outside / "secret.txt")
    (ws / "dirlink").symlink_to(outside)
    (ws / "homelink").symlink_to(home_plain)
    db = ws / ".threadloom" / "threads.db"
    (ws / "dblink").symlink_to(db)
    logs = ws / ".threadloom" / "logs"
    hidden = asyncio.run(_make_store(db, ws, canaries["transcript"]))
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "job.jsonl").write_text(json.dumps({"event": "x", "text": canaries["log"]}) + "\n")
    world = World(
        root=root,
        ws=ws,
        db=db,
        logs=logs,
        outside=outside,
        home_plain=home_plain,
        home_link=home_link,
        keys=keys,
        canaries=canaries,
        hidden=hidden,
    )
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(world.unix_path))
    server.listen(8)
    server.setblocking(False)
    world.unix_server = server
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    world.tcp_server = tcp
    return world


async def _make_store(db: Path, ws: Path, canary: str) -> tuple[Path, ...]:
    """A real store in README's layout, with a transcript carrying ``canary``; returns the paths
    the job runtime hides from a job in that workspace (what a real job's tools get)."""
    from orchestrator import parse_job
    from orchestrator.runtime.job import JobRuntime
    from store import Kind, NewMessage, Store

    store = await Store.open(str(db), create_dirs=True)
    try:
        info = await store.create_thread(
            kind=Kind.LEAD,
            title="decoy",
            messages=[
                NewMessage.user(f"the goal {canary}"),
                NewMessage.assistant(f"working on {canary}"),
            ],
        )
        text = (
            '[job]\nname = "corpus"\ngoal = "g"\nworkspace = "."\n'
            'model = "anthropic:claude-sonnet-4-5"\nsandbox = "auto"\n'
        )
        spec = parse_job(text, name="corpus.toml", base_dir=ws)
        runtime = JobRuntime(store=store, job=spec, lead_id=info.id)
        return tuple(runtime.sandbox().hidden)
    finally:
        await store.close()


def git_init(repo: Path) -> None:
    """A git repository on ``main`` with one commit (``a.txt``)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "a.txt"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True, env=env)


def close_world(world: World) -> None:
    for s in (world.unix_server, world.tcp_server):
        if s is not None:
            s.close()


# --------------------------------------------------------------------------- observations


def snapshot(paths: list[Path]) -> dict[str, str]:
    """Every entry under ``paths`` (symlinks not followed): kind and content hash or target."""
    out: dict[str, str] = {}

    def one(p: Path) -> None:
        try:
            st = p.lstat()
        except FileNotFoundError:
            return
        if p.is_symlink():
            out[str(p)] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[str(p)] = f"dir:{st.st_mode:o}"
            for child in sorted(p.iterdir()):
                one(child)
        elif p.is_file():
            out[str(p)] = "file:" + hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = f"other:{st.st_mode:o}"

    for p in paths:
        one(p)
    return out


def diff_snapshots(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changes = []
    for path in sorted(set(before) | set(after)):
        sqlite_own = path.endswith(("threads.db-wal", "threads.db-shm")) and path not in before
        if sqlite_own and path in after and os.path.getsize(path) == 0:
            continue  # SQLite's own empty files from our raw reader are not the tool's doing
        if before.get(path) != after.get(path):
            what = (
                "created" if path not in before else "removed" if path not in after else "changed"
            )
            changes.append(f"{what} {path}")
    return changes


def read_messages(db: Path) -> dict[tuple[str, int], str]:
    """Every message, read with raw sqlite3 (not through threadloom)."""
    if not db.exists():
        return {}
    con = sqlite3.connect(db, timeout=10)
    try:
        rows = con.execute("SELECT thread_id, seq, content FROM messages").fetchall()
    except sqlite3.DatabaseError as err:
        return {("<unreadable>", 0): str(err)}
    finally:
        con.close()
    return {(str(t), int(s)): str(c) for t, s, c in rows}


def diff_messages(
    before: dict[tuple[str, int], str], after: dict[tuple[str, int], str]
) -> list[str]:
    out = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            out.append(f"message {key[0]}#{key[1]} deleted")
        elif key not in before:
            out.append(f"message {key[0]}#{key[1]} appeared")
        elif before[key] != after[key]:
            out.append(f"message {key[0]}#{key[1]} rewritten: {after[key][:80]!r}")
    return out


def processes_with(tag: str) -> list[tuple[int, str]]:
    found = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if tag.encode() in cmd:
            found.append((int(pid), cmd.decode(errors="replace")[:120]))
    return found


def survivors(tag: str, grace_s: float = 5.0) -> list[str]:
    """Processes carrying ``tag`` that are still there once the kernel has had ``grace_s`` to
    finish killing a dead PID namespace (bounded; returns as soon as none is left). Whatever is
    found is killed, so one failing attempt does not leave the machine busy."""
    deadline = time.monotonic() + grace_s
    found = processes_with(tag)
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = processes_with(tag)
    for pid, _ in found:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    return [f"pid {pid}: {cmd}" for pid, cmd in found]


def accepted(server: socket.socket | None) -> int:
    """How many connections reached ``server`` (they are closed at once)."""
    n = 0
    if server is None:
        return 0
    while True:
        try:
            conn, _ = server.accept()
        except (BlockingIOError, OSError):
            return n
        conn.close()
        n += 1


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    old = os.environ.copy()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)


# --------------------------------------------------------------------------- attempts


@dataclass(frozen=True)
class Attempt:
    id: str
    tool: str
    input: dict[str, Any]
    bwrap: bool = False
    """Needs bubblewrap (run with ``sandbox = "required"``)."""
    home: Literal["plain", "link"] = "plain"
    network: bool = False
    forbid: tuple[str, ...] = ()
    """Text whose presence in the output means the attack worked."""
    nobody: bool = True
    """Part of the subset re-run as the unprivileged user."""
    env: tuple[tuple[str, str], ...] = ()
    """Set in threadloom's environment while the attempt runs (``THREADLOOM_CGROUP=none``:
    the process limit without a cgroup, as on a host where none is usable)."""


def _fill(value: Any, world: World, tag: str) -> Any:
    if isinstance(value, str):
        return (
            value.replace("{ws}", str(world.ws))
            .replace("{outside}", str(world.outside))
            .replace("{home}", str(world.home_plain))
            .replace("{home_link}", str(world.home_link))
            .replace("{keys}", str(world.keys))
            .replace("{db}", str(world.db))
            .replace("{root}", str(world.root))
            .replace("{unix}", str(world.unix_path))
            .replace("{port}", str(world.tcp_port))
            .replace("{tag}", tag)
        )
    if isinstance(value, dict):
        return {k: _fill(v, world, tag) for k, v in value.items()}
    return value


async def run_attempt(attempt: Attempt, world: World) -> Outcome:
    tag = f"tl{uuid.uuid4().hex[:12]}"
    raw = _fill(attempt.input, world, tag)
    if attempt.tool == "bash":
        raw = {"timeout_s": 20, **raw, "command": SHELL_PRELUDE + raw["command"]}
    (tool,) = build_tools([attempt.tool])
    ctx = ToolContext(
        workspace=world.ws.resolve(),
        sandbox="required" if attempt.bwrap else "none",
        network=attempt.network,
        hidden=world.hidden,
        default_timeout_s=20,
    )
    home = world.home_plain if attempt.home == "plain" else world.home_link
    accepted(world.unix_server)
    accepted(world.tcp_server)
    before_files = snapshot(world.protected())
    before_msgs = read_messages(world.db)
    with environment({**world.env(home), **dict(attempt.env)}):
        out = await tool.invoke(raw, ctx)
    if attempt.tool == "bash" and "bash: failed to start:" in out.text:
        # an attack that never ran proves nothing: it must not count as contained
        survivors(tag)
        raise AttemptNotRun(f"{attempt.id} did not run: {out.text.strip()[:300]}")
    outcome = Outcome(attempt.id, output=out.text)
    outcome.surviving_processes = survivors(tag)
    outcome.changed_messages = diff_messages(before_msgs, read_messages(world.db))
    outcome.escapes = diff_snapshots(before_files, snapshot(world.protected()))
    for text in attempt.forbid:
        if text in out.text:
            outcome.escapes.append(f"the output shows {text!r}")
    for server, what in ((world.unix_server, "unix socket"), (world.tcp_server, "tcp port")):
        if n := accepted(server):
            outcome.escapes.append(f"{n} connection(s) reached the test's {what}")
    for name, canary in world.canaries.items():
        if attempt.tool == "bash" and attempt.bwrap and name == "outside":
            continue  # the sandbox lets a command read the filesystem outside, by design
        if attempt.tool == "bash" and not attempt.bwrap and not name.startswith("env_"):
            continue  # the plain runner protects no file (README says so); only secrets count
        if canary in out.text:
            outcome.decoy_reads.append(f"{name} in the output")
    return record(outcome)


def _fa(aid: str, tool: str, **inp: Any) -> Attempt:
    return Attempt(aid, tool, inp)


def _sh(aid: str, command: str, **kw: Any) -> Attempt:
    return Attempt(aid, "bash", {"command": command}, bwrap=True, forbid=(ESCAPED,), **kw)


def _plain(aid: str, command: str, **kw: Any) -> Attempt:
    return Attempt(aid, "bash", {"command": command}, bwrap=False, forbid=(ESCAPED,), **kw)


_PY_CONNECT = (
    "python3 -c 'import socket,sys\n"
    'fam = socket.AF_UNIX if sys.argv[1].startswith("/") else socket.AF_INET\n'
    "s = socket.socket(fam)\ns.settimeout(3)\n"
    "addr = sys.argv[1] if fam == socket.AF_UNIX else (sys.argv[1], int(sys.argv[2]))\n"
    'try:\n    s.connect(addr)\n    print("ESCX" + "APED connected")\n'
    'except OSError as e:\n    print("refused:", e)\' '
)

_FORK_BOMB = (
    "python3 - {tag} <<'EOF'\n"
    "import os, signal\n"
    "n = 0\n"
    "for i in range(3000):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as e:\n"
    "        print('fork stopped by', e); break\n"
    "    if pid == 0:\n"
    "        signal.pause(); os._exit(0)\n"
    "    n += 1\n"
    "print('forked', n)\n"
    "if n >= 3000:\n"
    "    print('ESCX' + 'APED no process limit')\n"
    "EOF"
)

_THREAD_BOMB = (
    "python3 - {tag} <<'EOF'\n"
    "import threading, time\n"
    "n = 0\n"
    "try:\n"
    "    for i in range(3000):\n"
    "        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    "        n += 1\n"
    "except RuntimeError as e:\n"
    "    print('thread stopped by', e)\n"
    "print('started', n)\n"
    "if n >= 3000:\n"
    "    print('ESCX' + 'APED no process limit')\n"
    "EOF"
)

_SHELL_FORK_BOMB = (
    # bash's own fork bomb, doubling at each level (2,047 shells at most: a broken limit cannot
    # melt the machine). Nothing else forks once it has started — the shells wait with `read -t`
    # on a FIFO, the watcher counts /proc with a glob — so the watcher sees the peak whatever the
    # limit does to forks. More than 1,000 at once is no limit at all (512 holds far fewer).
    'f="${TMPDIR:-/tmp}/fb-{tag}"; mkfifo "$f"; exec 9<>"$f"; rm -f "$f"; '
    "b(){ if [ $1 -lt 10 ]; then b $(($1+1)) & b $(($1+1)) & fi; read -t 4 -u 9; }; "
    "p=(/proc/[0-9]*); base=${#p[@]}; b 0 2>/dev/null & peak=0; "
    "for i in {1..40}; do p=(/proc/[0-9]*); n=$((${#p[@]} - base)); "
    "[ $n -gt $peak ] && peak=$n; read -t 0.1 -u 9; done; echo peak $peak; "
    "[ $peak -gt 1000 ] && E no process limit"
)

NO_CGROUP = (("THREADLOOM_CGROUP", "none"),)
"""The process limit without a cgroup: as root the supervisor, as anyone else RLIMIT_NPROC."""

DB_FILES = ("threads.db", "threads.db-wal", "threads.db-shm", "threads.db-journal")

ATTEMPTS: list[Attempt] = [
    # ---- file tools: path escapes
    _fa("read-dotdot", "read_file", path="../outside/secret.txt"),
    _fa("read-absolute-outside", "read_file", path="{outside}/secret.txt"),
    _fa("read-absolute-ssh-key", "read_file", path="{home}/.ssh/id_rsa"),
    _fa("read-symlinked-ssh-key", "read_file", path="{home_link}/.ssh/id_rsa"),
    _fa("read-symlink-file", "read_file", path="link-out"),
    _fa("read-symlink-dir", "read_file", path="dirlink/secret.txt"),
    _fa("read-symlink-home", "read_file", path="homelink/.aws/credentials"),
    _fa("read-proc-self-root", "read_file", path="/proc/self/root{outside}/secret.txt"),
    _fa("read-proc-self-cwd", "read_file", path="/proc/self/cwd/../../../{outside}/secret.txt"),
    _fa("read-proc-self-environ", "read_file", path="/proc/self/environ"),
    _fa("write-dotdot", "write_file", path="../outside/new.txt", content="x"),
    _fa("write-absolute-outside", "write_file", path="{outside}/new.txt", content="x"),
    _fa("write-symlink-file", "write_file", path="link-out", content="overwritten"),
    _fa("write-symlink-dir", "write_file", path="dirlink/new.txt", content="x"),
    _fa(
        "write-ssh-authorized-keys",
        "write_file",
        path="homelink/.ssh/authorized_keys",
        content="ssh-ed25519 AAAA attacker",
    ),
    _fa("edit-symlink-file", "edit_file", path="link-out", old="outside secret", new="gone"),
    _fa("list-dotdot", "list_files", path=".."),
    _fa("list-symlink-dir", "list_files", path="dirlink"),
    _fa("grep-dotdot", "grep", pattern="canary-", path=".."),
    _fa("grep-symlink-dir", "grep", pattern="canary-", path="dirlink"),
    _fa("grep-whole-workspace", "grep", pattern="canary-"),
    # ---- file tools: threadloom's own record
    *[
        _fa(f"write-{name}", "write_file", path=f".threadloom/{name}", content="garbage")
        for name in DB_FILES
    ],
    _fa("write-log", "write_file", path=".threadloom/logs/job.jsonl", content="{}\n"),
    _fa("write-new-under-threadloom", "write_file", path=".threadloom/evil.txt", content="x"),
    _fa("write-db-absolute", "write_file", path="{db}", content="garbage"),
    _fa(
        "write-db-dotdot-spelling",
        "write_file",
        path="src/../.threadloom/threads.db",
        content="garbage",
    ),
    _fa("write-db-via-symlink", "write_file", path="dblink", content="garbage"),
    _fa("edit-log", "edit_file", path=".threadloom/logs/job.jsonl", old="event", new="evil"),
    _fa("edit-db", "edit_file", path=".threadloom/threads.db", old="SQLite", new="SQLitX"),
    _fa("read-db", "read_file", path=".threadloom/threads.db"),
    _fa("read-db-via-symlink", "read_file", path="dblink"),
    _fa("read-log", "read_file", path=".threadloom/logs/job.jsonl"),
    _fa("list-threadloom", "list_files", path=".threadloom"),
    _fa("list-workspace-pattern", "list_files", pattern="**/*.jsonl"),
    _fa("grep-threadloom", "grep", pattern="canary-", path=".threadloom"),
    _fa("grep-threadloom-glob", "grep", pattern="canary-", glob="*.jsonl"),
    # ---- file tools: git's configuration
    _fa(
        "write-git-config",
        "write_file",
        path=".git/config",
        content="[core]\n\tfsmonitor = touch /tmp/pwned\n",
    ),
    _fa(
        "edit-git-config",
        "edit_file",
        path=".git/config",
        old="[core]",
        new="[core]\n\tfsmonitor = touch /tmp/pwned",
    ),
    _fa(
        "write-git-hook",
        "write_file",
        path=".git/hooks/pre-commit",
        content="#!/bin/sh\ntouch /tmp/pwned\n",
    ),
    _fa(
        "write-git-info-attributes",
        "write_file",
        path=".git/info/attributes",
        content="* filter=evil\n",
    ),
    _fa("write-worktree-git-file", "write_file", path="wt/.git", content="gitdir: /tmp/evil\n"),
    _fa("edit-worktree-git-file", "edit_file", path="wt/.git", old="gitdir:", new="gitdir: /x"),
    _fa("write-nested-repo-git-config", "write_file", path="sub/.git/config", content="x"),
    _fa("write-git-dotdot-spelling", "write_file", path="wt/../.git/config", content="x"),
    # ---- bash under bubblewrap: privileges and mounts
    _sh("bash-remount-root-rw", "mount -o remount,rw / && E remount; echo x > {outside}/rw.txt"),
    _sh(
        "bash-mount-bind-outside",
        "mkdir -p m && mount --bind {outside} m && E mounted;"
        " echo x > m/bound.txt; cat m/secret.txt",
    ),
    _sh("bash-umount-ssh-hiding", "umount {home}/.ssh; cat {home}/.ssh/id_rsa"),
    _sh("bash-mount-tmpfs-over-git", "mount -t tmpfs none .git && E tmpfs; echo x > .git/config"),
    _sh(
        "bash-unshare-new-userns",
        "unshare -r -m sh -c 'mount --bind {outside} /mnt && echo x > /mnt/ns.txt' && E unshared",
    ),
    _sh(
        "bash-chroot-proc-1-root",
        "ls /proc/1/root/ >/dev/null && cat /proc/1/root{outside}/secret.txt",
    ),
    # ---- bash under bubblewrap: secrets
    _sh("bash-read-ssh-key", "cat {home}/.ssh/id_rsa; ls -la {home}/.ssh"),
    _sh("bash-read-aws", "cat ~/.aws/credentials"),
    _sh("bash-read-symlinked-ssh", "cat ~/.ssh/id_rsa; cat {home_link}/.ssh/id_rsa", home="link"),
    _sh("bash-read-symlinked-aws", "cat ~/.aws/credentials", home="link"),
    _sh("bash-read-db", "cat .threadloom/threads.db | strings | grep canary-; cat {db}"),
    _sh("bash-read-logs", "cat .threadloom/logs/*; grep -r canary- .threadloom"),
    _sh("bash-proc-ppid-environ", "cat /proc/$PPID/environ | tr '\\0' '\\n'"),
    _sh("bash-proc-1-environ", "cat /proc/1/environ | tr '\\0' '\\n'"),
    _sh("bash-env", "env; set"),
    # ---- bash under bubblewrap: host services, network
    _sh("bash-postgres-unix-socket", _PY_CONNECT + "/var/run/postgresql/.s.PGSQL.5432"),
    _sh(
        "bash-psql-unix-socket",
        "psql -h /var/run/postgresql -U postgres -d postgres -Atc \"select 'ESCX' || 'APED'\"",
    ),
    _sh("bash-test-unix-socket", _PY_CONNECT + "{unix}"),
    _sh("bash-tcp-postgres", _PY_CONNECT + "127.0.0.1 5432"),
    _sh("bash-tcp-test-server", _PY_CONNECT + "127.0.0.1 {port}"),
    # ---- bash under bubblewrap: writes outside and to the record
    _sh("bash-write-outside", "echo x > {outside}/bash.txt; echo x > {root}/elsewhere/x"),
    _sh("bash-write-home", "echo x > ~/.bashrc_evil; echo x >> {home}/.aws/credentials"),
    _sh(
        "bash-write-git-config",
        "git config core.fsmonitor 'touch /tmp/pwned'; echo x >> .git/config",
    ),
    _sh("bash-write-git-hook", "echo 'touch /tmp/pwned' > .git/hooks/post-checkout"),
    _sh("bash-write-nested-repo-hook", "echo 'touch /tmp/pwned' > sub/.git/hooks/pre-commit"),
    _sh("bash-rewrite-worktree-git-file", "echo 'gitdir: /tmp/evil' > wt/.git"),
    _sh(
        "bash-sqlite-update-messages",
        "sqlite3 .threadloom/threads.db "
        "\"UPDATE messages SET content = 'TAMP' || 'ERED'\"; echo rc=$?",
    ),
    _sh("bash-sqlite-delete-messages", "sqlite3 {db} 'DELETE FROM messages'; echo rc=$?"),
    _sh("bash-delete-db", "rm -f .threadloom/threads.db* .threadloom/logs/*"),
    # ---- bash under bubblewrap: processes
    _sh("bash-fork-bomb-bounded", _FORK_BOMB),
    _sh("bash-thread-bomb", _THREAD_BOMB),
    _sh("bash-shell-fork-bomb", _SHELL_FORK_BOMB),
    _sh("bash-fork-bomb-no-cgroup", _FORK_BOMB, env=NO_CGROUP),
    _sh("bash-thread-bomb-no-cgroup", _THREAD_BOMB, env=NO_CGROUP),
    _sh("bash-shell-fork-bomb-no-cgroup", _SHELL_FORK_BOMB, env=NO_CGROUP),
    _sh("bash-setsid-survivor", "(setsid sh -c 'sleep 300; : {tag}' &); echo started"),
    _sh("bash-nohup-survivor", "nohup sh -c 'sleep 301; : {tag}' >/dev/null 2>&1 & echo started"),
    _sh("bash-double-fork-survivor", "( ( sh -c 'sleep 302; : {tag}' & ) & ); echo started"),
    # ---- bash without the sandbox: what the plain runner must still hold
    _plain("plain-env", "env"),
    _plain("plain-proc-ppid-environ", "cat /proc/$PPID/environ | tr '\\0' '\\n'"),
    _plain("plain-setsid-survivor", "(setsid sh -c 'sleep 303; : {tag}' &); echo started"),
    _plain("plain-fork-bomb", _FORK_BOMB),
    _plain("plain-thread-bomb", _THREAD_BOMB),
    _plain("plain-shell-fork-bomb", _SHELL_FORK_BOMB),
    _plain("plain-fork-bomb-no-cgroup", _FORK_BOMB, env=NO_CGROUP),
    _plain("plain-thread-bomb-no-cgroup", _THREAD_BOMB, env=NO_CGROUP),
    _plain("plain-shell-fork-bomb-no-cgroup", _SHELL_FORK_BOMB, env=NO_CGROUP),
    _plain(
        "plain-double-fork-survivor",
        "( ( nohup sh -c 'sleep 304; : {tag}' >/dev/null 2>&1 & ) & ); echo started",
    ),
    _plain(
        "plain-sqlite-update-messages",
        "sqlite3 {db} \"UPDATE messages SET content = 'TAMP' || 'ERED'\"; echo rc=$?",
    ),
    _plain("plain-sqlite-delete-messages", "sqlite3 {db} 'DELETE FROM messages'; echo rc=$?"),
]

BY_ID = {a.id: a for a in ATTEMPTS}
assert len(BY_ID) == len(ATTEMPTS), "attempt ids must be unique"
