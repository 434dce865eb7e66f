"""A small but complete database for the viewer's tests, made through the real Store: a job
(lead, two workers with results, a fork of one), tool calls with long and stored-apart
outputs, thinking, a thread of hostile text, and a running thread. And a thread imported with
the real CLI whose tool-use ids are of every spelling (``import_tool_ids``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.web._text import CAP_CHARS, CAP_LINES
from store import (
    INLINE_LIMIT,
    NewMessage,
    Result,
    Status,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
)
from tests.orchestrator.test_cli_helpers import run_cli

HOSTILE = (
    "<script>alert('pwned')</script> \"><img src=x onerror=alert(1)> "
    "' onmouseover='alert(2) </pre></details><b>bold</b> &amp; "
    "\x1b[31mred\x1b[0m \x1b]0;title\x07 nul:\x00: cr:\r: bidi:\u202eevil\u202c"
)
LONG_LINES = 300
HUGE_CHARS = INLINE_LIMIT + 50_000


@dataclass(frozen=True)
class Refs:
    lead: str
    worker: str
    other: str
    fork: str
    hostile: str
    running: str
    huge_seq: int
    long_seq: int


def call(tool_id: str, name: str, **args: Any) -> NewMessage:
    return NewMessage(role="assistant", content=[ToolUseBlock(id=tool_id, name=name, input=args)])


def answer(tool_id: str, text: str, *, error: bool = False) -> NewMessage:
    block = ToolResultBlock(tool_use_id=tool_id, content=text, is_error=error)
    return NewMessage(role="user", content=[block])


def usage(n: int) -> UsageRecord:
    return UsageRecord(
        model="scripted:demo",
        usage=Usage(input_tokens=n, output_tokens=n // 4, cache_read_input_tokens=n * 2),
        cost_usd=n / 1e6,
    )


async def build(store: Store) -> Refs:
    lead = await store.create_thread(
        kind="lead",
        title="fix-parser: make the test suite pass",
        model="scripted:demo",
        status=Status.RUNNING,
        messages=[NewMessage.user("Make the test suite pass and report each root cause.")],
    )
    await store.append(lead.id, call("d1", "dispatch", tasks=[{"title": "tokenizer"}]))
    worker = await store.create_thread(
        kind="worker",
        title="Fix the tokenizer tests",
        parent_id=lead.id,
        job_id=lead.id,
        model="scripted:demo",
        status=Status.RUNNING,
        messages=[NewMessage.user("tests/test_tokenizer.py fails on quoted strings")],
    )
    think = ThinkingBlock(thinking="The quote handling looks off by one.", signature="s")
    look = ToolUseBlock(id="b1", name="bash", input={"command": "pytest -q tests/"})
    await store.append(
        worker.id,
        NewMessage(role="assistant", content=[think, TextBlock(text="Running the tests."), look]),
        usage=usage(1200),
    )
    long_output = "\n".join(f"line {i}: FAILED test_{i}" for i in range(LONG_LINES))
    await store.append(worker.id, answer("b1", long_output, error=True))
    await store.append(worker.id, call("r1", "read_file", path="tokenizer.py"))
    await store.append(worker.id, answer("r1", "x" * HUGE_CHARS))
    await store.append(worker.id, NewMessage.assistant("Fixed the off-by-one."), usage=usage(900))
    info = await store.get_thread(worker.id)
    result = Result(
        status="done",
        summary="The tokenizer dropped the closing quote.",
        findings=[{"claim": "quote off by one", "evidence": [f"{worker.ref}#3"]}],
        changes=[{"path": "tokenizer.py", "action": "modified"}],
        verification=[{"command": "pytest -q", "outcome": "12 passed"}],
    )
    await store.set_status(worker.id, Status.DONE, result=result)
    other = await store.create_thread(
        kind="worker",
        title="Check the lexer",
        parent_id=lead.id,
        job_id=lead.id,
        status=Status.FAILED,
        messages=[NewMessage.user("check the lexer"), NewMessage.assistant("it broke")],
    )
    fork = await store.fork(worker.id, at=3, messages=[NewMessage.user("try another way")])
    await store.append(lead.id, answer("d1", f"{worker.ref}: done"))
    await store.append(lead.id, NewMessage.assistant("Report: the tokenizer is fixed."))
    await store.set_status(lead.id, Status.DONE)
    hostile = await store.create_thread(
        kind="worker",
        title="<script>alert('title')</script>\x1b[2J",
        status=Status.DONE,
        messages=[
            NewMessage.user(HOSTILE),
            call("h1", "bash", command=HOSTILE),
            answer("h1", HOSTILE),
            NewMessage.assistant(HOSTILE),
        ],
    )
    running = await store.create_thread(
        kind="worker",
        title="a thread still running",
        status=Status.RUNNING,
        messages=[NewMessage.user("keep going")],
    )
    return Refs(
        lead=lead.ref,
        worker=info.ref,
        other=other.ref,
        fork=fork.ref,
        hostile=hostile.ref,
        running=running.ref,
        huge_seq=5,
        long_seq=3,
    )


TOOL_IDS = [
    "a/../../b",
    "q?x=1#frag",
    "sp ace%2F",
    '"><script>alert(1)</script>',
    "..",
    ".",
    "/",
    "ü/ß&id=other",
]


def transcript(ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Import lines with one call per id, its input and output each past the page's cap, and
    the whole texts the links must serve, in page order (input, output, input, …)."""
    lines: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    wholes = []
    for n, tool_id in enumerate(ids):
        args = {"command": f"echo {n} " + "x" * CAP_CHARS}
        output = "".join(f"call {n} line {i}\n" for i in range(CAP_LINES * 3))
        lines.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tool_id, "name": "bash", "input": args}],
            }
        )
        lines.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": output}],
            }
        )
        wholes += [json.dumps(args, ensure_ascii=False, indent=2) + "\n", output]
    lines.append({"role": "assistant", "content": "done"})
    return lines, wholes


def import_tool_ids(tmp_path: Path) -> tuple[str, str, list[str]]:
    """(db, ref, whole texts in page order) of a thread with a call for each of ``TOOL_IDS``,
    imported from a JSONL file with the real ``threadloom import``."""
    lines, wholes = transcript(TOOL_IDS)
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    db = str(tmp_path / "threads.db")
    done = run_cli("--json", "import", str(path), db=db)
    assert done.returncode == 0, done.stderr
    return db, json.loads(done.stdout)["ref"], wholes
