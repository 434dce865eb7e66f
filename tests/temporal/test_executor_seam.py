"""The executor seam without a cluster: a local job never loads the Temporal SDK, and a
Temporal job on a host without it is one line naming the extra (exit 2)."""

from __future__ import annotations

import subprocess
import sys

SNIPPET = """
import sys
from orchestrator.jobs import JobSpec
from orchestrator.runtime.executors import LocalExecutor, executor_for
{setup}
try:
    ex = executor_for(JobSpec(name="n", goal="g", executor={executor!r}))
except Exception as exc:
    print(type(exc).__name__, getattr(exc, "exit_code", None), exc)
else:
    print(type(ex).__name__, "temporalio" in sys.modules)
"""


def _run(executor: str, setup: str = "") -> str:
    code = SNIPPET.format(executor=executor, setup=setup)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_local_executor_is_the_default_and_imports_no_temporal() -> None:
    assert _run("local") == "LocalExecutor False"


def test_temporal_without_the_sdk_names_the_extra() -> None:
    out = _run("temporal", setup="sys.modules['temporalio'] = None")
    assert out.startswith("UsageError 2 ") and "pip install 'threadloom[temporal]'" in out
