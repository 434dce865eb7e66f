"""The fast read path (``orchestrator.cli._fast`` over ``store.rawread``) prints exactly what the
full path prints, and really is taken without SQLAlchemy, pydantic or structlog.

One real database: the demo job run by the CLI, a fork by reference, an import with non-ASCII
text, escape sequences and a secret, a thread left ``running`` by a dead runner (reads
``interrupted``) and one whose runner lives. Each command of the matrix runs twice in
subprocesses — with ``THREADLOOM_NO_FAST=1`` (the full path) and without (the fast path,
traced by ``THREADLOOM_FAST_TRACE``) — and stdout, stderr and the exit code must be equal, and
the trace must say the fast path answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from store import NewMessage, Status, Store

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sqlalchemy", "pydantic", "structlog", "aiosqlite", "alembic", "click")

IMPORT_TITLE = "Ünïcode \x1b]0;pwned\x07 title 日本語 \u202eevil"
SECRET = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"
IMPORT_LINES = [
    {
        "role": "user",
        "content": "Héllo wörld — naïve café ✓ \x1b[31mred\x1b[0m, a bell \x07, bidi \u202eevil",
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "plan: list the files", "signature": "sig"},
            {"type": "text", "text": "Listing the files of the répertoire."},
            {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"command": "ls ✓"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "tu1",
                "content": [
                    {"type": "text", "text": "line1\r\nline2\rover\x1b[2J"},
                    {"type": "text", "text": "日本語 wide zebrafish"},
                ],
            }
        ],
    },
    {"role": "assistant", "content": f"The key was {SECRET}; done 日本語 zebrafish."},
]


@dataclass(frozen=True)
class Db:
    path: Path
    lead: str
    worker: str
    fork: str
    imported: str
    dead: str
    live: str

    def ref(self, name: str) -> str:
        return f"T-{getattr(self, name)}"


def _cli(
    *args: str, cwd: Path, fast: bool, trace: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
    env["COLUMNS"] = "120"
    if not fast:
        env["THREADLOOM_NO_FAST"] = "1"
    if trace is not None:
        env["THREADLOOM_FAST_TRACE"] = str(trace)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        timeout=300,
        check=False,
    )


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: no process has this pid now
    return proc.pid


async def _add_running_threads(db: Path, lead: str) -> tuple[str, str]:
    store = await Store.open(str(db))
    try:
        host = socket.gethostname()
        out = []
        for title, owner in (
            ("stuck run ✓", f"{host}:{_dead_pid()}:deadbeef"),
            ("live run", f"{host}:{os.getpid()}:alive"),
        ):
            t = await store.create_thread(
                kind="worker",
                title=title,
                parent_id=lead,
                messages=[NewMessage.user(f"{title}: work in progress")],
            )
            await store.set_status(t.id, Status.RUNNING)
            await store.leases.acquire(t.id, owner, ttl_s=3600)
            out.append(t.id)
        return out[0], out[1]
    finally:
        await store.close()


def _twin_id(worker: str) -> str:
    """An id ending as the worker's does in its last 6 characters and not in its 7th from the
    end (a 0 there one run in 32 made one character more ambiguous too)."""
    fill = "1" if worker[-7] == "0" else "0"
    return fill * 20 + worker[-6:]


async def _add_twin(db: Path, worker: str) -> None:
    """A thread whose id ends as the worker's does (its last 6 characters): a ref by that end
    is ambiguous, one character more is not."""
    store = await Store.open(str(db))
    try:
        await store.create_thread(kind="worker", title="twin", thread_id=_twin_id(worker))
    finally:
        await store.close()


def _age_threads(db: Path, days: int) -> None:
    """Move every thread's creation back ``days`` days, so ages ("2w") do not tick between
    the two runs of a command."""
    fmt = "%Y-%m-%d %H:%M:%S.%f"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        rows = conn.execute("SELECT id, created_at, updated_at FROM threads").fetchall()
        conn.execute("BEGIN IMMEDIATE")
        for tid, created, updated in rows:
            back = [
                (datetime.strptime(v, fmt) - timedelta(days=days)).strftime(fmt)
                for v in (created, updated)
            ]
            conn.execute(
                "UPDATE threads SET created_at = ?, updated_at = ? WHERE id = ?", (*back, tid)
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Db:
    where = tmp_path_factory.mktemp("fast-read")
    path = where / "threads.db"
    demo = _cli("--db", str(path), "--json", "demo", cwd=where, fast=False)
    assert demo.returncode == 0, demo.stderr
    ran = json.loads(demo.stdout)
    lead, worker = ran["lead"], ran["workers"][0]["ref"]
    fork = _cli(
        "--db", str(path), "--json", "fork", f"{worker}#3", "Try again: ünï \x1b[2J", "--no-run",
        cwd=where,
        fast=False,
    )  # fmt: skip
    assert fork.returncode == 0, fork.stderr
    src = where / "session.jsonl"
    src.write_text("\n".join(json.dumps(line) for line in IMPORT_LINES) + "\n", encoding="utf-8")
    imported = _cli(
        "--db", str(path), "--json", "import", str(src), "--title", IMPORT_TITLE,
        cwd=where,
        fast=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    dead, live = asyncio.run(_add_running_threads(path, lead.removeprefix("T-")))
    asyncio.run(_add_twin(path, worker.removeprefix("T-")))
    _age_threads(path, days=20)
    return Db(
        path=path,
        lead=lead.removeprefix("T-"),
        worker=worker.removeprefix("T-"),
        fork=json.loads(fork.stdout)["ref"].removeprefix("T-"),
        imported=json.loads(imported.stdout)["ref"].removeprefix("T-"),
        dead=dead,
        live=live,
    )


def _matrix(d: Db) -> list[tuple[str, ...]]:
    lead, worker, fork, imp = d.ref("lead"), d.ref("worker"), d.ref("fork"), d.ref("imported")
    ambiguous = lead[:6]  # every id of one test run shares its first characters
    return [
        ("ls",),
        ("--json", "ls"),
        ("ls", "--json", "--limit", "2"),
        ("ls", "--limit", "0"),
        ("ls", "--limit=3"),
        ("ls", "--job", fork[:12]),
        ("--json", "ls", "--job", worker),
        ("ls", "--status", "done"),
        ("ls", "--status", "running"),
        ("--json", "ls", "--status", "interrupted"),
        ("ls", "--status", "interrupted", "--limit", "1"),
        ("ls", "--status", "cancelled"),
        ("ls", "--kind", "worker"),
        ("--json", "ls", "--kind", "lead"),
        ("show", lead),
        ("show", worker),
        ("show", worker, "--tools"),
        ("show", f"{worker}#3-5"),
        ("show", "--tools", f"{worker}#3-"),
        ("show", f"{worker}#4"),
        ("--json", "show", worker),
        ("show", "--json", f"{worker}#2-3"),
        ("show", fork),
        ("--json", "show", fork),
        ("show", f"{fork}#2-4", "--tools"),
        ("show", imp),
        ("show", imp, "--tools"),
        ("show", imp, "--redact"),
        ("--json", "show", imp),
        ("--json", "show", imp, "--redact"),
        ("show", d.ref("dead")),
        ("--json", "show", d.ref("live")),
        ("show", d.ref("dead")[:20]),
        ("tree", lead),
        ("tree", fork),
        ("--json", "tree", worker),
        ("tree", imp),
        ("search", "tokenizer"),
        ("--json", "search", "tokenizer", "--limit", "3"),
        ("search", "zebrafish"),
        ("search", "日本語"),
        ("search", "sk-ant-api03"),
        ("--json", "search", "zebrafish"),
        ("search", "calc/tokenizer.py:12"),
        ("search", '"unbalanced'),
        ("search", '"off-by-one bound"'),
        ("search", "AND OR NOT ("),
        ("search", "nosuchwordanywhere"),
        ("--json", "search", "nosuchwordanywhere"),
        ("search", "tokenizer", "--job", fork),
        ("search", "zebrafish", "--job", lead),
        # errors: bad ref (2), unknown (3), ambiguous (3, listing candidates), past the end (3)
        ("show", "T-01"),
        ("--json", "show", "T-01"),
        ("show", f"{worker}#٣"),
        ("show", "T-zzzzzzzz"),
        ("--json", "tree", "T-zzzzzzzz"),
        ("show", ambiguous),
        ("--json", "show", ambiguous),
        ("ls", "--job", ambiguous),
        ("search", "x", "--job", "T-zzzz"),
        ("show", f"{worker}#99"),
        ("show", f"{worker}#2-99"),
        # refs by their end (SPEC "Refs by their end"): T-…SUFFIX, T-...SUFFIX, with anchors
        ("show", f"T-…{d.worker[-7:]}"),
        ("show", f"T-...{d.worker[-8:]}#3-5", "--tools"),
        ("--json", "show", f"T-…{d.fork[-8:]}#2-"),
        ("tree", f"T-…{d.lead[-8:]}"),
        ("ls", "--job", f"T-...{d.worker[-8:]}"),
        ("search", "tokenizer", "--job", f"T-…{d.fork[-8:]}"),
        ("show", f"T-…{d.worker[-6:]}"),  # the twin's end too: ambiguous
        ("--json", "show", f"T-…{d.worker[-6:]}#2"),
        ("show", "T-…zzzzzzzz"),
        ("show", "T-…zzz"),
        ("show", f"T-…{d.worker[-8:]}#99"),
    ]


def _trace_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _both(db: Db, args: tuple[str, ...], trace: Path) -> tuple[Any, Any, list[dict[str, Any]]]:
    full = ("--db", str(db.path), *args)
    slow = _cli(*full, cwd=db.path.parent, fast=False)
    fast = _cli(*full, cwd=db.path.parent, fast=True, trace=trace)
    return slow, fast, _trace_lines(trace)


# The full path of a whole matrix in one subprocess: ``main`` called once per command line
# with stdout/stderr captured (a pipe's view: not a terminal), THREADLOOM_NO_FAST set. One
# interpreter start instead of sixty (each costs the full path's ~1 s of imports); a few
# commands are also compared process against process below.
_SLOW_BATCH = """
import io, json, os, sys
os.environ["THREADLOOM_NO_FAST"] = "1"
from orchestrator.cli import main
runs = []
for args in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    code = 0
    try:
        main(args, prog_name="threadloom")
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    runs.append([code, out.getvalue(), err.getvalue()])
json.dump(runs, sys.stdout)
"""


def _slow_batch(db: Db, matrix: list[tuple[str, ...]]) -> list[tuple[int, str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
    env["COLUMNS"] = "120"
    proc = subprocess.run(
        [sys.executable, "-c", _SLOW_BATCH],
        input=json.dumps([["--db", str(db.path), *args] for args in matrix]),
        cwd=db.path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [(code, out, err) for code, out, err in json.loads(proc.stdout)]


def test_every_command_of_the_matrix_prints_the_same_bytes_on_both_paths(
    db: Db, tmp_path: Path
) -> None:
    matrix = _matrix(db)

    def fast(i: int) -> tuple[tuple[int, str, str], list[dict[str, Any]]]:
        trace = tmp_path / f"trace-{i}"
        proc = _cli("--db", str(db.path), *matrix[i], cwd=db.path.parent, fast=True, trace=trace)
        return (proc.returncode, proc.stdout, proc.stderr), _trace_lines(trace)

    with ThreadPoolExecutor(max_workers=3) as pool:
        fast_runs = pool.map(fast, range(len(matrix)))
        slow_runs = _slow_batch(db, matrix)
        fast_runs = list(fast_runs)
    problems = []
    for args, slow, (got, trace) in zip(matrix, slow_runs, fast_runs, strict=True):
        if got != slow:
            problems.append(
                f"{args}: exit {got[0]} vs {slow[0]}\n"
                f"fast stdout {got[1][:600]!r}\nfull stdout {slow[1][:600]!r}\n"
                f"fast stderr {got[2][:300]!r}\nfull stderr {slow[2][:300]!r}"
            )
        elif not (len(trace) == 1 and trace[0]["taken"]):
            problems.append(f"{args}: the fast path was not taken: {trace}")
    assert not problems, "\n\n".join(problems)
    # the matrix covers what it claims: errors of both codes, the liveness rule, candidates
    by_args = dict(zip(matrix, slow_runs, strict=True))
    assert by_args[("show", "T-01")][0] == 2
    assert by_args[("show", "T-zzzzzzzz")][0] == 3
    ambiguous = by_args[("show", db.ref("lead")[:6])]
    assert ambiguous[0] == 3 and "is ambiguous: T-" in ambiguous[2]
    by_end = by_args[("show", f"T-…{db.worker[-7:]}")]
    assert by_end[0] == 0 and by_end[1].startswith(db.ref("worker") + "  worker")
    twins = by_args[("show", f"T-…{db.worker[-6:]}")]
    assert twins[0] == 3 and db.ref("worker") in twins[2] and "T-" + _twin_id(db.worker) in twins[2]
    assert by_args[("show", "T-…zzz")][0] == 2
    interrupted = json.loads(by_args[("--json", "ls", "--status", "interrupted")][1])
    assert [r["ref"] for r in interrupted] == [db.ref("dead")]
    assert json.loads(by_args[("--json", "show", db.ref("live"))][1])["status"] == "running"
    shown = by_args[("show", db.ref("imported"))][1]
    assert "^[" in shown and "\x1b" not in shown  # ESC shown, not sent
    assert SECRET in shown  # the record, unless --redact
    assert SECRET not in by_args[("show", db.ref("imported"), "--redact")][1]
    assert SECRET not in by_args[("search", "sk-ant-api03")][1]
    assert by_args[("search", "zebrafish")][1].count(db.ref("imported")) == 2


@pytest.mark.parametrize(
    "args",
    [
        ("ls",),
        ("show", "{worker}", "--tools"),
        ("--json", "show", "{fork}"),
        ("tree", "{worker}"),
        ("search", "zebrafish"),
        ("--json", "show", "{ambiguous}"),
    ],
)
def test_process_against_process_the_two_paths_print_the_same(
    db: Db, tmp_path: Path, args: tuple[str, ...]
) -> None:
    refs = {"worker": db.ref("worker"), "fork": db.ref("fork"), "ambiguous": db.ref("lead")[:6]}
    args = tuple(a.format(**refs) for a in args)
    slow, fast, trace = _both(db, args, tmp_path / "trace")
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    assert [t["taken"] for t in trace] == [True]


@pytest.mark.parametrize(
    "args",
    [
        ("show", "{worker}", "--raw"),
        ("ls", "--status", "nope"),
        ("search", "   "),
        ("show",),
    ],
)
def test_what_the_fast_path_leaves_to_click_still_prints_the_same(
    db: Db, tmp_path: Path, args: tuple[str, ...]
) -> None:
    args = tuple(a.format(worker=db.ref("worker")) for a in args)
    slow, fast, trace = _both(db, args, tmp_path / "trace")
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    assert [t["taken"] for t in trace] == [False]


@pytest.mark.parametrize("command", ["ls", "show", "search", "tree"])
def test_the_fast_path_loads_no_heavy_module(db: Db, tmp_path: Path, command: str) -> None:
    arg = {"ls": [], "search": ["tokenizer"]}.get(command, [db.ref("worker")])
    trace = tmp_path / "trace"
    proc = _cli("--db", str(db.path), command, *arg, cwd=tmp_path, fast=True, trace=trace)
    assert proc.returncode == 0, proc.stderr
    [line] = _trace_lines(trace)
    assert line["taken"] is True
    assert line["heavy_modules"] == []


def test_importtime_of_ls_shows_no_sqlalchemy_pydantic_or_structlog(db: Db, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", "--db", str(db.path), "ls"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "store.rawread" in imported  # the fast path ran
    assert not {m for m in imported if m.split(".")[0] in HEAVY}


def test_a_missing_database_goes_the_full_way_is_not_created_and_is_named(
    tmp_path: Path,
) -> None:
    """``ls`` where there is no database (issue 23 item 12): the full path says which file it
    looked for and creates nothing; once a database exists (empty), both paths name it."""
    trace = tmp_path / "trace"
    where = tmp_path / ".threadloom" / "threads.db"
    proc = _cli("ls", cwd=tmp_path, fast=True, trace=trace)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"no threads: no database at {where} (")
    assert proc.stdout == ""
    assert not (tmp_path / ".threadloom").exists()
    assert _trace_lines(trace)[0] == {
        "taken": False,
        "reason": "database",
        "heavy_modules": [],
        "argv": ["ls"],
    }
    as_json = _cli("--json", "ls", cwd=tmp_path, fast=True)
    assert (as_json.returncode, as_json.stdout) == (0, "[]\n")
    assert not (tmp_path / ".threadloom").exists()
    made = _cli("migrate", cwd=tmp_path, fast=False)  # an empty database, where ls looks
    assert made.returncode == 0, made.stderr
    for fast in (True, False):
        again = _cli("ls", cwd=tmp_path, fast=fast, trace=trace)
        assert (again.returncode, again.stderr) == (0, f"no threads in {where}\n")
        assert _trace_lines(trace)[-1]["taken"] is fast


def test_a_database_behind_the_newest_schema_is_left_to_the_full_path(
    db: Db, tmp_path: Path
) -> None:
    from store import rawread
    from store.rawread import Unsupported

    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    conn.execute("INSERT INTO alembic_version VALUES ('0001')")
    conn.commit()
    conn.close()
    with pytest.raises(Unsupported, match="is not at"):
        rawread.open_at_head(old)
    rawread.open_at_head(db.path).close()


# ----------------------------------------------------------------- one reader


def test_the_fast_path_reads_the_stores_own_models(db: Db) -> None:
    """No second copy of the models: ``rawread`` returns what the store itself builds."""
    import store
    from store import rawread

    conn = rawread.open_at_head(db.path)
    try:
        info, _, _ = rawread.resolve(conn, db.ref("worker"))
        msgs = rawread.messages(conn, info.id)
        hits = rawread.search(conn, "zebrafish")
        sums = rawread.usage_totals(conn, thread_id=info.id)
    finally:
        conn.close()
    assert type(info) is store.ThreadInfo
    assert info.result is None or type(info.result) is store.Result
    assert msgs and {type(m) for m in msgs} == {store.Message}
    blocks = {type(b) for m in msgs for b in m.content}
    assert blocks <= {
        store.TextBlock,
        store.ThinkingBlock,
        store.ToolUseBlock,
        store.ToolResultBlock,
    }
    assert hits and all(type(h) is store.SearchHit for h in hits)
    assert all(type(t.usage) is store.Usage for t in sums)


@pytest.mark.parametrize(
    ("block", "read"),
    [
        # another writer's key order: validated, and read as the store's own
        ({"text": "keys in another order", "type": "text"}, True),
        # a key no model has: refused, by the one validation both paths run
        ({"type": "text", "text": "x", "citations": []}, False),
        ({"type": "image", "source": {}}, False),
    ],
)
def test_a_stored_block_the_store_does_not_write_reads_the_same_on_both_paths(
    db: Db, tmp_path: Path, block: dict[str, Any], read: bool
) -> None:
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.path.read_bytes())
    for suffix in ("-wal", "-shm"):
        side = db.path.with_name(db.path.name + suffix)
        if side.exists():
            copy.with_name(copy.name + suffix).write_bytes(side.read_bytes())
    conn = sqlite3.connect(copy)
    triggers = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    for (name,) in conn.execute(triggers).fetchall():  # a writer that is not the store
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.execute(
        "UPDATE messages SET content = ? WHERE thread_id = ? AND seq = 1",
        (json.dumps([block]), db.lead),
    )
    conn.commit()
    conn.close()
    trace = tmp_path / "trace.jsonl"
    args = ("--db", str(copy), "--json", "show", f"T-{db.lead}#1")
    slow = _cli(*args, cwd=tmp_path, fast=False)
    fast = _cli(*args, cwd=tmp_path, fast=True, trace=trace)
    # a row that does not validate is left to the full path, which reports it as it reports any
    # store error
    taken = _trace_lines(trace)[-1]
    assert taken["taken"] is read, taken
    assert read or taken["reason"].startswith("ValidationError")
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    if read:
        assert slow.returncode == 0 and "keys in another order" in slow.stdout
    else:
        assert slow.returncode != 0 and len(slow.stderr.strip().splitlines()) == 1


def test_the_fast_reader_shares_the_stores_rules_rather_than_copying_them() -> None:
    from store import _engine, _history, _schema, _search, rawread

    assert _engine.SCHEMA_HEAD is _schema.SCHEMA_HEAD
    assert rawread.BUSY_TIMEOUT_MS == _engine.BUSY_TIMEOUT_MS
    # one definition each, run by both paths: a copy would drift
    assert rawread._search is _search and rawread.History is _history.History
    assert rawread.History is _history.History
    assert _search.fts5_query('foo.py:12 "a phrase" x"y') == '"foo.py:12" "a phrase" "xy"'
    assert _search.fts5_query("  ") == ""
    # a fork of b at 3, b a fork of a at 5: #2-7 of the fork is a#2-3, then c#4-7
    chain = [("c", 3), ("b", 5), ("a", 0)]
    assert _history.segments(9, chain, 2, 7) == [("a", 2, 3), ("c", 4, 7)]
    assert _history.segments(9, chain, 1, None) == [("a", 1, 3), ("c", 4, 9)]


def test_the_fast_parser_declines_what_it_does_not_know() -> None:
    from orchestrator.cli._fast import parse

    assert parse(["ls"]) is not None
    assert parse(["--db", "x.db", "--json", "show", "T-abcd", "--tools"]) is not None
    for argv in (
        [],
        ["stats"],
        ["-v", "ls"],
        ["--log-json", "ls"],
        ["ls", "extra"],
        ["show"],
        ["show", "T-abcd", "--raw"],
        ["show", "T-abcd", "--", "x"],
        ["ls", "--limit", "+5"],
        ["ls", "--limit", "٣"],
        ["ls", "--kind", "boss"],
        ["search", ""],
        ["search", "x", "--limit", "0"],
        ["--db", "--json", "ls"],
        ["ls", "--job"],
        ["tree", "-"],
    ):
        assert parse(argv) is None, argv
