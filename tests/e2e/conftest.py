"""End-to-end helpers: the real ``threadloom`` command in subprocesses, on the scripted model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from store import Message, Store, ToolResultBlock, ToolUseBlock


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class Env:
    root: Path
    db: Path
    ws: Path

    def run(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "--db", str(self.db), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def job(
        self,
        name: str,
        rules: Sequence[dict[str, Any]],
        tasks: Sequence[dict[str, str]] = (),
        *,
        extra: str = "",
        worker: str = "",
        model: str | None = None,
    ) -> Path:
        script = self.root / f"{name}.json"
        script.write_text(json.dumps({"rules": list(rules)}))
        lines = [
            "[job]",
            f'name = "{name}"',
            'goal = "the goal"',
            'workspace = "ws"',
            f'model = "{model or f"scripted:{name}.json"}"',
            extra,
        ]
        if worker:
            lines += ["", "[job.worker]", worker]
        for t in tasks:
            lines += ["", "[[task]]"] + [f"{k} = {json.dumps(v)}" for k, v in t.items()]
        path = self.root / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path


def db_read(env: Env, fn: Any) -> Any:
    """``await fn(store)`` on the job's database, from a test that is not async."""

    async def go() -> Any:
        store = await Store.open(str(env.db))
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.fixture
def env(tmp_path: Path) -> Env:
    ws = tmp_path / "ws"
    ws.mkdir()
    return Env(tmp_path, tmp_path / "threads.db", ws)


def submit(summary: str, **extra: Any) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"name": "submit_result", "input": {"status": "done", "summary": summary, **extra}}
        ]
    }


def bash(command: str, text: str = "") -> dict[str, Any]:
    turn: dict[str, Any] = {"tool_calls": [{"name": "bash", "input": {"command": command}}]}
    if text:
        turn["text"] = text
    return turn


def answered_turns(
    msgs: Sequence[Message], *, but_dispatch: bool = False, where: str = ""
) -> list[list[ToolResultBlock]]:
    """Asserts that each turn's tool calls are answered by the next message, one result per
    call; returns each answered turn's results. ``but_dispatch``: a last turn of ``dispatch``
    alone may be left open (a stop leaves a turn of calls safe to replay for the resume to run
    again)."""
    out = []
    for i, m in enumerate(msgs):
        uses = [b for b in m.content if isinstance(b, ToolUseBlock)]
        if not uses:
            continue
        if but_dispatch and i + 1 == len(msgs) and {u.name for u in uses} == {"dispatch"}:
            continue
        assert i + 1 < len(msgs), f"{where}#{m.seq} unanswered"
        got = [b for b in msgs[i + 1].content if isinstance(b, ToolResultBlock)]
        assert {b.tool_use_id for b in got} == {u.id for u in uses}, f"{where}#{m.seq}"
        out.append(got)
    return out
