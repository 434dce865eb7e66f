"""threadloom against a real model: a job on the demo's sample, then a resume, a fork and an
``ask_thread``, through the command line (``python -m orchestrator --json``) as a user runs it.

Run it against any endpoint (never in CI; skipped, with the reason, when no model is named)::

    THREADLOOM_LIVE_MODEL=openai:qwen2.5-coder@http://127.0.0.1:8080/v1 \\
        .venv/bin/python -m pytest -ra tests/live
    THREADLOOM_LIVE_MODEL=anthropic:claude-haiku-4-5 ANTHROPIC_API_KEY=… \\
        .venv/bin/python -m pytest -ra tests/live

Knobs (environment): ``THREADLOOM_LIVE_TASKS`` — the demo tasks to run, comma-separated
(default ``tokenizer``; ``tokenizer,parser,evaluator`` for all three);
``THREADLOOM_LIVE_TIMEOUT_S`` — a worker's ``timeout_s`` and each command's limit (default
1800); ``THREADLOOM_LIVE_MAX_PARALLEL`` (default 1: one server slot);
``THREADLOOM_LIVE_MAX_OUTPUT_TOKENS``, ``THREADLOOM_LIVE_REQUEST_TIMEOUT_S`` and
``THREADLOOM_LIVE_BUDGET`` (``[job]`` ``max_output_tokens``, ``request_timeout_s``,
``budget_tokens``; unset: the defaults), ``THREADLOOM_LIVE_TOOL_CALLS`` (``[job]
tool_calls`` for ``openai:`` models; default ``constrained``). ``THREADLOOM_LIVE_KEEP=DIR``
keeps the database and the sample there to look at afterwards (``threadloom --db
DIR/threads.db tree …``).

Only what a real model can be held to is asserted: every thread ends in a terminal status, every
stored transcript keeps the pairing invariant, evidence refs and citations resolve, a resume
keeps its ref and appends only, a fork shares its parent's history and leaves the parent as it
was. Whether the model fixed the bug is reported, never asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import JobRuntime, Orchestrator
from orchestrator.runtime.lead_tools import AskThreadTool
from orchestrator.runtime.threads import job_of
from store import Kind
from tests.live.conftest import live_spec
from workers.providers import parse_model_spec
from workers.tools import ToolContext

DEMO = Path(__file__).resolve().parents[2] / "orchestrator" / "demo"
TERMINAL = {"done", "failed", "interrupted", "cancelled"}
RESULT_STATUSES = {"done", "partial", "failed", "blocked"}
TOOLS = ["read_file", "write_file", "edit_file", "list_files", "grep", "bash"]
TIMEOUT_S = float(os.environ.get("THREADLOOM_LIVE_TIMEOUT_S") or 1800)
RESUME_MESSAGE = "In one or two sentences: what was the root cause, and do the tests pass now?"
FORK_MESSAGE = (
    "Run the failing test module once more to check the current state of the code, then call"
    " submit_result with what you see."
)
QUESTION = "Which commands did the worker run, and what did the last test run print?"
SMALL_PARAMS = 1_000_000_000
_REF = re.compile(r"T-[0-9a-hjkmnp-tv-z]{4,26}(?:#[0-9]+(?:-[0-9]*)?)?")


@dataclass
class LiveJob:
    root: Path
    out: dict[str, Any]
    tasks: list[str]

    @property
    def db(self) -> Path:
        return self.root / "threads.db"

    def cli(self, *args: str, codes: tuple[int, ...] = (0, 1)) -> Any:
        """``python -m orchestrator --db … --json ARGS``; its JSON, or the test fails naming the
        command, its exit code and the end of its stderr."""
        command = [sys.executable, "-m", "orchestrator", "--db", str(self.db), "--json", *args]
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        done = subprocess.run(
            command,
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S + 120,
            check=False,
        )
        if done.returncode not in codes:
            pytest.fail(
                f"threadloom {' '.join(args)} exited {done.returncode} (expected {codes}):"
                f"\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}"
            )
        return json.loads(done.stdout)

    def show(self, ref: str) -> dict[str, Any]:
        shown = self.cli("show", ref, codes=(0,))
        assert isinstance(shown, dict)
        return shown

    def worker(self) -> str:
        return str(self.out["workers"][0]["ref"])


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def model_lines(spec: str, *, max_output_tokens: int | None = None) -> list[str]:
    """The ``[job]`` keys that say how the model is asked, from the knobs (the module
    docstring): the spec, its output and time limits, and for ``openai:`` models the tool-call
    mode (default ``constrained``: small models need their calls shaped)."""
    lines = [f"model = {_toml_str(spec)}"]
    if tokens := os.environ.get("THREADLOOM_LIVE_MAX_OUTPUT_TOKENS") or max_output_tokens:
        lines.append(f"max_output_tokens = {int(tokens)}")
    if timeout := os.environ.get("THREADLOOM_LIVE_REQUEST_TIMEOUT_S"):
        lines.append(f"request_timeout_s = {float(timeout)}")
    if spec.startswith("openai:"):
        mode = os.environ.get("THREADLOOM_LIVE_TOOL_CALLS") or "constrained"
        lines.append(f"tool_calls = {_toml_str(mode)}")
    return lines


def write_job(root: Path, spec: str, task_ids: list[str]) -> Path:
    demo = tomllib.loads((DEMO / "job.toml").read_text(encoding="utf-8"))
    tasks = {t["id"]: t for t in demo["task"]}
    unknown = [t for t in task_ids if t not in tasks]
    if unknown:
        pytest.fail(f"THREADLOOM_LIVE_TASKS names {unknown}; the demo has {sorted(tasks)}")
    lines = [
        "[job]",
        'name = "live-demo"',
        f"goal = {_toml_str(demo['job']['goal'])}",
        'workspace = "sample"',
        f"max_parallel = {int(os.environ.get('THREADLOOM_LIVE_MAX_PARALLEL') or 1)}",
        'isolation = "none"',
        f"budget_tokens = {int(os.environ.get('THREADLOOM_LIVE_BUDGET') or 0)}",
        *model_lines(spec),
    ]
    lines += [
        "",
        "[job.worker]",
        "max_turns = 16",
        f"timeout_s = {TIMEOUT_S}",
        f"tools = {json.dumps(TOOLS)}",
    ]
    for task_id in task_ids:
        task = tasks[task_id]
        lines += [
            "",
            "[[task]]",
            f"id = {_toml_str(task_id)}",
            f"title = {_toml_str(task['title'])}",
            f"prompt = {_toml_str(task['prompt'])}",
        ]
    path = root / "job.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> LiveJob:
    spec = live_spec()
    assert spec is not None  # the conftest skips this module otherwise
    keep = os.environ.get("THREADLOOM_LIVE_KEEP")
    root = Path(keep) if keep else tmp_path_factory.mktemp("live")
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(DEMO / "sample", root / "sample", ignore=shutil.ignore_patterns("__pycache__"))
    task_ids = [
        t.strip() for t in (os.environ.get("THREADLOOM_LIVE_TASKS") or "tokenizer").split(",")
    ]
    write_job(root, spec, [t for t in task_ids if t])
    live = LiveJob(root=root, out={}, tasks=[t for t in task_ids if t])
    live.out = live.cli("run", "job.toml")
    return live


def assert_paired(messages: list[dict[str, Any]], where: str) -> None:
    """SPEC invariant 3 on a stored transcript (``show --json``): seqs 1…n; every tool_use
    answered by exactly one tool_result in the very next message, which is a user message; no
    tool_result answers anything else."""
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1)), where
    for i, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if message["role"] == "user":
            assert not uses, f"{where}#{message['seq']}: tool_use in a user message"
        results = [b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"]
        if results:
            prev = messages[i - 1] if i else None
            asked = [b["id"] for b in prev["content"] if b["type"] == "tool_use"] if prev else []
            assert message["role"] == "user", f"{where}#{message['seq']}"
            assert sorted(results) == sorted(asked), f"{where}#{message['seq']}: {results}"
        if uses:
            assert i + 1 < len(messages), f"{where}#{message['seq']}: unanswered tool_use"
            nxt = messages[i + 1]
            answered = [b["tool_use_id"] for b in nxt["content"] if b["type"] == "tool_result"]
            assert sorted(answered) == sorted(uses), f"{where}#{message['seq']}: {uses}"


def assert_resolves(live: LiveJob, ref: str) -> None:
    shown = live.show(ref)
    if "#" in ref:
        assert shown["messages"], f"{ref} resolves to no message"


def report(live: LiveJob, what: str, out: dict[str, Any]) -> None:
    """What the model did, for the person running the suite (pytest -s, or -rA)."""
    workers = ", ".join(f"{w['task']}={w['status']}" for w in out.get("workers", []))
    print(f"\n[live] {what}: {out.get('ref')} {out.get('status')} {workers} usage={out['usage']}")


def n_params(spec: str) -> int | None:
    """The model's parameter count as the server reports it (llama.cpp), or None."""
    parsed = parse_model_spec(spec)
    if parsed.provider != "openai" or not parsed.base_url:
        return None
    url = parsed.base_url.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            models = json.load(answer).get("data") or []
    except (OSError, ValueError):
        return None
    counts = [m.get("meta", {}).get("n_params") for m in models if isinstance(m, dict)]
    return next((c for c in counts if isinstance(c, int)), None)


def small_model_cannot(reason: str) -> None:
    """``xfail`` the rest of this test when the model is one measured unable to do it."""
    spec = live_spec()
    count = n_params(spec) if spec else None
    if count is not None and count < SMALL_PARAMS:
        pytest.xfail(f"{count / 1e9:.2f}B parameters: {reason}")


def calls(shown: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each tool call of a transcript with the result that answered it."""
    answers = {
        b["tool_use_id"]: b
        for m in shown["messages"]
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    return [
        (b, answers.get(b["id"]))
        for m in shown["messages"]
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def test_the_job_ends_terminal_with_paired_transcripts_and_resolving_evidence(
    job: LiveJob,
) -> None:
    out = job.out
    report(job, "run", out)
    assert out["status"] in TERMINAL
    assert out["job"] == out["lead"]
    assert sorted(w["task"] for w in out["workers"]) == sorted(job.tasks)
    threads = job.cli("ls", "--job", out["job"], "--limit", "0", codes=(0,))
    assert {t["kind"] for t in threads} >= {"lead", "worker"}
    for thread in threads:
        assert thread["status"] in TERMINAL, thread
        shown = job.show(thread["ref"])
        assert shown["status"] in TERMINAL
        assert_paired(shown["messages"], thread["ref"])
        result = shown["result"]
        if thread["kind"] == "worker":
            assert result is not None, f"{thread['ref']} ended without a result"
            assert result["status"] in RESULT_STATUSES and result["ref"] == thread["ref"]
            assert len(result["summary"]) <= 2000
            for finding in result["findings"]:
                for ref in finding["evidence"]:  # unresolvable ones were dropped and counted
                    assert ref.startswith(thread["ref"] + "#"), ref
                    assert_resolves(job, ref)


def test_each_worker_makes_real_tool_calls_and_ends_through_submit_result(job: LiveJob) -> None:
    """Real work, not prose: each worker ran tools whose output it got (not errors only), and
    its result came through ``submit_result`` (not the loop's stand-in for a worker that never
    submitted). Which demo bugs got fixed is printed: the task's test module is run here."""
    for worker in job.out["workers"]:
        shown = job.show(worker["ref"])
        made = calls(shown)
        module = f"tests.test_{worker['task']}"
        fixed = subprocess.run(
            [sys.executable, "-m", "unittest", module],
            cwd=job.root / "sample",
            capture_output=True,
            check=False,
        )
        names = [u["name"] for u, _ in made]
        print(
            f"\n[live] {worker['ref']} {worker['task']}: calls {names};"
            f" {module} {'passes' if fixed.returncode == 0 else 'still fails'}"
        )
        ran = [u for u, r in made if u["name"] != "submit_result" and r and not r["is_error"]]
        assert ran, f"{worker['ref']} ran no tool successfully: {names}"
        submitted = [u for u, r in made if u["name"] == "submit_result" and r and not r["is_error"]]
        if not submitted:
            small_model_cannot(
                "it runs tools but never chooses submit_result (measured: it reruns the same"
                " command until the repeated-call stop)"
            )
        assert submitted, f"{worker['ref']} ended {shown['status']}: {shown.get('error')}"


def test_resume_keeps_the_ref_and_only_appends(job: LiveJob) -> None:
    ref = job.worker()
    before = job.show(ref)["messages"]
    out = job.cli("resume", ref, RESUME_MESSAGE)
    report(job, "resume", out)
    assert out["ref"] == ref and out["status"] in TERMINAL and out["workers"] == []
    after = job.show(ref)
    assert after["status"] in TERMINAL
    assert after["messages"][: len(before)] == before
    added = after["messages"][len(before) :]
    assert added and added[0]["role"] == "user"
    assert any(b.get("text") == RESUME_MESSAGE for b in added[0]["content"])
    assert_paired(after["messages"], ref)


def bare(messages: list[dict[str, Any]]) -> list[tuple[int, str, Any]]:
    """A message as stored (seq, role, content), without how ``show`` labels inherited ones."""
    return [(m["seq"], m["role"], m["content"]) for m in messages]


def fork_point(messages: list[dict[str, Any]]) -> int:
    """The first stored tool result (mid-history, never between a tool_use and its result);
    the task message when the worker never ran a tool."""
    for m in messages:
        if m["role"] == "user" and any(b["type"] == "tool_result" for b in m["content"]):
            return int(m["seq"])
    return 1


def test_fork_shares_history_and_leaves_its_parent_as_it_was(job: LiveJob) -> None:
    ref = job.worker()
    parent_before = job.show(ref)
    at = fork_point(parent_before["messages"])
    out = job.cli("fork", f"{ref}#{at}", FORK_MESSAGE)
    report(job, "fork", out)
    fork_ref = out["ref"]
    assert fork_ref != ref and out["status"] in TERMINAL
    fork = job.show(fork_ref)
    assert fork["forked_from"] == {"ref": ref, "at": at}
    assert fork["status"] in TERMINAL
    assert bare(fork["messages"][:at]) == bare(parent_before["messages"][:at])
    assert {m.get("from") for m in fork["messages"][:at]} == {ref}  # shown as inherited
    assert any(b.get("text") == FORK_MESSAGE for b in fork["messages"][at]["content"])
    assert_paired(fork["messages"], fork_ref)
    # the same message by either name, and the parent untouched
    assert bare(job.show(f"{fork_ref}#{at}")["messages"]) == bare(
        job.show(f"{ref}#{at}")["messages"]
    )
    assert job.show(ref)["messages"] == parent_before["messages"]


async def test_ask_thread_answers_with_citations_that_resolve(job: LiveJob) -> None:
    """The lead's ``ask_thread``, run as the lead runs it: a reader thread of the job, on the
    workers' model, whose kept citations all resolve and whose failed ones are marked."""
    ref = job.worker()
    async with await Orchestrator.open(str(job.db)) as orch:
        lead = (await orch.store.resolve(job.out["lead"])).thread
        rt = JobRuntime(store=orch.store, job=job_of(lead), lead_id=lead.id)
        try:
            tool = AskThreadTool(rt)
            ctx = ToolContext(workspace=job.root / "sample", thread_ref=lead.ref)
            answer = await tool.invoke({"ref": ref, "question": QUESTION}, ctx)
        finally:
            await rt.aclose()
        print(f"\n[live] ask_thread: {answer.text[:1500]}")
        found = re.search(r"reader(?: thread:)? (T-[0-9a-z]+)", answer.text)
        assert found, answer.text
        reader = (await orch.store.resolve(found.group(1))).thread
        assert reader.kind == Kind.READER and reader.parent_id == lead.id
        assert str(reader.status) in TERMINAL
        if answer.is_error:
            return  # the reader ended without an answer; its transcript is still checked below
        body, _, checked = answer.text.partition("\n(reader thread:")
        for cite in set(_REF.findall(body)):
            marked = f"{cite} [not found]" in body
            try:
                found_cite = await orch.store.resolve(cite)
                resolved = not (found_cite.start is None and "#" in cite)
            except Exception:
                resolved = False
            assert resolved or marked, f"citation {cite} neither resolves nor is marked"
        kept = re.search(r"citations checked: (.*)", checked)
        for cite in kept.group(1).split(", ") if kept else []:
            resolved_cite = await orch.store.resolve(cite)
            assert resolved_cite.start is not None or "#" not in cite, cite
    shown = job.show(reader.ref)
    assert_paired(shown["messages"], reader.ref)
