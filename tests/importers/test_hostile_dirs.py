"""A hostile session directory (issue 22, items 10 and 11): symlinks out of the directory named
(a session file, ``subagents/``, ``tool-results/``, a ``.meta.json``, Codex's index), FIFOs, a
socket and links to ``/dev/zero`` where files are expected, a line over the bound, directory
and symlink loops. Each attempt is a real ``threadloom import`` process (as whatever user runs
the tests: root in CI) with a timeout and an address-space limit, next to a decoy "private key"
outside the directory whose access time is watched.

Counted per attempt: a hang (the timeout), a crash (exit not 0), a read outside (a decoy's
access time moved), a leak (a decoy's text in the database or the output), unnamed (the path
is not named by a warning line). Every count must be 0."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.importers._lines import MAX_LINE
from tests.importers.fixtures import ClaudeSession, CodexRollout

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30
ADDRESS_SPACE = 2 << 30


@dataclass
class Attempt:
    name: str
    target: Path
    named: list[Path] = field(default_factory=list)
    """Paths a warning line must name."""
    decoys: list[Path] = field(default_factory=list)
    threads: int | None = None
    """Threads the import must give (None: not checked)."""


def _secret(n: str) -> str:
    return f"-----BEGIN DECOY PRIVATE KEY {n}-----"


def _session(project: Path, sid: str = "0f7a6b8c-1111-4222-8333-944455556666") -> ClaudeSession:
    s = ClaudeSession(project, sid)
    s.user("look at the build")
    s.call("tu1", "Bash", {"command": "make"}, msg_id="m1")
    return s


def _persisted(s: ClaudeSession) -> None:
    s.result("tu1", s.tool_output("tu1", "the whole build log"))
    s.text("done", msg_id="m2")


def _plain(s: ClaudeSession) -> None:
    s.result("tu1", "ok")
    s.text("done", msg_id="m2")


def _outside(base: Path, name: str, text: str) -> Path:
    f = base / "outside" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


def _claude_file(path: Path, sid: str, secret: str) -> None:
    s = ClaudeSession(path.parent, sid, file=path)
    s.user(secret)
    s.text(secret, msg_id="m9")
    s.write()


def build(base: Path) -> list[Attempt]:
    """The attempts, each in a directory of its own under ``base``."""
    out: list[Attempt] = []

    def case(name: str, make: Callable[[Path, Attempt], None]) -> None:
        d = base / name
        proj = d / "proj"
        a = Attempt(name, proj)
        make(d, a)
        out.append(a)

    def tool_results_dir_link(d: Path, a: Attempt) -> None:
        s = _session(a.target)
        _persisted(s)
        s.write()
        decoy = _outside(d, "results/tu1.txt", _secret(a.name))
        (s.dir / "tool-results" / "tu1.txt").unlink()
        (s.dir / "tool-results").rmdir()
        (s.dir / "tool-results").symlink_to(decoy.parent)
        a.named, a.decoys, a.threads = [s.dir / "tool-results"], [decoy], 1

    def tool_results_dir_link_one_file(d: Path, a: Attempt) -> None:
        tool_results_dir_link(d, a)
        a.target = a.target / "0f7a6b8c-1111-4222-8333-944455556666.jsonl"

    def session_file_link(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        decoy = d / "outside" / "evil.jsonl"
        decoy.parent.mkdir(parents=True)
        _claude_file(decoy, "evil", _secret(a.name))
        (a.target / "evil.jsonl").symlink_to(decoy)
        a.named, a.decoys, a.threads = [a.target / "evil.jsonl"], [decoy], 1

    def subagents_dir_link(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        decoy = d / "outside" / "subs" / "agent-x.jsonl"
        decoy.parent.mkdir(parents=True)
        _claude_file(decoy, s.session_id, _secret(a.name))
        (s.dir).mkdir(exist_ok=True)
        (s.dir / "subagents").symlink_to(decoy.parent)
        a.named, a.decoys, a.threads = [s.dir / "subagents"], [decoy], 1

    def subagent_file_link(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        decoy = d / "outside" / "agent-c.jsonl"
        decoy.parent.mkdir(parents=True)
        _claude_file(decoy, s.session_id, _secret(a.name))
        (s.dir / "subagents").mkdir(parents=True)
        (s.dir / "subagents" / "agent-c.jsonl").symlink_to(decoy)
        a.named, a.decoys, a.threads = [s.dir / "subagents" / "agent-c.jsonl"], [decoy], 1

    def _with_subagent(a: Attempt) -> tuple[ClaudeSession, Path]:
        s = _session(a.target)
        _plain(s)
        sub = s.subagent("a", "tu1")
        sub.user("sub task")
        sub.text("sub done", msg_id="s1")
        s.write()
        return s, s.dir / "subagents" / "agent-a.meta.json"

    def meta_link(d: Path, a: Attempt) -> None:
        _s, meta = _with_subagent(a)
        decoy = _outside(d, "meta.json", json.dumps({"description": _secret(a.name)}))
        meta.unlink()
        meta.symlink_to(decoy)
        a.named, a.decoys, a.threads = [meta], [decoy], 2

    def meta_fifo(d: Path, a: Attempt) -> None:
        _s, meta = _with_subagent(a)
        meta.unlink()
        os.mkfifo(meta)
        a.named, a.threads = [meta], 2

    def meta_devzero(d: Path, a: Attempt) -> None:
        _s, meta = _with_subagent(a)
        meta.unlink()
        meta.symlink_to("/dev/zero")
        a.named, a.threads = [meta], 2

    def subagent_fifo(d: Path, a: Attempt) -> None:
        s, _meta = _with_subagent(a)
        os.mkfifo(s.dir / "subagents" / "agent-b.jsonl")
        a.named, a.threads = [s.dir / "subagents" / "agent-b.jsonl"], 2

    def subagent_devzero(d: Path, a: Attempt) -> None:
        s, _meta = _with_subagent(a)
        (s.dir / "subagents" / "agent-z.jsonl").symlink_to("/dev/zero")
        a.named, a.threads = [s.dir / "subagents" / "agent-z.jsonl"], 2

    def session_fifo(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        os.mkfifo(a.target / "f.jsonl")
        a.named, a.threads = [a.target / "f.jsonl"], 1

    def session_socket(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(a.target / "s.jsonl"))
        sock.close()
        a.named, a.threads = [a.target / "s.jsonl"], 1

    def session_devzero(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        (a.target / "z.jsonl").symlink_to("/dev/zero")
        a.named, a.threads = [a.target / "z.jsonl"], 1

    def output_fifo(d: Path, a: Attempt) -> None:
        _persisted(s := _session(a.target))
        s.write()
        (s.dir / "tool-results" / "tu1.txt").unlink()
        os.mkfifo(s.dir / "tool-results" / "tu1.txt")
        a.named, a.threads = [s.dir / "tool-results" / "tu1.txt"], 1

    def output_devzero(d: Path, a: Attempt) -> None:
        _persisted(s := _session(a.target))
        s.write()
        (s.dir / "tool-results" / "tu1.txt").unlink()
        (s.dir / "tool-results" / "tu1.txt").symlink_to("/dev/zero")
        a.named, a.threads = [s.dir / "tool-results" / "tu1.txt"], 1

    def dir_link_out(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        decoy = d / "outside" / "proj2" / "other.jsonl"
        decoy.parent.mkdir(parents=True)
        _claude_file(decoy, "other", _secret(a.name))
        (a.target / "more").symlink_to(decoy.parent)
        a.named, a.decoys, a.threads = [a.target / "more"], [decoy], 1

    def dir_loop(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        (a.target / "sub").mkdir()
        (a.target / "sub" / "loop").symlink_to(a.target)
        (a.target / "up").symlink_to("sub")
        a.threads = 1  # each session once, however many ways lead to it

    def symlink_loop(d: Path, a: Attempt) -> None:
        _plain(s := _session(a.target))
        s.write()
        (a.target / "l.jsonl").symlink_to("m.jsonl")
        (a.target / "m.jsonl").symlink_to("l.jsonl")
        a.named, a.threads = [a.target / "l.jsonl", a.target / "m.jsonl"], 1

    def huge_line(d: Path, a: Attempt) -> None:
        s = _session(a.target)
        s.raw(json.dumps({"type": "user", "uuid": "big", "parentUuid": None, "x": "y" * MAX_LINE}))
        _plain(s)
        s.write()
        a.named, a.threads = [s.path], 1

    def codex_index_link(d: Path, a: Attempt) -> None:
        r = CodexRollout(a.target)
        r.user("hello")
        r.say("hi")
        r.write()
        line = {"id": r.session_id, "thread_name": _secret(a.name), "updated_at": "2026-01-01"}
        decoy = _outside(d, "session_index.jsonl", json.dumps(line) + "\n")
        (a.target / "session_index.jsonl").symlink_to(decoy)
        a.named, a.decoys, a.threads = [a.target / "session_index.jsonl"], [decoy], 1

    def codex_index_devzero(d: Path, a: Attempt) -> None:
        r = CodexRollout(a.target)
        r.user("hello")
        r.say("hi")
        r.write()
        (a.target / "session_index.jsonl").symlink_to("/dev/zero")
        a.named, a.threads = [a.target / "session_index.jsonl"], 1

    for make in (
        tool_results_dir_link,
        tool_results_dir_link_one_file,
        session_file_link,
        subagents_dir_link,
        subagent_file_link,
        meta_link,
        meta_fifo,
        meta_devzero,
        subagent_fifo,
        subagent_devzero,
        session_fifo,
        session_socket,
        session_devzero,
        output_fifo,
        output_devzero,
        dir_link_out,
        dir_loop,
        symlink_loop,
        huge_line,
        codex_index_link,
        codex_index_devzero,
    ):
        case(make.__name__, make)
    for a in out:
        for decoy in a.decoys:
            os.utime(decoy, ns=(0, decoy.stat().st_mtime_ns))  # a read moves it (relatime)
    return out


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run(attempts: list[Attempt], code: Path = ROOT) -> dict[str, object]:
    """Import each attempt with the code at ``code``; the counts, and what went wrong."""
    counts = {"attempts": len(attempts), "hangs": 0, "crashes": 0, "reads_outside": 0}
    counts |= {"leaks": 0, "unnamed": 0, "wrong_threads": 0}
    failures: list[str] = []
    for a in attempts:
        db = a.target.parent / "threads.db"
        cmd = [sys.executable, "-m", "orchestrator", "--db", str(db), "--json"]
        try:
            p = subprocess.run(
                [*cmd, "import", str(a.target)],
                cwd=code,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                preexec_fn=_limit,
            )
        except subprocess.TimeoutExpired:
            counts["hangs"] += 1
            failures.append(f"{a.name}: hangs")
            continue
        secrets = [_secret(a.name)]
        stored = b"".join(
            f.read_bytes() for f in db.parent.glob("threads.db*") if f.is_file()
        ).decode("utf-8", "replace")
        if p.returncode != 0:
            counts["crashes"] += 1
            failures.append(f"{a.name}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        if any(d.stat().st_atime_ns != 0 for d in a.decoys):
            counts["reads_outside"] += 1
            failures.append(f"{a.name}: read a file outside the directory")
        if any(s in p.stdout or s in p.stderr or s in stored for s in secrets):
            counts["leaks"] += 1
            failures.append(f"{a.name}: the decoy's text got out")
        warnings = [x for x in p.stderr.splitlines() if x.startswith("warning: ")]
        refused = json.loads(p.stdout).get("refused") or [] if p.returncode == 0 else []
        for path in a.named:
            said = any(x.startswith(f"warning: {path}: ") for x in warnings)
            if not said or not any(x.startswith(f"{path}: ") for x in refused):
                counts["unnamed"] += 1
                failures.append(f"{a.name}: no warning names {path}: {p.stderr.strip()[-300:]}")
        if len(warnings) != len(refused) or any(x.count("\n") for x in refused):
            failures.append(f"{a.name}: warnings are not one line each, as in --json")
        if p.returncode == 0 and a.threads is not None:
            got = len(json.loads(p.stdout)["threads"])
            if got != a.threads:
                counts["wrong_threads"] += 1
                failures.append(f"{a.name}: {got} threads, not {a.threads}")
    return {**counts, "failures": failures}


def test_a_hostile_session_directory_is_read_only_inside_and_never_hangs(tmp_path: Path) -> None:
    result = run(build(tmp_path))
    print(json.dumps(result))
    assert result["failures"] == [], result
    assert result["attempts"] == 21
