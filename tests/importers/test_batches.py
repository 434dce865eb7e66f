"""An import writes a file's sessions as it reads them (``batches``), and still writes each
session after the one it needs when the files come in the other order: a Codex fork or
subagent whose rollout sorts before its origin's, a Claude Code conversation that goes on in a
file sorting before the one it goes on from."""

from __future__ import annotations

from pathlib import Path

from orchestrator.importers import COMPACTION_MARK, ImportReport, batches, import_sessions
from store import Kind, Store
from tests.importers.fixtures import ClaudeSession, CodexRollout

ORIGIN = "019a0000-aaaa-7bbb-8ccc-000000000009"  # sorts after the fork and the subagent


async def test_a_codex_fork_and_subagent_sorting_before_their_origin(
    tmp_path: Path, store: Store
) -> None:
    origin = CodexRollout(tmp_path, ORIGIN)
    origin.user("list the files")
    origin.say("two files")
    origin.write()
    fork = CodexRollout(tmp_path, "019a0000-aaaa-7bbb-8ccc-000000000001", forked_from=ORIGIN)
    fork.user("list the files")
    fork.say("two files")
    fork.user("and now in the fork")
    fork.say("forked reply")
    fork.write()
    sub = CodexRollout(tmp_path, "019a0000-aaaa-7bbb-8ccc-000000000002", parent_thread=ORIGIN)
    sub.user("explore the tests")
    sub.say("explored")
    sub.write()
    order = [s.key for batch in batches(tmp_path, "auto", ImportReport()) for s in batch]
    assert order == [f"codex:{ORIGIN}", f"codex:{fork.session_id}", f"codex:{sub.session_id}"]
    report = await import_sessions(store, tmp_path)
    by_session = {w.source["session_id"]: w for w in report.threads}
    main, forked = by_session[ORIGIN], by_session[fork.session_id]
    worker = by_session[sub.session_id]
    assert forked.info.forked_from is not None
    assert (forked.info.forked_from.thread_id, forked.info.forked_from.at) == (main.info.id, 2)
    assert forked.added == 2 and forked.created
    assert worker.info.kind == Kind.WORKER and worker.info.parent_id == main.info.id
    assert report.files == 3


async def test_a_conversation_going_on_in_a_file_sorting_first(
    tmp_path: Path, store: Store
) -> None:
    old = ClaudeSession(tmp_path, "bbbbbbbb-0000-4000-8000-000000000002")
    old.user("long work")
    old.call("tu1", "Bash", {"command": "make"}, msg_id="m1")
    old.result("tu1", "built")
    old.text("step one", msg_id="m2")
    old.write()
    new = ClaudeSession(tmp_path, "aaaaaaaa-0000-4000-8000-000000000001")
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
    assert len(await store.list_threads()) == 2
