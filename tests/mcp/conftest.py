"""MCP server helpers: a real store in tmp_path, the scripted model, and the SDK's own client
connected to the server object in-process (or to the real ``threadloom mcp`` command)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, Implementation, TextContent

from orchestrator import Orchestrator
from orchestrator.mcp import Settings, Threadloom

ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = ROOT / ".ci" / "node" / "node_modules" / ".bin"

SUBMIT = {"tool_calls": [{"name": "submit_result", "input": {"status": "done", "summary": "ok"}}]}


def sleeper(seconds: float, summary: str = "slept") -> list[dict[str, Any]]:
    """A worker's turns: bash ``sleep``, then a result."""
    done = {"status": "done", "summary": summary}
    return [
        {"tool_calls": [{"name": "bash", "input": {"command": f"sleep {seconds}"}}]},
        {"tool_calls": [{"name": "submit_result", "input": done}]},
    ]


LONG_S = 6  # "Task long": longer than the few seconds its test lets each wait call run

RULES: list[dict[str, Any]] = [
    {"match": "(?m)^Task slow", "turns": sleeper(3)},
    {"match": "(?m)^Task long", "turns": sleeper(LONG_S, "ran long")},
    {
        "match": "(?m)^Task echo",
        "turns": [
            {"tool_calls": [{"name": "bash", "input": {"command": "echo needle-in-output"}}]},
            SUBMIT,
        ],
    },
    {"match": "again", "turns": [{"text": "did it again"}]},
    {"match": "Thread to read", "turns": [{"text": "It echoed; see {{thread}}#1 and T-zzzz#9."}]},
    {"match": "Job: scripted-job", "turns": [{"text": "the job's report"}]},
    {"match": "(?m)^Task ", "turns": [SUBMIT]},
]


@dataclass
class Setup:
    root: Path
    ws: Path
    db: Path
    script: Path

    @property
    def model(self) -> str:
        return f"scripted:{self.script}"


def make_setup(root: Path, rules: Sequence[dict[str, Any]] = RULES) -> Setup:
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    script = root / "script.json"
    script.write_text(json.dumps({"rules": list(rules)}))
    return Setup(root=root, ws=ws, db=root / "t.db", script=script)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return make_setup(tmp_path)


Serve = Callable[..., AbstractAsyncContextManager[Threadloom]]


@pytest.fixture
def serve(setup: Setup) -> Serve:
    """``async with serve(**settings) as app``: a server object over the setup's database."""

    @asynccontextmanager
    async def run(**kw: Any) -> AsyncIterator[Threadloom]:
        options: dict[str, Any] = {"model": setup.model, "cwd": setup.ws, "progress_every_s": 0.2}
        options.update(kw)
        async with await Orchestrator.open(str(setup.db)) as orch:
            app = Threadloom(orch, Settings(**options))
            try:
                yield app
            finally:
                await app.aclose()

    return run


def client(app: Threadloom, *, name: str = "pytest", **kw: Any) -> Client:
    """The SDK's client on the server object, in-process. ``mode="legacy"`` runs the initialize
    handshake (and with it roots); the default is the SDK's own choice."""
    info = Implementation(name=name, version="1")
    return Client(app.server, client_info=info, **kw)


def data(result: CallToolResult) -> Any:
    """A successful call's structured content (the list itself for SPEC list shapes)."""
    assert not result.is_error, text(result)
    content = result.structured_content
    assert isinstance(content, dict)
    return content["result"] if set(content) == {"result"} else content


def text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def node_tool(name: str) -> Path | None:
    """An npm tool installed by .ci/run (``.ci/node``). Missing: a skip on a developer's
    machine, a failure under CI (where .ci/run installs it)."""
    path = NODE_BIN / name
    if path.exists() and shutil.which("node"):
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{path} is missing: .ci/run installs it (npm install --prefix .ci/node …)")
    pytest.skip(f"{name} is not installed (npm install --prefix .ci/node, see .ci/run)")
