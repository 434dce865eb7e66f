"""Shared builders for the CLI tests: a populated database and two ways to run ``threadloom``.

``run_cli`` runs the real command in a subprocess (``python -m orchestrator``); ``invoke`` runs
it in-process through click's ``CliRunner`` (same code path from ``ThreadloomGroup.main`` down,
without the ~0.5 s interpreter start).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from orchestrator.cli import main
from store import (
    Change,
    Finding,
    NewMessage,
    NewWorker,
    Result as WorkerResult,
    SpawnRequest,
    Status,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
    Verification,
)

BIG_OUTPUT = "\n".join(f"output line {i:03d}" for i in range(200))
WRITE_CONTENT = "def parse(text):\n    return text.split()\n" * 3


@dataclass(frozen=True)
class Sample:
    """A job: a lead that dispatched one worker; the worker's thread has thinking, two tool
    calls (one answered with 200 lines, one with an error), a final text and a result; a fork of
    the worker at #3 with one message of its own; and an unrelated imported-style thread."""

    path: Path
    lead: str
    worker: str
    fork: str
    other: str

    def ref(self, name: str) -> str:
        return f"T-{getattr(self, name)}"

    def prefix(self, name: str) -> str:
        """The shortest ref prefix (4+ characters) naming only thread ``name``. Ids made in
        the same millisecond share up to 25 characters, so this may be most of the id."""
        ids = [self.lead, self.worker, self.fork, self.other]
        mine = getattr(self, name)
        for n in range(4, len(mine) + 1):
            if sum(i.startswith(mine[:n]) for i in ids) == 1:
                return f"T-{mine[:n]}"
        raise AssertionError("ids are unique")


async def build_sample(path: Path) -> Sample:
    store = await Store.open(str(path))
    try:
        other = await store.create_thread(
            kind="worker", title="unrelated notes", messages=[NewMessage.user("zebra notes")]
        )
        lead = await store.create_thread(
            kind="lead",
            title="fix-parser",
            model="anthropic:claude-sonnet-4-5",
            messages=[NewMessage.user("Fix the parser, please")],
        )
        await store.append(
            lead.id,
            NewMessage(
                role="assistant",
                content=[
                    TextBlock(text="Dispatching one task."),
                    ToolUseBlock(id="d1", name="dispatch", input={"tasks": [{"title": "tok"}]}),
                ],
            ),
            usage=UsageRecord(
                model="claude-sonnet-4-5",
                usage=Usage(
                    input_tokens=1000,
                    output_tokens=200,
                    cache_read_input_tokens=3000,
                    cache_creation_input_tokens=1000,
                ),
                cost_usd=0.02,
            ),
        )
        first = NewMessage.user("tests/test_tokenizer.py fails")
        work = NewWorker(0, "tok", title="Fix the tokenizer", messages=(first,))
        [(worker, _)] = await store.dispatches.spawn(SpawnRequest(lead.id, "d1", (work,)))
        await store.append(
            worker.id,
            [
                NewMessage(
                    role="assistant",
                    content=[
                        ThinkingBlock(thinking="Let me run the tests first.", signature="sig"),
                        ToolUseBlock(id="t1", name="bash", input={"command": "pytest -q"}),
                    ],
                ),
                NewMessage(
                    role="user", content=[ToolResultBlock(tool_use_id="t1", content=BIG_OUTPUT)]
                ),
                NewMessage(
                    role="assistant",
                    content=[
                        ToolUseBlock(
                            id="t2",
                            name="write_file",
                            input={"path": "src/tok.py", "content": WRITE_CONTENT},
                        )
                    ],
                ),
                NewMessage(
                    role="user",
                    content=[
                        ToolResultBlock(
                            tool_use_id="t2", content="permission denied", is_error=True
                        )
                    ],
                ),
                NewMessage.assistant("The tokenizer splits on whitespace only."),
            ],
            usage=UsageRecord(
                model="claude-haiku-4-5",
                usage=Usage(input_tokens=500, output_tokens=100),
                cost_usd=0.001,
            ),
        )
        await store.set_status(worker.id, Status.RUNNING)
        await store.set_status(
            worker.id,
            Status.DONE,
            result=WorkerResult(
                status="done",
                summary="Fixed the tokenizer's split.",
                findings=[Finding(claim="split ignores tabs", evidence=[f"T-{worker.id}#3"])],
                changes=[Change(path="src/tok.py", action="modified")],
                verification=[Verification(command="pytest -q", outcome="12 passed")],
                negative_results=["a regex split was slower"],
                open_questions=["should tabs count as words?"],
            ),
        )
        await store.append(
            lead.id,
            [
                NewMessage(
                    role="user", content=[ToolResultBlock(tool_use_id="d1", content="done: T-x")]
                ),
                NewMessage.assistant("Report: the parser is fixed."),
            ],
        )
        fork = await store.fork(worker.id, at=3, messages=[NewMessage.user("Try a different fix")])
        return Sample(path, lead.id, worker.id, fork.id, other.id)
    finally:
        await store.close()


_TEMPLATE: Sample | None = None


def sample_copy(directory: Path) -> Sample:
    """A private copy of the sample database in ``directory``: built once per test process,
    then copied (a file copy costs far less than the dozen commits that build it)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        where = Path(tempfile.mkdtemp(prefix="threadloom-cli-sample-"))
        atexit.register(shutil.rmtree, where, ignore_errors=True)
        _TEMPLATE = asyncio.run(build_sample(where / "threads.db"))
    target = directory / "threads.db"
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{_TEMPLATE.path}{suffix}")
        if src.exists():
            shutil.copyfile(src, f"{target}{suffix}")
    return dataclasses.replace(_TEMPLATE, path=target)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "THREADLOOM_DB"}
    env.update(extra)
    return env


def run_cli(
    *args: str,
    db: Path | str | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The real ``threadloom`` in a subprocess."""
    cmd = [sys.executable, "-m", "orchestrator"]
    if db is not None:
        cmd += ["--db", str(db)]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        input=stdin,
        env=env if env is not None else clean_env(),
        timeout=60,
        check=False,
    )


def invoke(
    *args: str, db: Path | str | None = None, stdin: str | None = None, **env: str
) -> Result:
    """``threadloom`` in-process (click's CliRunner)."""
    argv = ["--db", str(db), *args] if db is not None else list(args)
    return CliRunner().invoke(
        main, argv, input=stdin, env={"THREADLOOM_DB": None, **env}, catch_exceptions=False
    )


def json_out(result: Result | subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


def assert_one_error_line(stderr: str, *needles: str) -> str:
    """stderr is exactly one ``threadloom: error: …`` line, without a traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("threadloom: error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
