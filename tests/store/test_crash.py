"""Crash safety: a process appending in a loop is killed (SIGKILL) at random moments; every
append it saw committed is there afterwards, nothing is torn, and the database is intact."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import sqlite3
import time
from pathlib import Path

from store import Store

from .helpers import assistant, user

TRIALS = 50
MAX_KILL_DELAY_S = 0.08


def _child(path: str, tid: str, trial: int, out: int) -> None:
    """Runs in a forked child: appends (user, assistant) pairs forever, writing ``r`` once the
    store is open and then the last seq of each append once its await has returned."""

    async def main() -> None:
        store = await Store.open(path)
        os.write(out, b"r\n")
        n = 0
        while True:
            stored = await store.append(
                tid, [user(f"trial {trial} append {n}"), assistant(f"reply {trial}.{n}")]
            )
            os.write(out, f"{stored[-1].seq} {trial} {n}\n".encode())
            n += 1

    asyncio.run(main())


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode()


async def _create(path: str) -> str:
    store = await Store.open(path)
    try:
        return (await store.create_thread(kind="worker", title="crash target")).id
    finally:
        await store.close()


async def _history(path: str) -> tuple[int, list[tuple[int, str, str]]]:
    store = await Store.open(path)
    try:
        info = (await store.list_threads())[0]
        msgs = await store.messages(info.id)
        return info.head_seq, [(m.seq, m.role, m.text) for m in msgs]
    finally:
        await store.close()


def test_appends_reported_committed_survive_sigkill_at_random_moments(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    tid = asyncio.run(_create(path))
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(1234)
    reported: dict[int, tuple[int, int]] = {}  # seq → (trial, n)
    for trial in range(TRIALS):
        r, w = os.pipe()
        child = ctx.Process(target=_child, args=(path, tid, trial, w), daemon=True)
        child.start()
        os.close(w)
        try:
            assert os.read(r, 2) == b"r\n"  # the store is open: now kill it somewhere
            time.sleep(rng.uniform(0, MAX_KILL_DELAY_S))  # the random moment, not a wait
            assert child.pid is not None
            os.kill(child.pid, signal.SIGKILL)
            child.join()
            assert child.exitcode == -signal.SIGKILL
            for line in _read_all(r).splitlines():
                seq, t, n = (int(x) for x in line.split())
                reported[seq] = (t, n)
        finally:
            os.close(r)

    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # the full-text index was written in the same transactions: it agrees with the rows
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        fts, rows = conn.execute(
            "SELECT (SELECT count(*) FROM messages_fts), (SELECT count(*) FROM messages)"
        ).fetchone()
        assert fts == rows
    finally:
        conn.close()

    head, history = asyncio.run(_history(path))
    assert [seq for seq, _, _ in history] == list(range(1, head + 1))  # no gap, no duplicate
    assert head % 2 == 0  # appends of two messages are never torn
    for i in range(0, head, 2):
        (_, role1, text1), (_, role2, text2) = history[i], history[i + 1]
        assert (role1, role2) == ("user", "assistant")
        trial, n = (int(x) for x in text1.removeprefix("trial ").split(" append "))
        assert text2 == f"reply {trial}.{n}"
    texts = {seq: text for seq, _, text in history}
    assert reported, "no child lived long enough to commit anything"
    for seq, (trial, n) in reported.items():
        assert texts.get(seq) == f"reply {trial}.{n}", f"append reported committed is lost: #{seq}"
    # an append may be committed and not reported (killed between the two): that is allowed;
    # what is never allowed is the reverse, checked above
