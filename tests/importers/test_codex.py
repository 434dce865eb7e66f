"""Codex rollouts into threads: calls and outputs by call_id, JSON-in-a-string arguments,
usage rows from token counts, one result per call, rollbacks, compaction, forks, subagents."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.importers import COMPACTION_MARK, detect, import_sessions, parse
from store import Kind, Store, ThinkingBlock, ToolResultBlock, ToolUseBlock
from tests.importers.fixtures import CodexRollout

PARENT = "019a0000-aaaa-7bbb-8ccc-000000000001"


def session(root: Path, sid: str = PARENT, **kw: object) -> CodexRollout:
    r = CodexRollout(root, sid, **kw)  # type: ignore[arg-type]
    r.item(
        type="message",
        role="user",
        content=[{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}],
    )
    r.user("list the files")
    r.item(
        type="reasoning",
        summary=[{"type": "summary_text", "text": "I should run ls"}],
        encrypted_content="gAAAA",
    )
    r.call("call_1", "shell", {"command": ["ls"]})
    r.event(type="exec_command_end", call_id="call_1", aggregated_output="dup", exit_code=0)
    r.output("call_1", "a.py\nb.py")
    r.item(type="custom_tool_call", call_id="call_2", name="apply_patch", input="*** Begin Patch")
    r.item(type="custom_tool_call_output", call_id="call_2", output="Done!")
    r.say("Two files.")
    r.tokens(1000, 50, cached=800)
    r.tokens(1000, 50, cached=800)  # Codex repeats a count: still one row
    return r


def test_detects_codex_and_converts_calls_results_and_reasoning(tmp_path: Path) -> None:
    path = session(tmp_path).write()
    assert detect(path) == "codex"
    (s,), report = parse(tmp_path)
    msgs = s.branches[0].messages
    assert s.kind == Kind.LEAD and report.skipped == 0
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert isinstance(msgs[1].content[0], ThinkingBlock)
    call = msgs[1].content[1]
    assert isinstance(call, ToolUseBlock) and call.input == {"command": ["ls"]}
    (result,) = msgs[2].tool_results()
    assert result.text == "a.py\nb.py"  # the exec_command_end copy is not a second result
    custom = msgs[3].content[0]
    assert isinstance(custom, ToolUseBlock) and custom.input == {"input": "*** Begin Patch"}
    assert msgs[5].text == "Two files."
    assert s.source["unmodeled"]["reasoning encrypted_content"] == 1


async def test_token_counts_become_usage_rows(tmp_path: Path, store: Store) -> None:
    session(tmp_path).write()
    (t,) = (await import_sessions(store, tmp_path)).threads
    (total,) = await store.usage.totals(thread_id=t.info.id)
    assert total.responses == 1
    assert total.usage.input_tokens == 200 and total.usage.cache_read_input_tokens == 800
    assert total.usage.output_tokens == 50


async def test_exec_command_end_answers_a_call_without_output(tmp_path: Path, store: Store) -> None:
    r = CodexRollout(tmp_path)
    r.user("run it")
    r.call("c9", "shell", {"command": ["false"]})
    r.event(type="exec_command_end", call_id="c9", aggregated_output="boom", exit_code=1)
    r.say("It failed.")
    r.write()
    (t,) = (await import_sessions(store, tmp_path)).threads
    msgs = await store.messages(t.info.id)
    (res,) = msgs[2].tool_results()
    # stored as threadloom's bash stores a command's result: the exit status in effects and as
    # the output's last line; a non-zero exit is a result, not a tool error
    assert isinstance(res, ToolResultBlock) and res.text == "boom\n[exit code: 1]"
    assert res.effects is not None and res.effects.exit_code == 1 and not res.is_error


async def test_rolled_back_turns_become_a_fork(tmp_path: Path, store: Store) -> None:
    r = CodexRollout(tmp_path)
    r.user("first question")
    r.say("first answer")
    r.user("bad question")
    r.say("bad answer")
    r.event(type="thread_rolled_back", num_turns=1)
    r.user("better question")
    r.say("better answer")
    r.write()
    main, fork = (await import_sessions(store, tmp_path)).threads
    texts = [m.text for m in await store.messages(main.info.id)]
    assert texts == ["first question", "first answer", "better question", "better answer"]
    assert fork.info.forked_from is not None and fork.info.forked_from.at == 2
    forked = [m.text for m in await store.messages(fork.info.id)]
    assert forked[2:] == ["bad question", "bad answer"]
    assert fork.source["branch"] == "rolled-back turns"


async def test_compacted_keeps_history_and_marks_the_summary(tmp_path: Path, store: Store) -> None:
    r = CodexRollout(tmp_path)
    r.user("go")
    r.say("went")
    r.line("compacted", {"message": "we went", "replacement_history": []})
    r.user("again")
    r.write()
    (t,) = (await import_sessions(store, tmp_path)).threads
    texts = [m.text for m in await store.messages(t.info.id)]
    assert texts[:2] == ["go", "went"]
    assert texts[2] == f"{COMPACTION_MARK}\nwe went"
    assert texts[3] == "again"


async def test_fork_and_subagent_files_link_to_their_session(tmp_path: Path, store: Store) -> None:
    parent = session(tmp_path)
    parent.write()
    child = "019a0000-aaaa-7bbb-8ccc-000000000002"
    forked = session(tmp_path, child, forked_from=PARENT)  # Codex copies the history
    forked.user("and now in the fork")
    forked.say("forked reply")
    forked.write()
    sub = CodexRollout(tmp_path, "019a0000-aaaa-7bbb-8ccc-000000000003", parent_thread=PARENT)
    sub.user("explore the tests")
    sub.say("explored")
    sub.write()
    report = await import_sessions(store, tmp_path)
    by_session = {w.source["session_id"]: w for w in report.threads}
    main, fork, worker = by_session[PARENT], by_session[child], by_session[sub.session_id]
    assert fork.info.forked_from is not None
    assert fork.info.forked_from.thread_id == main.info.id
    assert fork.info.forked_from.at == main.info.head_seq
    assert fork.added == 2
    assert worker.info.kind == Kind.WORKER and worker.info.parent_id == main.info.id
    assert worker.info.title.startswith("scout: ")
    again = await import_sessions(store, tmp_path)
    assert sum(w.added for w in again.threads) == 0
    assert len(await store.list_threads()) == 3


async def test_a_session_growing_between_imports_is_extended(tmp_path: Path, store: Store) -> None:
    r = CodexRollout(tmp_path)
    r.user("one")
    r.call("c1", "shell", {"command": ["ls"]})  # the session is mid-call at the first import
    r.write()
    (t,) = (await import_sessions(store, tmp_path)).threads
    assert t.info.head_seq == 2
    r.output("c1", "x")
    r.say("done")
    r.write()
    (t2,) = (await import_sessions(store, tmp_path)).threads
    assert t2.info.id == t.info.id and t2.added == 2
    assert len(await store.list_threads()) == 1


def test_unreadable_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    r = CodexRollout(tmp_path)
    r.user("hi")
    r.lines.append('{"timestamp": "x", "type": "response_item", "payload": {"type": "mes')
    r.lines.append("[1, 2]")
    r.say("hello")
    r.write()
    (s,), report = parse(tmp_path)
    assert report.skipped == 2
    assert [m.text for m in s.branches[0].messages] == ["hi", "hello"]


def test_output_shapes_and_local_shell_calls(tmp_path: Path) -> None:
    r = CodexRollout(tmp_path)
    r.user("go")
    r.item(
        type="local_shell_call",
        call_id="ls1",
        status="completed",
        action={"type": "exec", "command": ["ls", "-a"]},
    )
    r.item(
        type="local_shell_call_output",
        call_id="ls1",
        output={"content": "permission denied", "success": False},
    )
    r.call("f1", "shell", {"command": ["cat", "x"]})
    r.item(
        type="function_call_output",
        call_id="f1",
        output=[
            {"type": "input_text", "text": "part one"},
            {"type": "input_image", "image_url": "data:..."},
        ],
    )
    r.call("f2", "shell", {})
    r.item(type="function_call", name="broken", arguments="{not json", call_id="f3")
    r.write()
    (s,), _ = parse(tmp_path)
    msgs = s.branches[0].messages
    shell = msgs[1].content[0]
    assert isinstance(shell, ToolUseBlock) and shell.name == "local_shell"
    assert shell.input == {"type": "exec", "command": ["ls", "-a"]}
    (denied,) = msgs[2].tool_results()
    assert denied.is_error and denied.text == "permission denied"
    (parts,) = msgs[4].tool_results()
    assert parts.text.startswith("part one\n[input_image block]")
    broken = msgs[5].content[1]
    assert isinstance(broken, ToolUseBlock) and broken.input == {"arguments": "{not json"}


def test_thread_names_from_the_rollout_or_codexs_index(tmp_path: Path) -> None:
    sessions = tmp_path / ".codex" / "sessions"
    named = CodexRollout(sessions, "019a0000-aaaa-7bbb-8ccc-0000000000a1")
    named.user("first words")
    named.event(type="thread_name_updated", thread_id=named.session_id, thread_name="Renamed")
    named.write()
    indexed = CodexRollout(sessions, "019a0000-aaaa-7bbb-8ccc-0000000000a2")
    indexed.user("other words")
    indexed.write()
    plain = CodexRollout(sessions, "019a0000-aaaa-7bbb-8ccc-0000000000a3")
    plain.user("plain words")
    plain.write()
    index = tmp_path / ".codex" / "session_index.jsonl"
    index.write_text(
        "".join(
            json.dumps({"id": i, "thread_name": n, "updated_at": "2026-01-02T10:00:00Z"}) + "\n"
            for i, n in [
                (indexed.session_id, "Old name"),
                (indexed.session_id, "Index name"),
                (named.session_id, "Not this one"),
            ]
        )
    )
    for root in (sessions, tmp_path / ".codex"):
        found, report = parse(root)
        titles = {s.source["session_id"]: s.title for s in found}
        assert titles == {
            named.session_id: "Renamed",
            indexed.session_id: "Index name",
            plain.session_id: "plain words",
        }
        assert report.unrecognized == []
