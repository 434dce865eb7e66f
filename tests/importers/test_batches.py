"""An import writes a file's sessions as it reads them (``batches``), and still writes each
session after the one it needs when the files come in the other order: a Codex fork or
subagent whose rollout sorts before its origin's, a Claude Code conversation that goes on in a
file sorting before the one it goes on from."""

from __future__ import annotations

from pathlib import Path

from orchestrator.importers import ImportReport, batches, import_sessions
from store import Kind, Store
from tests.importers.fixtures import CodexRollout

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
