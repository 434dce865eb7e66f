"""``threadloom demo`` after a plain ``pip install threadloom``: nothing it runs needs pytest.

The demo runs in a real subprocess with a ``sitecustomize`` on ``PYTHONPATH`` that makes any
import of pytest fail and logs the attempt. The variable reaches every Python the demo starts
(the workers' ``bash`` runs ``python -m unittest`` and ``python -m calc``, the demo's closing
check runs the whole suite), so one run proves the sample tests itself with the standard
library. The scripted model never reacts to what a tool printed, so the workers end ``done``
whatever their test runs said: the second test therefore reads the stored tool outputs and
checks every figure and test name the script quotes against what ``unittest`` really printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BLOCKER = '''\
"""Test harness: pytest must not be needed. Any import of it fails and is logged; every Python
that starts logs its command line, so the test sees which processes this reached."""
import os
import sys


def _log(line):
    with open(os.environ["NO_PYTEST_LOG"], "a") as log:
        log.write(line + "\\n")


with open("/proc/self/cmdline", "rb") as cmdline:
    _log("start " + cmdline.read().replace(b"\\0", b" ").decode(errors="replace").strip())


class _NoPytest:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pytest", "_pytest"):
            _log(f"import {name} in {os.getpid()}")
            raise ImportError(f"pytest is blocked in this test: import {name}")
        return None


sys.meta_path.insert(0, _NoPytest())
'''

TASKS = ("tokenizer", "parser", "evaluator")


@dataclass
class DemoRun:
    root: Path
    db: Path
    keep: Path
    log: Path
    env: dict[str, str]
    proc: subprocess.CompletedProcess[str]

    def cli(self, *args: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "--db", str(self.db), "--json", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One ``threadloom --json demo`` with pytest unimportable in every Python it starts."""
    root = tmp_path_factory.mktemp("demo-stdlib")
    blocker = root / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    log = root / "pytest-imports.log"
    log.touch()
    # the repository stays importable however threadloom is installed here (editable or not)
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(blocker), str(repo), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": path.rstrip(os.pathsep),
        "NO_PYTEST_LOG": str(log),
        # the workers' bash on the plain runner, which passes this environment on whole: under
        # bubblewrap /tmp is private, so the blocker (and its log) would not reach their Pythons
        "THREADLOOM_BWRAP": str(root / "no-bwrap"),
    }
    db, keep = root / "threads.db", root / "calc"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "--db",
            str(db),
            "--json",
            "demo",
            "--keep",
            str(keep),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return DemoRun(root, db, keep, log, env, proc)


def test_the_blocker_really_blocks_pytest(demo: DemoRun, tmp_path: Path) -> None:
    probe_log = tmp_path / "probe.log"  # the probe's attempt is not the demo's: its own log
    probe = subprocess.run(
        [sys.executable, "-c", "import orchestrator, pytest"],
        env={**demo.env, "NO_PYTEST_LOG": str(probe_log)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode != 0 and "pytest is blocked in this test" in probe.stderr
    assert "import pytest in " in probe_log.read_text()


def test_the_demo_runs_and_its_sample_passes_without_pytest(demo: DemoRun) -> None:
    assert demo.proc.returncode == 0, demo.proc.stderr[-3000:]
    doc = json.loads(demo.proc.stdout)
    assert doc["status"] == "done"
    assert [(w["task"], w["status"]) for w in doc["workers"]] == [(t, "done") for t in TASKS]
    check = subprocess.run(
        [sys.executable, "-m", "unittest"],
        cwd=demo.keep,
        env=demo.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert re.search(r"^Ran 39 tests in ", check.stderr, re.M), check.stderr
    assert check.stderr.rstrip().endswith("\nOK"), check.stderr
    log = demo.log.read_text()
    imports = [line for line in log.splitlines() if line.startswith("import ")]
    assert imports == [], f"something the demo ran imported pytest:\n{log}"
    # the blocker reached every Python the demo started, the workers' test runs included
    for task in TASKS:
        assert f"-m unittest -v tests.test_{task}\n" in log
        assert f"-m unittest tests.test_{task}\n" in log


def tool_output(message: dict[str, Any], index: int = 0) -> str:
    results = [b for b in message["content"] if b["type"] == "tool_result"]
    content = results[index]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


@dataclass
class UnittestRun:
    ran: int
    status: str  # the last line: OK or FAILED (...)
    listing: dict[str, str]  # "Class.test_name" -> ok | FAIL | ERROR, from -v output
    broken: list[str]  # "Class.test_name" of every FAIL:/ERROR: section


def parse_unittest(text: str) -> UnittestRun:
    ran = re.search(r"^Ran (\d+) tests? in ", text, re.M)
    assert ran, text
    status = [ln for ln in text.splitlines() if ln.startswith(("OK", "FAILED ("))]
    listing = {
        f"{m[2]}.{m[1]}": m[3]
        for m in re.finditer(
            r"^(test\w+) \(tests\.\w+\.(\w+)\.\1\) \.\.\. (ok|FAIL|ERROR)$", text, re.M
        )
    }
    broken = [
        f"{m[2]}.{m[1]}"
        for m in re.finditer(r"^(?:FAIL|ERROR): (test\w+) \(tests\.\w+\.(\w+)\.\1\)", text, re.M)
    ]
    return UnittestRun(int(ran[1]), status[-1], listing, broken)


def test_every_figure_the_demo_quotes_is_what_unittest_printed(demo: DemoRun) -> None:
    assert demo.proc.returncode == 0, demo.proc.stderr[-3000:]
    doc = json.loads(demo.proc.stdout)
    report = doc["report"]
    total = 0
    befores = []
    for worker in doc["workers"]:
        task, ref = worker["task"], worker["ref"]
        shown = demo.cli("show", ref)
        messages = {m["seq"]: m for m in shown["messages"]}
        before = parse_unittest(tool_output(messages[3]))
        after = parse_unittest(tool_output(messages[9]))
        # the shipped bug breaks exactly one test of the module; the fix makes all of it pass
        assert before.ran == after.ran == len(before.listing), task
        assert len(before.broken) == 1 and before.status.startswith("FAILED ("), task
        assert after.status == "OK" and after.broken == [], task
        broken = before.broken[0]
        assert before.listing[broken] in ("FAIL", "ERROR")
        total += after.ran
        befores.append(before.status)

        # the worker's own texts: every test it names is one unittest listed, the broken one
        # is named, and its counts are the real ones
        texts = "\n".join(
            block["text"]
            for m in shown["messages"]
            if m["role"] == "assistant"
            for block in m["content"]
            if block["type"] == "text"
        )
        named = set(re.findall(r"\b(test_\w+)", texts)) - {f"test_{task}"}
        methods = {name.split(".")[1] for name in before.listing}
        assert named <= methods, (task, named - methods)
        assert broken.split(".")[1] in texts
        assert f"Ran {after.ran} tests, OK" in texts
        result = shown["result"]
        assert result["verification"][0] == {
            "command": f"python -m unittest tests.test_{task}",
            "outcome": f"Ran {after.ran} tests: OK (before the fix: {before.status})",
        }
        kind = "failure" if "failures=1" in before.status else "error"
        assert f"{after.ran} tests with 1 {kind} ({broken})" in result["summary"]
        assert f"all {after.ran} OK" in result["summary"]

        # the lead's report
        assert f"failing run {ref}#3 (`{broken}`" in report, task
        assert f"`tests.test_{task}` ran {after.ran} tests, OK ({ref}#9)" in report, task
    assert f"they ended `{befores[0]}`, `{befores[1]}` and `{befores[2]}`" in report
    assert f"the whole suite ({total} tests)" in report
    assert "pytest" not in report
