"""What no file tool may touch: threadloom's own record, and git's configuration.

README's layout puts the database inside the workspace (``workspace = "."``, the default
``--db .threadloom/threads.db``). Every file tool must refuse the database, its ``-wal``/``-shm``/
``-journal``, the job logs and anything under the workspace's ``.threadloom/`` however the path
is spelled (symlink, ``..``, absolute, a hard link), and ``list_files``/``grep`` never show them.
``.git`` directories and ``.git`` files anywhere in the workspace are read-only to the tools.

The last test races a real thread flipping a directory and a symlink to outside the workspace
against the tools, and checks that nothing outside is ever read or written.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import parse_job
from orchestrator.runtime.job import JobRuntime
from store import Kind, NewMessage, Store
from workers.tools import (
    EditFileTool,
    GrepTool,
    ListFilesTool,
    ReadFileTool,
    ToolContext,
    WriteFileTool,
)

JOB = """
[job]
name = "layout"
goal = "README's layout"
workspace = "."
model = "anthropic:claude-sonnet-4-5"
sandbox = "none"
"""

SECRET = "transcript-marker-7f3a"


async def _job_layout(tmp_path: Path) -> tuple[Path, Path, ToolContext, Store, str]:
    """README's layout: the workspace is the job's directory, the database (a real Store) in
    its ``.threadloom/``, a job log beside it; the context is the one the runtime builds."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "src.py").write_text(f"print('{SECRET} is not here')\n")
    db = ws / ".threadloom" / "threads.db"
    store = await Store.open(str(db), create_dirs=True)
    info = await store.create_thread(
        kind=Kind.LEAD,
        title="t",
        messages=[NewMessage.user(f"first {SECRET}"), NewMessage.assistant(f"ok {SECRET}")],
    )
    logs = ws / ".threadloom" / "logs"
    logs.mkdir()
    (logs / "job.log").write_text(f"log line {SECRET}\n")
    spec = parse_job(JOB, name="layout.toml", base_dir=ws)
    runtime = JobRuntime(store=store, job=spec, lead_id=info.id)
    settings = runtime.sandbox()
    assert settings.mode == "none"
    ctx = ToolContext(workspace=ws.resolve(), sandbox=settings.mode, hidden=settings.hidden)
    return ws, db, ctx, store, info.id


def _assert_db_intact(db: Path) -> None:
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()


async def _invoke(tool: Any, ctx: ToolContext, **args: Any) -> Any:
    return await tool.invoke(args, ctx)


def test_the_runtime_hides_the_record_even_without_a_sandbox(tmp_path: Path) -> None:
    """``sandbox = "none"`` still hands the hidden paths down, and the workspace's
    ``.threadloom`` is among them wherever the database is."""
    import asyncio

    async def go() -> None:
        ws = tmp_path / "ws"
        ws.mkdir()
        elsewhere = tmp_path / "elsewhere" / "threads.db"
        store = await Store.open(str(elsewhere), create_dirs=True)
        try:
            spec = parse_job(JOB, name="layout.toml", base_dir=ws)
            runtime = JobRuntime(store=store, job=spec, lead_id="x")
            hidden = set(runtime.sandbox().hidden)
            assert ws.resolve() / ".threadloom" in hidden
            assert elsewhere.parent.resolve() in hidden
        finally:
            await store.close()

    asyncio.run(go())


SPELLINGS = [
    ".threadloom/threads.db",
    "./.threadloom/../.threadloom/threads.db",
    ".threadloom/threads.db-wal",
    ".threadloom/threads.db-shm",
    ".threadloom/threads.db-journal",
    ".threadloom/logs/job.log",
    ".threadloom/new-file",
    "db_link",
    "dir_link/threads.db",
    "{ws}/.threadloom/threads.db",
    "hard.db",
]


def _plant(ws: Path, db: Path) -> None:
    (ws / "db_link").symlink_to(".threadloom/threads.db")
    (ws / "dir_link").symlink_to(".threadloom")
    os.link(db, ws / "hard.db")


@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_no_file_tool_reaches_the_database(tmp_path: Path, spelling: str) -> None:
    ws, db, ctx, store, lead = await _job_layout(tmp_path)
    try:
        _plant(ws, db)
        before = db.read_bytes()
        path = spelling.format(ws=ws.resolve())
        outs = [
            await _invoke(ReadFileTool(), ctx, path=path),
            await _invoke(WriteFileTool(), ctx, path=path, content="x"),
            await _invoke(EditFileTool(), ctx, path=path, old="SQLite", new="XXXXXX"),
        ]
        for out in outs:
            assert out.is_error, out.text
            assert "refused" in out.text, out.text
            assert SECRET not in out.text
        assert db.read_bytes() == before
        assert not (ws / ".threadloom" / "new-file").exists()
        for engine in ("ripgrep", "python"):
            found = await _invoke(GrepTool(engine=engine), ctx, pattern=SECRET)
            assert ".threadloom" not in found.text and "hard.db" not in found.text, found.text
            assert "log line" not in found.text
        listed = await _invoke(ListFilesTool(), ctx)
        assert ".threadloom" not in listed.text and "hard.db" not in listed.text, listed.text
        assert "db_link" not in listed.text and "dir_link" not in listed.text, listed.text
        for where in (".threadloom", "dir_link", ".threadloom/logs"):
            out = await _invoke(ListFilesTool(), ctx, path=where)
            assert out.is_error and "refused" in out.text, out.text
            out = await _invoke(GrepTool(), ctx, pattern=SECRET, path=where)
            assert out.is_error and "refused" in out.text, out.text
        messages = await store.messages(lead)
        assert [m.text for m in messages] == [f"first {SECRET}", f"ok {SECRET}"]
    finally:
        await store.close()
    _assert_db_intact(db)


async def test_the_database_elsewhere_is_hidden_by_inode(tmp_path: Path) -> None:
    """A database outside the workspace, hard-linked into it: refused by (device, inode)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "state" / "threads.db"
    store = await Store.open(str(db), create_dirs=True)
    try:
        spec = parse_job(JOB, name="layout.toml", base_dir=ws)
        runtime = JobRuntime(store=store, job=spec, lead_id="x")
        ctx = ToolContext(workspace=ws.resolve(), hidden=runtime.sandbox().hidden)
        os.link(db, ws / "copy.db")
        before = db.read_bytes()
        out = await _invoke(WriteFileTool(), ctx, path="copy.db", content="gone")
        assert out.is_error and "refused" in out.text, out.text
        out = await _invoke(ReadFileTool(), ctx, path="copy.db")
        assert out.is_error and "refused" in out.text, out.text
        listed = await _invoke(ListFilesTool(), ctx)
        assert "copy.db" not in listed.text
        assert db.read_bytes() == before
    finally:
        await store.close()
    _assert_db_intact(db)


# ------------------------------------------------------------------ .git is read-only


def _git_layout(ws: Path) -> dict[str, bytes]:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (ws / "sub" / ".git").mkdir(parents=True)
    (ws / "sub" / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / "wt").mkdir()
    (ws / "wt" / ".git").write_text("gitdir: /somewhere/.git/worktrees/wt\n")
    (ws / "git_link").symlink_to(".git")
    (ws / "config_link").symlink_to(".git/config")
    files = [
        ".git/config",
        ".git/hooks/pre-commit",
        "sub/.git/config",
        "wt/.git",
    ]
    return {f: (ws / f).read_bytes() for f in files}


GIT_TARGETS = [
    ".git/config",
    ".git/hooks/pre-commit",
    ".git/hooks/post-checkout",
    ".git/new/dir/file",
    "sub/.git/config",
    "wt/.git",
    "git_link/config",
    "git_link/hooks/pre-commit",
    "config_link",
    "./sub/../.git/config",
    "{ws}/.git/config",
    ".git",
    "other/.git",
    "sub/.GIT/config",
]


@pytest.mark.parametrize("target", GIT_TARGETS)
async def test_git_is_read_only_to_the_file_tools(tmp_path: Path, target: str) -> None:
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    before = _git_layout(ws)
    ctx = ToolContext(workspace=ws)
    path = target.format(ws=ws)
    wrote = await _invoke(
        WriteFileTool(), ctx, path=path, content="[core]\n\tfsmonitor = touch /tmp/pwned\n"
    )
    assert wrote.is_error and "refused" in wrote.text and ".git" in wrote.text, wrote.text
    edited = await _invoke(EditFileTool(), ctx, path=path, old="bare", new="fsmonitor")
    assert edited.is_error, edited.text
    assert {f: (ws / f).read_bytes() for f in before} == before
    assert not (ws / ".git" / "hooks" / "post-checkout").exists()
    assert not (ws / ".git" / "new").exists()
    assert not (ws / "other").exists()


async def test_git_stays_readable(tmp_path: Path) -> None:
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    _git_layout(ws)
    out = await _invoke(ReadFileTool(), ToolContext(workspace=ws), path=".git/config")
    assert not out.is_error and "bare = false" in out.text, out.text
    out = await _invoke(ReadFileTool(), ToolContext(workspace=ws), path="wt/.git")
    assert not out.is_error and "gitdir" in out.text, out.text
    # A name that merely contains ".git" is an ordinary file.
    out = await _invoke(WriteFileTool(), ToolContext(workspace=ws), path=".gitignore", content="x")
    assert not out.is_error, out.text


# ------------------------------------------------------------------ the confinement race


FLIPPER = """
import os, shutil, sys
ws, outside, stop = sys.argv[1:4]
d, kept = os.path.join(ws, "d"), os.path.join(ws, "d.dir")
print("ready", flush=True)
n = 0
while n < 2_000_000 and not os.path.exists(stop):
    os.rename(d, kept)
    try:
        os.symlink(outside, d)
        os.unlink(d)
    except FileExistsError:
        pass  # write_file made d (it was missing for a moment): replaced below
    while True:
        try:
            os.rename(kept, d)
            break
        except OSError:  # write_file made d meanwhile (and may still write in it): remove it
            shutil.rmtree(d, ignore_errors=True)
    n += 1
print(n, flush=True)
"""


def test_a_parent_swapped_for_a_symlink_never_leads_outside(tmp_path: Path) -> None:
    """Another process flips ``ws/d`` between a directory and a symlink to ``outside`` as fast
    as it can while the tools read, write and edit below ``d`` many times: nothing outside is
    ever written or read."""
    import asyncio

    ws = (tmp_path / "ws").resolve()
    outside = (tmp_path / "outside").resolve()
    ws.mkdir()
    outside.mkdir()
    (outside / "f").write_text(f"outside {SECRET}\n")
    (outside / "g").write_text(f"outside {SECRET}\n")
    (ws / "d").mkdir()
    (ws / "d" / "f").write_text("inside\n")
    stop = tmp_path / "stop"
    ctx = ToolContext(workspace=ws)

    async def hammer() -> list[str]:
        texts = []
        for i in range(400):
            for tool, args in (
                (WriteFileTool(), {"path": "d/f", "content": f"written {i} outside\n"}),
                (WriteFileTool(), {"path": f"d/new{i % 7}", "content": "new\n"}),
                (ReadFileTool(), {"path": "d/f"}),
                (ReadFileTool(), {"path": "d/g"}),
                (EditFileTool(), {"path": "d/f", "old": "outside", "new": "changed"}),
                (ListFilesTool(), {"path": "d"}),
                (GrepTool(engine="python"), {"pattern": "outside", "path": "d"}),
            ):
                out = await tool.invoke(args, ctx)
                texts.append(out.text)
        return texts

    proc = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(ws), str(outside), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        texts = asyncio.run(hammer())
    finally:
        stop.touch()
        flips = int(proc.communicate()[0] or 0)
    assert proc.returncode == 0
    assert flips > 0  # the race really ran alongside
    assert sorted(p.name for p in outside.iterdir()) == ["f", "g"]
    assert (outside / "f").read_text() == f"outside {SECRET}\n"
    assert (outside / "g").read_text() == f"outside {SECRET}\n"
    assert not any(SECRET in t for t in texts)
