"""A real Claude Code session and a real Codex rollout (``../shared/realsessions``), imported and
resumed on a real model through the command line (never in CI: see ``conftest``)::

    THREADLOOM_LIVE_MODEL=openai:qwen@http://127.0.0.1:8081/v1 \\
        .venv/bin/python -m pytest -ra -s tests/live/test_live_resume_imported.py

Only what a real model can be held to is asserted: the resume is accepted by the server (no
provider error), ends in a terminal status, keeps its ref, appends only, and the thread was run
as a worker of the directory it was resumed in. Whether the model called ``bash`` (and what it
said) is printed, never asserted: small local models often answer from memory instead of calling
a tool. ``THREADLOOM_LIVE_REQUEST_TIMEOUT_S`` and ``THREADLOOM_LIVE_MAX_OUTPUT_TOKENS`` reach the
resume as its ``--request-timeout`` and ``--max-output-tokens`` (an imported thread has no job
file to say them in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_resume_imported import REAL
from tests.live.conftest import live_spec

SESSIONS = [
    "claude/projects/-tmp-private/4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
    "codex/sessions/2026/01/02/rollout-2026-01-02T18-39-45-019b7f94-51b4-7593-922e-ba12b5b73b52.jsonl",
]
MESSAGE = "Now use the bash tool to run ls -la in the workspace and tell me which files are there."
TIMEOUT_S = float(os.environ.get("THREADLOOM_LIVE_TIMEOUT_S") or 1800)


def cli(root: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--db", str(root / "t.db"), "--json", *args],
        cwd=root / "ws",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode in (0, 1), (args[0], done.returncode, done.stderr[-2000:])
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", SESSIONS)
def test_a_real_imported_session_resumes_on_the_live_model(name: str, tmp_path: Path) -> None:
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    spec = live_spec()
    assert spec is not None
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "hello.py").write_text('print("hello")\n')
    ref = cli(tmp_path, "import", str(path))["ref"]
    shown = cli(tmp_path, "show", ref)
    knobs = []
    if timeout := os.environ.get("THREADLOOM_LIVE_REQUEST_TIMEOUT_S"):
        knobs += ["--request-timeout", timeout]
    if tokens := os.environ.get("THREADLOOM_LIVE_MAX_OUTPUT_TOKENS"):
        knobs += ["--max-output-tokens", tokens]
    out = cli(tmp_path, "resume", ref, MESSAGE, "--model", spec, *knobs)
    after = cli(tmp_path, "show", ref)
    assert out["ref"] == ref and out["status"] in {"done", "failed", "interrupted"}
    assert "model provider failed" not in (out.get("error") or ""), out["error"]
    assert after["messages"][: len(shown["messages"])] == shown["messages"]  # appended only
    assert after["task"]["workspace"] == str(tmp_path / "ws")  # run as a worker, stored there
    new = after["messages"][len(shown["messages"]) :]
    calls = [b for m in new for b in m["content"] if b.get("type") == "tool_use"]
    print(f"\n{name}: {out['status']} {out.get('error') or ''}")
    for b in calls:
        print(f"  called {b['name']} {json.dumps(b['input'])[:200]}")
    print(f"  said: {(out.get('report') or '')[:500]!r}")
