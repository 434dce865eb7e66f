"""A resume or a fork that would be refused is refused before anything is stored: an empty
message, a ref to a message given to ``resume``, a model that cannot be built (a scripted file
that cannot be read, a provider whose key is missing). Through the real command line (exit 2,
one line) and through the background runner the MCP server uses (an error at once, no thread
left behind, no reader left queued)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator, parse_job
from orchestrator.errors import UsageError
from orchestrator.session import JobSession as Background
from store import Kind
from tests.orchestrator.test_cli_helpers import (
    Sample,
    assert_one_error_line,
    clean_env,
    run_cli,
    sample_copy,
)
from workers import ModelSpecError


def snapshot(db: Path) -> Any:
    """Every thread row, whole, and how many messages are stored."""
    conn = sqlite3.connect(db)
    try:
        threads = conn.execute("SELECT * FROM threads ORDER BY id").fetchall()
        [(messages,)] = conn.execute("SELECT count(*) FROM messages").fetchall()
        return threads, messages
    finally:
        conn.close()


NO_KEY = {k: v for k, v in clean_env().items() if "ANTHROPIC" not in k and "OPENAI" not in k}

REFUSED = [
    (("resume", "{worker}", ""), "the message is empty"),
    (("resume", "{worker}", "  \n "), "the message is empty"),
    (("resume", "{worker}#3", "go on"), "resume takes a thread, not a message or a range"),
    (("resume", "{worker}#3-5", "go on"), "fork {worker}#3-5 branches off at that message"),
    (
        ("resume", "{worker}", "go on", "--model", "scripted:/nonexistent/script.json"),
        "/nonexistent/script.json",
    ),
    (("resume", "{other}", "go on"), "ANTHROPIC_API_KEY"),  # its model: the default, keyless
    (("fork", "{worker}#3", "try", "--model", "anthropic:claude-haiku-4-5"), "ANTHROPIC_API_KEY"),
    (("fork", "{worker}#3", " "), "the message is empty"),
    (("fork", "{worker}#3", "", "--no-run"), "the message is empty"),
]


@pytest.mark.parametrize(("args", "says"), REFUSED)
def test_a_refused_resume_or_fork_is_one_line_exit_2_and_stores_nothing(
    sample: Sample, args: tuple[str, ...], says: str
) -> None:
    refs = {name: sample.ref(name) for name in ("worker", "other", "lead")}
    argv = [a.format(**refs) for a in args]
    before = snapshot(sample.path)
    proc = run_cli("--json", *argv, db=sample.path, env=NO_KEY)
    assert proc.returncode == 2, proc.stderr
    assert_one_error_line(proc.stderr, says.format(**refs))
    assert snapshot(sample.path) == before


async def test_the_background_runner_refuses_at_once_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the MCP tools call: a resume or fork whose model cannot be built, or a question
    whose reader cannot run, is an error when asked — not a success whose run fails later
    (leaving a fork stored, a thread's model rewritten, or a reader queued for good)."""
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    sample = sample_copy(tmp_path)
    job = parse_job(
        '[job]\nname = "mcp: test"\ngoal = "g"\nmodel = "anthropic:claude-haiku-4-5"\n',
        name="job.toml",
        base_dir=tmp_path,
    )
    before = snapshot(sample.path)
    async with await Orchestrator.open(str(sample.path)) as orch:
        bg = Background(orch)
        with pytest.raises(ModelSpecError, match="ANTHROPIC_API_KEY"):
            await bg.resume(sample.ref("other"), "go on", model=None)
        with pytest.raises(ModelSpecError):
            await bg.resume(sample.ref("worker"), "go on", model="bogus")
        with pytest.raises(UsageError, match="the message is empty"):
            await bg.resume(sample.ref("worker"), " ", model=None)
        with pytest.raises(ModelSpecError, match="ANTHROPIC_API_KEY"):
            await bg.fork(sample.ref("worker"), "try", at=3, model="anthropic:claude-haiku-4-5")
        assert snapshot(sample.path) == before
        lead = await bg.lead(job)
        with pytest.raises(ModelSpecError, match="ANTHROPIC_API_KEY"):
            await bg.ask(lead, sample.ref("worker"), "what failed?")
        readers = await orch.store.list_threads(kind=Kind.READER, limit=10)
        assert readers == []
