"""The fault-injection suite: ``python -m pytest tests/faults`` runs it alone.

``THREADLOOM_FAULT_TRIALS`` sets the number of SIGKILL trials (default 30, the size CI runs;
``THREADLOOM_FAULT_TRIALS=100`` or more for a thorough run) and ``THREADLOOM_FAULT_SEED`` the
random seed (default: a fresh one, printed in the report of a failing trial).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from store import Store, ToolResultBlock, ToolUseBlock
from tests.e2e.conftest import env  # noqa: F401  (the end-to-end fixture, shared)

T = TypeVar("T")


def trials() -> int:
    return max(1, int(os.environ.get("THREADLOOM_FAULT_TRIALS", "12")))


def seed() -> int:
    value = os.environ.get("THREADLOOM_FAULT_SEED")
    return int(value) if value else random.SystemRandom().randrange(1 << 30)


def integrity(db: Path) -> str:
    """``PRAGMA integrity_check`` on a file the crashed process left (its WAL included)."""
    con = sqlite3.connect(db, timeout=30)
    try:
        rows = con.execute("PRAGMA integrity_check").fetchall()
        fk = con.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        con.close()
    text = "; ".join(str(r[0]) for r in rows)
    return text if not fk else f"{text}; foreign keys: {fk[:5]}"


def with_store(db: Path, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def go() -> T:
        store = await Store.open(str(db))
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


async def unpaired(store: Store, job_id: str) -> list[str]:
    """Tool calls of the job that are not answered by exactly their results in the next
    message (SPEC §Threads 3); a trailing unanswered call of a running thread does not count."""
    bad = []
    for t in await store.job_tree(job_id):
        msgs = await store.messages(t.id)
        for i, m in enumerate(msgs):
            uses = [b.id for b in m.content if isinstance(b, ToolUseBlock)]
            if not uses:
                continue
            if i + 1 == len(msgs):
                bad.append(f"{t.ref}#{m.seq} unanswered")
                continue
            got = [b.tool_use_id for b in msgs[i + 1].content if isinstance(b, ToolResultBlock)]
            if sorted(got) != sorted(uses):
                bad.append(f"{t.ref}#{m.seq} answered by {got}, not {uses}")
    return bad


def reported_turns(log_dir: Path) -> set[tuple[str, int]]:
    """(thread ref, seq) of every ``turn.stored`` event in the job logs: the process writes
    that event after the turn's transaction committed, so each one was *reported committed*.
    A line cut short by the kill is ignored (it was not fully reported)."""
    out: set[tuple[str, int]] = set()
    if not log_dir.is_dir():
        return out
    for path in log_dir.glob("*.jsonl"):
        for line in path.read_text("utf-8", "replace").splitlines():
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "turn.stored":
                out.add((str(event["thread"]), int(event["seq"])))
    return out


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The escape corpus's counts, as JSON, when it ran (``test_escape_corpus.py``)."""
    from tests.faults import _corpus

    if _corpus.RESULTS:
        terminalreporter.write_line("escape corpus: " + json.dumps(_corpus.summary()))
