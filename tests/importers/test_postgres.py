"""The same import on PostgreSQL: sessions, a rewind, a subagent, and a re-import that grows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from orchestrator.importers import import_sessions
from store import Kind, Store
from tests import pg
from tests.importers.fixtures import ClaudeSession, CodexRollout


def test_import_and_reimport_on_postgresql(tmp_path: Path) -> None:
    pg.require()  # skipped without a server, except under CI
    asyncio.run(_import_and_reimport(tmp_path))


async def _import_and_reimport(tmp_path: Path) -> None:
    db = await pg.create_database(pg.new_name("import"))
    try:
        store = await Store.open(db.url)
        try:
            s = ClaudeSession(tmp_path / "claude")
            s.user("q")
            s.text("a", msg_id="a1")
            s.user("first try")
            s.text("abandoned", msg_id="a2")
            s.user("second try", parent=json.loads(s.lines[1])["uuid"])
            s.call("task", "Task", {"description": "dig"}, msg_id="a3")
            s.result("task", "dug")
            sub = s.subagent("x1", "task")
            sub.user("dig")
            sub.text("dug", msg_id="s1")
            s.write()
            r = CodexRollout(tmp_path / "codex")
            r.user("hello")
            r.say("hi")
            r.tokens(100, 10, cached=50)
            r.write()
            first = await import_sessions(store, tmp_path)
            kinds = sorted(
                (str(w.info.kind), w.info.forked_from is not None) for w in first.threads
            )
            assert kinds == [("lead", False), ("lead", False), ("lead", True), ("worker", False)]
            worker = next(w for w in first.threads if w.info.kind == Kind.WORKER)
            assert worker.info.parent_id is not None
            s.text("more", msg_id="a4")
            s.write()
            again = await import_sessions(store, tmp_path)
            assert sorted(w.added for w in again.threads) == [0, 0, 0, 1]
            assert len(await store.list_threads()) == 4
        finally:
            await store.close()
    finally:
        await pg.drop_database(db.name)
