"""The viewer's live event streams are bounded, per thread (429) and in all (503), give their
slot back when the page goes away, and are fed by one shared poller that reads each followed
thread once a round, however many pages follow it (600 streams used to be 600 poll loops).
A real uvicorn server on a loopback port, real HTTP clients, a real SQLite file."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.web import create_app
from orchestrator.web._live import MAX_PER_THREAD, MAX_STREAMS
from store import NewMessage, Status, Store


async def _build(path: Path, n: int) -> list[str]:
    async with await Store.open(str(path)) as store:
        refs = []
        for i in range(n):
            t = await store.create_thread(
                kind="worker",
                title=f"running {i}",
                status=Status.RUNNING,
                messages=[NewMessage.user("keep going")],
            )
            refs.append(t.ref)
        return refs


async def _append(path: Path, ref: str, text: str) -> None:
    async with await Store.open(str(path)) as store:
        info = (await store.resolve(ref)).thread
        await store.append(info.id, NewMessage.assistant(text))


def _until(what: Callable[[], bool], why: str) -> None:
    """Wait for ``what`` (a condition, not a duration: the deadline only ends a hung test)."""
    deadline = time.monotonic() + 30
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.02)


@contextmanager
def _server(
    db: Path, *, max_streams: int = MAX_STREAMS, max_streams_per_thread: int = MAX_PER_THREAD
) -> Iterator[tuple[str, Any]]:
    """The viewer over ``db`` on a loopback port, and its ``Streams``."""
    import uvicorn

    from orchestrator.exposure import bind

    app = create_app(
        str(db), max_streams=max_streams, max_streams_per_thread=max_streams_per_thread
    )
    sock = bind("127.0.0.1", 0, door="viewer")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    _until(lambda: server.started or not thread.is_alive(), "the viewer did not start")
    assert server.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app.app.state.streams  # type: ignore[attr-defined]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


class _Stream:
    """One open event stream (its headers read)."""

    def __init__(self, stack: ExitStack, client: httpx.Client, url: str) -> None:
        self.response = stack.enter_context(client.stream("GET", url))
        self.lines = self.response.iter_lines()

    def until(self, line: str) -> list[str]:
        seen = []
        for got in self.lines:
            seen.append(got)
            if got.startswith(line):
                return seen
        raise AssertionError(f"the stream ended before {line!r}: {seen}")


def _events(base: str, ref: str) -> str:
    return f"{base}/t/{ref}/events?after=1"


def test_streams_are_bounded_per_thread_and_in_all(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    a, b, c, d = asyncio.run(_build(db, 4))
    timeout = httpx.Timeout(30, read=30)
    with (
        _server(db, max_streams=5, max_streams_per_thread=2) as (base, streams),
        httpx.Client(timeout=timeout) as client,
        ExitStack() as stack,
    ):
        first = [_Stream(stack, client, _events(base, a)) for _ in range(2)]
        assert all(s.response.status_code == 200 for s in first)
        refused = client.get(_events(base, a))
        assert refused.status_code == 429
        assert "already followed by 2 live pages" in refused.text
        assert refused.headers["retry-after"]
        more = [_Stream(stack, client, _events(base, ref)) for ref in (b, b, c)]
        assert all(s.response.status_code == 200 for s in more)
        full = client.get(_events(base, d))
        assert full.status_code == 503 and "already follows 5 live pages" in full.text
        assert streams.total == 5

        first[0].response.close()  # a page closed: its slot comes back
        _until(lambda: streams.total == 4, "a closed stream kept its slot")
        again = _Stream(stack, client, _events(base, a))
        assert again.response.status_code == 200
        again.until("event: status")


def test_one_poller_feeds_every_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "t.db"
    a, b = asyncio.run(_build(db, 2))
    reads: Counter[str] = Counter()
    real = Store.get_thread

    async def counted(self: Store, thread_id: str, *args: Any, **kw: Any) -> Any:
        reads[thread_id] += 1
        return await real(self, thread_id, *args, **kw)

    monkeypatch.setattr(Store, "get_thread", counted)
    with (
        _server(db) as (base, streams),
        httpx.Client(timeout=httpx.Timeout(30, read=30)) as client,
        ExitStack() as stack,
    ):
        on_a = [_Stream(stack, client, _events(base, a)) for _ in range(6)]
        on_b = [_Stream(stack, client, _events(base, b)) for _ in range(6)]
        for s in on_a + on_b:
            s.until("event: status")  # every stream is live
        assert streams.pollers_started == 1
        before, rounds = sum(reads.values()), streams.rounds
        _until(lambda: streams.rounds >= rounds + 12, "the poller stopped")
        after, done = sum(reads.values()), streams.rounds
        # each round reads each of the two threads once: not once per stream (12 streams)
        assert after - before <= 2 * (done - rounds + 1)

        asyncio.run(_append(db, a, "news for every page of a"))
        for s in on_a:
            got = s.until('data: {"seq": 2')
            assert any("news for every page of a" in line for line in got)
        assert streams.pollers_started == 1
