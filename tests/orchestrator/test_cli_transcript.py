"""``import``, ``export`` and ``fork --no-run``, and the JSONL transcript format itself."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from orchestrator.importers.jsonl import dump_transcript, parse_transcript
from store import (
    ImportFormatError,
    Message,
    NewMessage,
    Store,
    TextBlock,
    ToolUseBlock,
)
from tests.orchestrator.test_cli_helpers import (
    BIG_OUTPUT,
    Sample,
    assert_one_error_line,
    invoke,
    json_out,
    run_cli,
)


def jsonl(*objs: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


USER = {"role": "user", "content": "hello"}
CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}}],
}
ANSWER = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a\nb"}],
}


async def thread_count(path: Path) -> int:
    store = await Store.open(str(path))
    try:
        return len(await store.list_threads())
    finally:
        await store.close()


async def messages_of(path: Path, thread_id: str) -> list[Message]:
    store = await Store.open(str(path))
    try:
        return await store.messages(thread_id)
    finally:
        await store.close()


# ----------------------------------------------------------------- the format


def test_parse_transcript_accepts_strings_blocks_blank_lines_and_strips_cache_control() -> None:
    text = (
        jsonl(
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
            CALL,
        )
        + "\n   \n"
        + jsonl(ANSWER, {"role": "assistant", "content": "done"})
    )
    msgs = parse_transcript(text)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0].content == [TextBlock(text="hi")]
    assert msgs[3] == NewMessage.assistant("done")
    assert parse_transcript(dump_transcript(msgs)) == msgs


def test_parse_transcript_allows_a_trailing_unanswered_tool_use() -> None:
    msgs = parse_transcript(jsonl(USER, CALL))
    assert msgs[-1].tool_uses() == [ToolUseBlock(id="c1", name="bash", input={"command": "ls"})]


@pytest.mark.parametrize(
    ("lines", "line", "needle"),
    [
        ([USER, "{not json"], 2, "bad JSON"),
        ([{"role": "system", "content": "x"}], 1, "role must be 'user' or 'assistant'"),
        ([USER, CALL, {"role": "assistant", "content": "text"}], 3, "unanswered tool_use c1"),
        (
            [USER, {"role": "assistant", "content": "ok"}, ANSWER],
            3,
            "tool_result for c1 answers no tool_use",
        ),
        ([{"role": "user", "content": "x", "name": "bob"}], 1, "unknown key 'name'"),
        (
            [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            1,
            'unknown block type "image"',
        ),
        (
            [USER, {"role": "assistant", "content": [{"type": "tool_use", "name": "x"}]}],
            2,
            "missing key 'id'",
        ),
        ([{"role": "user"}], 1, "missing key 'content'"),
        ([[1, 2]], 1, "expected an object"),
        ([{"role": "assistant", "content": "hi"}], 1, "a thread starts with a user message"),
    ],
)
def test_parse_transcript_names_the_bad_line_and_what_is_wrong(
    lines: list[object], line: int, needle: str
) -> None:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    with pytest.raises(ImportFormatError) as err:
        parse_transcript(text, source="t.jsonl")
    assert err.value.line == line
    assert str(err.value).startswith(f"t.jsonl:{line}: ")
    assert needle in str(err.value)


# ----------------------------------------------------------------- import


def test_import_of_a_bad_line_through_the_real_command_exits_2_naming_it(tmp_path: Path) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(jsonl(USER, CALL, ANSWER) + "{oops\n")
    db = tmp_path / "threads.db"
    proc = run_cli("import", str(src), db=db)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert_one_error_line(proc.stderr, f"{src}:4: bad JSON")
    assert asyncio.run(thread_count(db)) == 0


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        ([USER, {"role": "tool", "content": "x"}], 2),
        ([USER, CALL, {"role": "assistant", "content": "hm"}], 3),
        ([USER, {"role": "assistant", "content": "hi"}, ANSWER], 3),
    ],
    ids=["wrong-role", "tool-use-then-text", "result-without-use"],
)
def test_import_of_a_bad_line_exits_2_naming_the_line_and_stores_nothing(
    tmp_path: Path, lines: list[object], line: int
) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(jsonl(*lines))
    db = tmp_path / "threads.db"
    result = invoke("import", str(src), db=db)
    assert (result.exit_code, result.stdout) == (2, "")
    assert_one_error_line(result.stderr, f"t.jsonl:{line}: ")
    as_json = invoke("--json", "import", str(src), db=db)
    assert json_out(as_json)["error"]["code"] == 2
    assert f"t.jsonl:{line}: " in json_out(as_json)["error"]["message"]
    assert asyncio.run(thread_count(db)) == 0


def test_import_creates_an_idle_worker_thread_with_every_message(tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text(jsonl(USER, CALL, ANSWER, {"role": "assistant", "content": "bye"}))
    db = tmp_path / "threads.db"
    doc = json_out(invoke("--json", "import", str(src), "--title", "my chat", db=db))
    assert set(doc) >= {"ref", "messages"} and doc["messages"] == 4
    shown = json_out(invoke("--json", "show", doc["ref"], db=db))
    assert (shown["kind"], shown["status"], shown["title"]) == ("worker", "idle", "my chat")
    stored = {"type": "tool_result", "tool_use_id": "c1", "content": "a\nb", "is_error": False}
    assert shown["messages"][2]["content"] == [stored]
    text = invoke("import", "-", db=db, stdin=jsonl(USER)).stdout
    assert text.endswith("  imported 1 messages from <stdin>\n")


def test_export_jsonl_then_import_gives_identical_content(sample: Sample) -> None:
    for name in ("worker", "fork"):
        exported = invoke("export", sample.ref(name), db=sample.path).stdout
        assert len(exported.splitlines()) == (6 if name == "worker" else 4)
        assert all(set(json.loads(line)) == {"role", "content"} for line in exported.splitlines())
        ref = json_out(invoke("--json", "import", "-", db=sample.path, stdin=exported))["ref"]
        original = asyncio.run(messages_of(sample.path, getattr(sample, name)))
        copy = asyncio.run(messages_of(sample.path, ref.removeprefix("T-")))
        assert [(m.role, m.content) for m in copy] == [(m.role, m.content) for m in original]
        assert invoke("export", ref, db=sample.path).stdout == exported


def test_export_of_a_fork_includes_its_inherited_history_through_the_real_command(
    sample: Sample,
) -> None:
    proc = run_cli("export", sample.ref("fork"), db=sample.path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "tests/test_tokenizer.py fails"}],
    }
    assert lines[2]["content"][0]["content"] == BIG_OUTPUT
    assert lines[3] == {
        "role": "user",
        "content": [{"type": "text", "text": "Try a different fix"}],
    }


def test_export_md_is_a_readable_document(sample: Sample) -> None:
    md = invoke("export", sample.ref("worker"), "--format", "md", db=sample.path).stdout
    assert md.startswith("# Fix the tokenizer\n\n- **ref**: `" + sample.ref("worker") + "`\n")
    assert "## Result" in md and "- split ignores tabs — `" in md
    assert "### #2 · assistant" in md and "### #6 · assistant" in md
    assert '**→ `bash`** (`t1`)\n\n```json\n{\n  "command": "pytest -q"\n}\n```' in md
    assert "**← `bash`** ok\n\n```text\n" + BIG_OUTPUT + "\n```" in md
    assert "**← `write_file`** error" in md
    assert "<details><summary>thinking</summary>" in md
    assert "\n\n\n" not in md
    fork_md = invoke("export", sample.ref("fork"), "--format", "md", db=sample.path).stdout
    assert f"### #1 · user · from `{sample.ref('worker')}`" in fork_md
    assert "### #4 · user\n\nTry a different fix" in fork_md


# ----------------------------------------------------------------- fork --no-run


def test_fork_no_run_creates_an_idle_fork_with_the_message_and_leaves_ref_alone(
    sample: Sample,
) -> None:
    doc = json_out(
        invoke(
            "--json",
            "fork",
            sample.ref("worker") + "#5",
            "what about tabs?",
            "--no-run",
            db=sample.path,
        )
    )
    assert doc["forked_from"] == {"ref": sample.ref("worker"), "at": 5}
    assert doc["status"] == "idle"
    shown = json_out(invoke("--json", "show", doc["ref"], db=sample.path))
    assert [m["seq"] for m in shown["messages"]] == [1, 2, 3, 4, 5, 6]
    assert shown["messages"][5]["content"] == [{"type": "text", "text": "what about tabs?"}]
    worker = json_out(invoke("--json", "show", sample.ref("worker"), db=sample.path))
    assert len(worker["messages"]) == 6 and worker["status"] == "done"

    whole = json_out(
        invoke(
            "fork",
            sample.ref("worker"),
            "--no-run",
            "--model",
            "anthropic:claude-haiku-4-5",
            "--json",
            db=sample.path,
        )
    )
    assert whole["forked_from"]["at"] == 6
    assert json_out(invoke("--json", "show", whole["ref"], db=sample.path))["model"] == (
        "anthropic:claude-haiku-4-5"
    )
    text = invoke("fork", sample.ref("lead"), "--no-run", db=sample.path).stdout
    assert f"fork of {sample.ref('lead')}#4 (idle)" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["#2", "--no-run"], "message 2 has tool calls whose results are in #3"),
        (["#2-3", "--no-run"], "fork point must be one message"),
        (["#9", "--no-run"], "cannot fork"),
        (["", "--no-run", "--model", "gpt4"], "bad model spec 'gpt4'"),
    ],
)
def test_fork_refuses_bad_points_flags_and_running_with_exit_2(
    sample: Sample, args: list[str], needle: str
) -> None:
    result = invoke("fork", sample.ref("worker") + args[0], *args[1:], db=sample.path)
    assert result.exit_code == 2
    assert_one_error_line(result.stderr, needle)
    assert asyncio.run(thread_count(sample.path)) == 4
