"""The live updates of running threads' pages: every event stream fed by one poller, and
bounded.

A page of a running thread follows it through server-sent events (``/t/T-…/events``). The runner
may be another process, so there is nothing in-process to wait on: the store must be polled.
One ``Streams`` per server does it for every stream: a single task reads each watched thread's
row once every ``POLL_S`` (one indexed read per *thread*, however many pages follow it) and
wakes the streams of the threads that changed; it runs only while some stream is open.

The streams are bounded, so no number of open pages (or a script opening them) can pile up
connections and reads: at most ``MAX_PER_THREAD`` on one thread (beyond: 429) and
``MAX_STREAMS`` in all (beyond: 503), each refused before it starts, with a page saying why.
A refused EventSource does not retry (a non-200 answer ends it); the page stays readable, and a
reload follows again once a stream is free.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ..logging import get_logger

if TYPE_CHECKING:
    from store import Store, ThreadInfo

POLL_S = 0.25
MAX_STREAMS = 64
"""Event streams open at once, in all."""
MAX_PER_THREAD = 8
"""Event streams open at once on one thread (its page in a few tabs)."""

log = get_logger(__name__)


class TooManyStreams(Exception):
    """A stream refused: ``status`` 429 (too many on this thread) or 503 (too many in all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Streams:
    """The event streams of one server: their bounds and the one poller that feeds them."""

    def __init__(
        self,
        store: Store,
        *,
        max_streams: int = MAX_STREAMS,
        max_per_thread: int = MAX_PER_THREAD,
        poll_s: float = POLL_S,
    ) -> None:
        self.store = store
        self.max_streams = max_streams
        self.max_per_thread = max_per_thread
        self.poll_s = poll_s
        self.open: dict[str, int] = {}
        """thread id → streams open on it."""
        self.latest: dict[str, ThreadInfo] = {}
        self.version: dict[str, int] = {}
        """thread id → how many changes of its row the poller has seen."""
        self.failed: dict[str, BaseException] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._poller: asyncio.Task[None] | None = None
        self.pollers_started = 0
        self.rounds = 0
        """Rounds the poller has made (each reads every watched thread's row once)."""

    @property
    def total(self) -> int:
        return sum(self.open.values())

    def acquire(self, thread_id: str, ref: str) -> None:
        """Count a new stream on ``thread_id``, or refuse it (``TooManyStreams``)."""
        if self.open.get(thread_id, 0) >= self.max_per_thread:
            raise TooManyStreams(
                429,
                f"{ref} is already followed by {self.max_per_thread} live pages (the most "
                "one thread may have): close one, or reload this page later",
            )
        if self.total >= self.max_streams:
            raise TooManyStreams(
                503,
                f"this server already follows {self.max_streams} live pages (the most it "
                "serves at once): close some, or reload this page later",
            )
        self.open[thread_id] = self.open.get(thread_id, 0) + 1
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())
            self.pollers_started += 1

    def release(self, thread_id: str) -> None:
        n = self.open.get(thread_id, 0) - 1
        if n > 0:
            self.open[thread_id] = n
            return
        self.open.pop(thread_id, None)
        self.latest.pop(thread_id, None)
        self.version.pop(thread_id, None)
        self.failed.pop(thread_id, None)
        event = self._changed.pop(thread_id, None)
        if event is not None:
            event.set()

    async def changed(self, thread_id: str, seen: int) -> tuple[int, ThreadInfo]:
        """(version, row) of the thread once the poller has read a version newer than ``seen``
        (0: any; the stream's first)."""
        while True:
            if thread_id in self.failed:
                raise self.failed[thread_id]
            now = self.latest.get(thread_id)
            version = self.version.get(thread_id, 0)
            if now is not None and version > seen:
                return version, now
            event = self._changed.setdefault(thread_id, asyncio.Event())
            await event.wait()

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def _poll(self) -> None:
        while self.open:
            for thread_id in list(self.open):
                try:
                    now = await self.store.get_thread(thread_id)
                except Exception as exc:  # the thread or the database gone: its streams end
                    log.warning("web.events_poll_failed", thread=thread_id, error=str(exc))
                    self.failed[thread_id] = exc
                    now = None
                if thread_id not in self.open:
                    continue
                if now is not None:
                    old = self.latest.get(thread_id)
                    if old is not None and (old.head_seq, old.status) == (now.head_seq, now.status):
                        continue
                    self.latest[thread_id] = now
                    self.version[thread_id] = self.version.get(thread_id, 0) + 1
                event = self._changed.pop(thread_id, None)
                if event is not None:
                    event.set()
            self.rounds += 1
            await asyncio.sleep(self.poll_s)
