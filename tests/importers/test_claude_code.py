"""Claude Code sessions into threads: the chain not the file order, split turns, compaction,
subagents, stored-aside outputs, titles, and incremental re-import."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.importers import COMPACTION_MARK, NO_RESULT, import_sessions, parse
from store import Kind, Store, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from tests.importers.fixtures import ClaudeSession
from workers.providers import cost_usd


def basic(project: Path) -> ClaudeSession:
    s = ClaudeSession(project)
    s.raw({"type": "custom-title", "customTitle": "Fix the parser", "sessionId": s.session_id})
    s.user("Please fix the parser")
    s.assistant([{"type": "thinking", "thinking": "let me look", "signature": "sig"}], msg_id="m1")
    s.text("Looking.", msg_id="m1")
    s.call("tu1", "Bash", {"command": "ls"}, msg_id="m1")
    s.call("tu2", "Read", {"file_path": "a.py"}, msg_id="m1")
    s.result("tu1", "a.py\nb.py")
    s.result("tu2", "print(1)")
    s.text(
        "Done.",
        msg_id="m2",
        usage={"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50},
    )
    return s


def test_split_turn_is_one_message_and_results_one_user_message(tmp_path: Path) -> None:
    basic(tmp_path).write()
    (sess,), report = parse(tmp_path)
    msgs = sess.branches[0].messages
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
    kinds = [type(b) for b in msgs[1].content]
    assert kinds == [ThinkingBlock, TextBlock, ToolUseBlock, ToolUseBlock]
    assert [b.tool_use_id for b in msgs[2].tool_results()] == ["tu1", "tu2"]
    assert sess.title == "Fix the parser"
    assert sess.kind == Kind.LEAD
    assert report.skipped == 0


def test_chain_not_file_order_active_branch_is_main_and_rewind_is_a_fork(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path)
    first = s.user("question one")
    s.text("answer one", msg_id="a1")
    s.user("first try")
    s.text("abandoned answer", msg_id="a2")
    # a rewind: a new child of the first answer, written later in the file
    s.user("second try", parent=s.lines and _uuid_of(s, 2))
    s.text("kept answer", msg_id="a3")
    assert first
    s.write()
    (sess,), _ = parse(tmp_path)
    main = [m.text for m in sess.branches[0].messages]
    assert main == ["question one", "answer one", "second try", "kept answer"]
    assert [m.text for m in sess.branches[1].messages][2:] == ["first try", "abandoned answer"]


def _uuid_of(s: ClaudeSession, n: int) -> str:
    import json

    return str(json.loads(s.lines[n - 1])["uuid"])


async def test_rewound_branch_becomes_a_fork_sharing_history(tmp_path: Path, store: Store) -> None:
    s = ClaudeSession(tmp_path)
    s.user("question one")
    s.text("answer one", msg_id="a1")
    s.user("first try")
    s.text("abandoned answer", msg_id="a2")
    s.user("second try", parent=_uuid_of(s, 2))
    s.text("kept answer", msg_id="a3")
    s.write()
    report = await import_sessions(store, tmp_path)
    main, fork = report.threads
    assert main.info.kind == Kind.LEAD and main.info.head_seq == 4
    assert fork.info.forked_from is not None
    assert (fork.info.forked_from.thread_id, fork.info.forked_from.at) == (main.info.id, 2)
    msgs = await store.messages(fork.info.id)
    assert [m.text for m in msgs] == ["question one", "answer one", "first try", "abandoned answer"]
    assert main.source["format"] == "claude-code"
    assert main.source["session_id"] == s.session_id
    assert main.source["path"] == str(s.path)


async def test_compaction_keeps_history_whole_and_summary_marked(
    tmp_path: Path, store: Store
) -> None:
    s = ClaudeSession(tmp_path)
    s.user("long work")
    s.text("step one", msg_id="a1")
    s.compact("Summary: we did step one")
    s.user("go on")
    s.text("step two", msg_id="a2")
    s.write()
    report = await import_sessions(store, tmp_path)
    (main,) = report.threads
    texts = [m.text for m in await store.messages(main.info.id)]
    assert texts[:2] == ["long work", "step one"]
    assert texts[2].startswith(COMPACTION_MARK) and "we did step one" in texts[2]
    assert texts[3:] == ["go on", "step two"]


async def test_subagent_is_a_worker_under_its_session(tmp_path: Path, store: Store) -> None:
    s = basic(tmp_path)
    s.call("task1", "Task", {"description": "Survey the tests", "prompt": "look"}, msg_id="m3")
    s.result("task1", "the survey")
    sub = s.subagent("a1b2", "task1")
    sub.user("look", isSidechain=True)
    sub.text("I looked", msg_id="s1")
    s.write()
    report = await import_sessions(store, tmp_path)
    main, worker = report.threads
    assert worker.info.kind == Kind.WORKER
    assert worker.info.parent_id == main.info.id
    assert worker.info.job_id == main.info.job_id
    assert worker.info.title == "Survey the tests"
    assert worker.source["tool_use_id"] == "task1"
    assert worker.source["session_id"] == f"{s.session_id}/a1b2"
    children = await store.children(main.info.id)
    assert [c.id for c in children] == [worker.info.id]


async def test_persisted_output_is_read_whole_from_tool_results(
    tmp_path: Path, store: Store
) -> None:
    s = ClaudeSession(tmp_path)
    s.user("run it")
    s.call("big1", "Bash", {"command": "cat big"}, msg_id="m1")
    whole = "line\n" * 5000
    s.result("big1", s.tool_output("big1", whole))
    s.text("ok", msg_id="m2")
    s.write()
    report = await import_sessions(store, tmp_path)
    msgs = await store.messages(report.threads[0].info.id)
    (result,) = msgs[2].tool_results()
    assert result.text == whole


async def test_unanswered_call_gets_an_error_result_and_bad_lines_are_counted(
    tmp_path: Path, store: Store
) -> None:
    s = ClaudeSession(tmp_path)
    s.user("start")
    s.call("lost", "Bash", {"command": "sleep 100"}, msg_id="m1")
    s.raw("{not json")
    s.user("never mind, stop")  # the user interrupted: no result was ever written
    s.text("stopped", msg_id="m2")
    s.raw('{"type": "file-history-snapshot", "messageId": "x", "snapshot": {}}')
    s.write()
    report = await import_sessions(store, tmp_path)
    assert report.skipped == 1
    msgs = await store.messages(report.threads[0].info.id)
    first = msgs[2].content[0]
    assert isinstance(first, ToolResultBlock) and first.is_error and first.text == NO_RESULT
    assert msgs[2].text == "never mind, stop"
    unmodeled = report.threads[0].source["unmodeled"]
    assert unmodeled["line:file-history-snapshot"] == 1


async def test_reimport_adds_only_what_is_new(tmp_path: Path, store: Store) -> None:
    s = basic(tmp_path)
    s.write()
    first = await import_sessions(store, tmp_path)
    (t,) = first.threads
    assert t.added == 4
    again = await import_sessions(store, tmp_path)
    assert [w.added for w in again.threads] == [0]
    assert len(await store.list_threads()) == 1
    s.user("one more thing")
    s.text("sure", msg_id="m9")
    s.write()
    grown = await import_sessions(store, tmp_path)
    (g,) = grown.threads
    assert g.info.id == t.info.id and g.added == 2 and g.info.head_seq == 6
    assert len(await store.list_threads()) == 1
    totals = await store.usage.totals(thread_id=t.info.id)
    assert totals[0].usage.input_tokens == 100 + 10 + 10
    priced = cost_usd("claude-sonnet-4-5-20250929", totals[0].usage)
    assert priced > 0 and totals[0].cost_usd == pytest.approx(priced)


async def test_reimport_after_a_rewind_forks_and_keeps_the_old_main(
    tmp_path: Path, store: Store
) -> None:
    s = ClaudeSession(tmp_path)
    s.user("q")
    s.text("a", msg_id="a1")
    s.user("try one")
    s.text("answer one", msg_id="a2")
    s.write()
    (main,) = (await import_sessions(store, tmp_path)).threads
    s.user("try two", parent=_uuid_of(s, 2))
    s.text("answer two", msg_id="a3")
    s.write()
    again = await import_sessions(store, tmp_path)
    threads = await store.list_threads(oldest_first=True)
    assert len(threads) == 2
    fork = threads[1]
    assert fork.forked_from is not None and fork.forked_from.thread_id == main.info.id
    assert [m.text for m in await store.messages(fork.id)][2:] == ["try two", "answer two"]
    assert [m.text for m in await store.messages(main.info.id)][2:] == ["try one", "answer one"]
    assert len((await import_sessions(store, tmp_path)).threads) == 2
    assert len(await store.list_threads()) == 2
    assert again.threads


@pytest.mark.parametrize(
    "ids",
    [
        ("aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"),
        # the file going on sorts first: a file at a time, the import puts it after its origin
        ("bbbbbbbb-0000-4000-8000-000000000002", "aaaaaaaa-0000-4000-8000-000000000001"),
    ],
    ids=["in-order", "continuation-sorts-first"],
)
async def test_compaction_continuing_in_a_new_file_forks_from_the_old_one(
    tmp_path: Path, store: Store, ids: tuple[str, str]
) -> None:
    old = ClaudeSession(tmp_path, ids[0])
    old.user("long work")
    old.call("tu1", "Bash", {"command": "make"}, msg_id="m1")
    old.result("tu1", old.tool_output("tu1", "built\n" * 1000))
    old.text("step one", msg_id="m2")
    old.write()
    new = ClaudeSession(tmp_path, ids[1])
    new.last = old.last
    new.compact("Summary: step one is done")
    new.user("go on")
    new.text("step two", msg_id="m3")
    new.write()
    report = await import_sessions(store, tmp_path)
    by_id = {w.source["session_id"]: w for w in report.threads}
    first, second = by_id[old.session_id], by_id[new.session_id]
    assert second.info.forked_from is not None
    assert (second.info.forked_from.thread_id, second.info.forked_from.at) == (first.info.id, 4)
    texts = [m.text for m in await store.messages(second.info.id)]
    assert texts[0] == "long work" and texts[3] == "step one"
    assert texts[4].startswith(COMPACTION_MARK)
    assert texts[5:] == ["go on", "step two"]
    again = await import_sessions(store, tmp_path)
    assert sum(w.added for w in again.threads) == 0
    assert len(await store.list_threads()) == 2
    new.user("and now?")  # only the new file grows: the old one is read again to link it
    new.text("step three", msg_id="m4")
    new.write()
    grown = await import_sessions(store, tmp_path)
    assert {w.info.id: w.added for w in grown.threads} == {first.info.id: 0, second.info.id: 2}


def test_progress_lines_in_the_chain_neither_break_it_nor_lead(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path)
    s.user("run the hook")
    s.entry("progress", data={"type": "hook_progress"})  # a link of the chain
    s.text("hooked", msg_id="a1")
    answer = s.last
    s.user("more")
    s.text("done", msg_id="a2")
    s.entry("progress", parent=answer, data={"type": "hook_progress"})  # newest, off the line
    s.write()
    (sess,), _ = parse(tmp_path)
    assert [m.text for m in sess.branches[0].messages] == ["run the hook", "hooked", "more", "done"]
    assert sess.source["unmodeled"]["line:progress"] == 2


async def test_a_tool_results_symlink_out_of_the_session_is_not_followed(
    tmp_path: Path, store: Store
) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("not for the transcript")
    s = ClaudeSession(tmp_path / "p")
    s.user("go")
    s.call("tu1", "Bash", {"command": "x"}, msg_id="m1")
    marker = s.tool_output("tu1", "whole")
    (s.dir / "tool-results" / "tu1.txt").unlink()
    (s.dir / "tool-results" / "tu1.txt").symlink_to(secret)
    s.result("tu1", marker.replace(str(s.dir / "tool-results" / "tu1.txt"), str(secret)))
    s.write()
    report = await import_sessions(store, tmp_path / "p")
    msgs = await store.messages(report.threads[0].info.id)
    text = msgs[2].tool_results()[0].text
    assert "not for the transcript" not in text and "<persisted-output>" in text
    assert report.threads[0].source["unmodeled"]["persisted output missing"] == 1


def test_title_from_a_summary_of_this_file_only(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path)
    s.raw({"type": "summary", "summary": "Another session's summary", "leafUuid": "not-here"})
    s.user("hello there")
    leaf = s.text("hi", msg_id="a1")
    s.raw({"type": "summary", "summary": "Greetings exchanged", "leafUuid": leaf})
    s.write()
    (sess,), _ = parse(tmp_path)
    assert sess.title == "Greetings exchanged"
    s.lines.pop()
    s.write()
    (sess,), _ = parse(tmp_path)
    assert sess.title == "hello there"


async def test_hostile_lines_are_skipped_or_cleaned_and_the_chain_holds(
    tmp_path: Path, store: Store
) -> None:
    s = ClaudeSession(tmp_path)
    s.user("bad \ud800 text")  # a lone surrogate, escaped in the JSON: UTF-8 cannot hold it
    deep: list[object] = []
    for _ in range(500):
        deep = [deep]
    s.call("t1", "Bash", {"x": deep}, msg_id="m1")  # nested too deeply to store: skipped
    s.result("t1", "ok")  # its parent line is gone: it hangs on the line before
    s.text("fine", msg_id="m2")
    s.write()
    report = await import_sessions(store, tmp_path)
    assert report.skipped == 1
    (t,) = report.threads
    msgs = await store.messages(t.info.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[0].text == "bad ? text\n[tool result for call t1]\nok"
    assert t.source["unmodeled"]["parent line missing"] == 1


async def test_unchanged_files_are_not_read_again(tmp_path: Path, store: Store) -> None:
    s = basic(tmp_path)
    sub = s.subagent("a1", "tu1")
    sub.user("look")
    sub.text("looked", msg_id="s1")
    s.write()
    first = await import_sessions(store, tmp_path)
    again = await import_sessions(store, tmp_path)
    assert again.files == 0 and again.unchanged == [str(s.path), str(sub.path)]
    assert sorted(w.info.id for w in again.threads) == sorted(w.info.id for w in first.threads)
    assert all(w.added == 0 for w in again.threads)
    sub.user("one more")  # only the subagent grew: its session is read again
    sub.text("done", msg_id="s2")
    sub.write()
    grown = await import_sessions(store, tmp_path)
    assert grown.files == 1 and not grown.unchanged
    assert sorted(w.added for w in grown.threads) == [0, 2]


def test_a_turn_split_around_its_own_results_is_folded_back(tmp_path: Path) -> None:
    s = ClaudeSession(tmp_path)
    s.user("two things")
    s.call("tuA", "Bash", {"command": "a"}, msg_id="m1")
    s.result("tuA", "did a")  # Claude Code writes a result as soon as its call is done...
    s.call("tuB", "Bash", {"command": "b"}, msg_id="m1")  # ...before the turn's next call
    s.result("tuB", "did b")
    s.text("both done", msg_id="m2")
    s.write()
    (sess,), _ = parse(tmp_path)
    msgs = sess.branches[0].messages
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert [b.id for b in msgs[1].tool_uses()] == ["tuA", "tuB"]
    assert [r.text for r in msgs[2].tool_results()] == ["did a", "did b"]


async def test_an_older_agent_file_beside_the_sessions_is_a_subagent(
    tmp_path: Path, store: Store
) -> None:
    s = basic(tmp_path)
    s.write()
    old = ClaudeSession(tmp_path, s.session_id, file=tmp_path / "agent-3f2a1b.jsonl")
    old.user("look around", isSidechain=True, agentId="3f2a1b")
    old.text("looked", msg_id="o1")
    old.write()
    main, worker = (await import_sessions(store, tmp_path)).threads
    assert worker.info.kind == Kind.WORKER and worker.info.parent_id == main.info.id
    assert worker.source["session_id"] == f"{s.session_id}/3f2a1b"
