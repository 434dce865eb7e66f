"""A separate process for the multi-process store tests: ``python -m tests.store._proc``.

It prints ``ready`` once imported, then answers one JSON line per JSON command read from stdin,
so a test can start several of these and release them at the same moment by writing a command
to each (the interpreter start-up, the slow part, is paid once per process, not per trial).

Commands:
- ``{"op": "open", "url": U}`` → opens (and so migrates) the store at U, answers
  ``{"ok": true, "revision": R}`` or ``{"ok": false, "error": "Type: message"}``.
- ``{"op": "write", "url": U, "writers": W, "appends": N, "readers": R, "pause": P}`` → W tasks
  each create a thread and append N messages to it one by one, reading the thread's recent
  history back after each append (as a worker loop does before its next model call), while R
  tasks keep listing threads and reading their tails, pausing P seconds between rounds (a
  monitor refreshing); answers ``{"ok": true, "threads": {id: N}, "errors": [...], "reads": n}``.
- ``{"op": "quit"}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import alembic.command  # noqa: F401  (imported up front, so that racing opens start together)

from store import NewMessage, Store


def _error(err: BaseException) -> str:
    """One line: the store error, and below it the driver's (statement, SQLite error name)."""
    text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    cause = err.__cause__
    orig = getattr(cause, "orig", None)
    if cause is not None:
        statement = " ".join(str(getattr(cause, "statement", "") or "").split())[:80]
        text += f" [{getattr(orig, 'sqlite_errorname', type(orig).__name__)} on {statement!r}]"
    return text


async def _open(url: str) -> dict[str, Any]:
    try:
        store = await Store.open(url)
    except Exception as err:
        return {"ok": False, "error": _error(err)}
    try:
        row = await store.db.read(lambda tx: tx.fetchone("SELECT version_num FROM alembic_version"))
        return {"ok": True, "revision": None if row is None else row[0]}
    finally:
        await store.close()


async def _write(
    url: str, writers: int, appends: int, readers: int, pause: float
) -> dict[str, Any]:
    store = await Store.open(url)
    errors: list[str] = []
    counts: dict[str, int] = {}
    reads = 0
    finished = asyncio.Event()

    async def writer(i: int) -> None:
        try:
            t = await store.create_thread(kind="worker", title=f"writer {i}")
            counts[t.id] = 0
            for n in range(appends):
                role = "user" if n % 2 == 0 else "assistant"
                await store.append(t.id, NewMessage(role=role, content=f"{t.id} message {n + 1}"))
                counts[t.id] += 1
                await store.messages(t.id, start=max(1, n - 2))
        except Exception as err:
            errors.append(_error(err))

    async def reader() -> None:
        nonlocal reads
        try:
            while True:  # a round after the writers end too: on a loaded machine the first
                # rounds may all come before any thread exists, and the last after every append
                last = finished.is_set()
                for t in await store.list_threads(limit=5):
                    await store.messages(t.id, start=max(1, t.head_seq - 3))
                    reads += 1
                if last:
                    break
                await asyncio.sleep(pause)
        except Exception as err:
            errors.append(_error(err))

    read_tasks = [asyncio.create_task(reader()) for _ in range(readers)]
    await asyncio.gather(*(writer(i) for i in range(writers)))
    finished.set()
    await asyncio.gather(*read_tasks)
    await store.close()
    return {"ok": True, "threads": counts, "errors": errors, "reads": reads}


def main() -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        if cmd["op"] == "open":
            answer = asyncio.run(_open(cmd["url"]))
        elif cmd["op"] == "write":
            answer = asyncio.run(
                _write(cmd["url"], cmd["writers"], cmd["appends"], cmd["readers"], cmd["pause"])
            )
        else:
            answer = {"ok": False, "error": f"unknown op {cmd['op']!r}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
