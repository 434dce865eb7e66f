"""Errors raised by the thread store.

    StoreError
    ├── RefError
    │   ├── RefSyntaxError         a ref that does not parse (bad input)
    │   ├── ThreadNotFound         no thread, or no message, has that id / prefix / seq
    │   └── AmbiguousRef           a prefix that names several threads (lists the candidates)
    ├── InvariantError             an append or fork that would break SPEC §Threads
    │   └── ForkPointError         a fork point between a tool_use and its result, or out of range
    ├── StatusError                a transition the thread state machine does not allow
    ├── ConcurrencyError           a stale version: someone else wrote the thread first
    │   └── SourceTaken            a thread already stands for this source (another import)
    ├── LeaseHeld                  another runner owns the thread
    │   └── LeaseLost              an append by a runner whose lease expired or was taken over
    ├── DatabaseError              the database failed (translated from the driver at one boundary)
    │   ├── DatabaseUnavailable    it cannot be opened or reached
    │   └── DatabaseFull           the disk or the database's size limit is full
    ├── ImportFormatError          a transcript to import is malformed (names the line)
    └── SearchQueryError           a search query that cannot be run as given (too many words)

Nothing above the store ever sees a ``sqlalchemy`` or driver exception: ``store._engine`` translates
them into ``DatabaseError`` with ``raise … from exc``.
"""

from __future__ import annotations

__all__ = [
    "AmbiguousRef",
    "ConcurrencyError",
    "DatabaseError",
    "DatabaseFull",
    "DatabaseUnavailable",
    "ForkPointError",
    "ImportFormatError",
    "InvariantError",
    "LeaseHeld",
    "LeaseLost",
    "RefError",
    "RefSyntaxError",
    "SearchQueryError",
    "SourceTaken",
    "StatusError",
    "StoreError",
    "ThreadNotFound",
]


class StoreError(Exception):
    """Base of every error the store raises."""


class RefError(StoreError):
    pass


class RefSyntaxError(RefError, ValueError):
    pass


class ThreadNotFound(RefError, LookupError):
    pass


class AmbiguousRef(RefError, LookupError):
    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message)
        self.candidates = candidates


class InvariantError(StoreError, ValueError):
    pass


class ForkPointError(InvariantError):
    pass


class StatusError(StoreError):
    pass


class ConcurrencyError(StoreError):
    pass


class SourceTaken(ConcurrencyError):
    """A thread for this source (``source_key``) exists already — another import created it:
    ``thread_id`` is that thread."""

    def __init__(self, message: str, thread_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id


class LeaseHeld(StoreError):
    def __init__(self, message: str, owner: str | None) -> None:
        super().__init__(message)
        self.owner = owner


class LeaseLost(LeaseHeld):
    """The appending runner no longer holds the thread's lease (it expired or another runner
    took it over): nothing of that append is stored, and the runner must stop writing."""


class DatabaseError(StoreError):
    pass


class DatabaseUnavailable(DatabaseError):
    pass


class DatabaseFull(DatabaseError):
    pass


class ImportFormatError(StoreError, ValueError):
    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class SearchQueryError(StoreError, ValueError):
    """A search query that cannot be run as given: more different words or phrases than a
    search takes (each one ranks every hit again, so a pasted page would run for minutes)."""
