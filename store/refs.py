"""Time-sortable thread ids and ``T-…`` refs.

An id is 26 characters of lowercase Crockford base32: 10 for the millisecond timestamp, 16 of
randomness (80 bits). Ids made in one process are strictly increasing even within a millisecond,
so sorting by id is sorting by creation time.
"""

from __future__ import annotations

import bisect
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from .errors import RefSyntaxError, ThreadNotFound

if TYPE_CHECKING:
    from .models import ThreadInfo

__all__ = [
    "REF_IN_TEXT",
    "ResolvedRef",
    "ThreadRef",
    "format_ref",
    "new_id",
    "shortest_refs",
]


_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_RANDOM_BITS = 80
_lock = threading.Lock()
_last: tuple[int, int] = (0, 0)

ID_LENGTH = 26
MIN_PREFIX = 4
_ID_CHARS = re.compile(r"^[0-9a-hjkmnp-tv-z]+$")
ELLIPSES = ("…", "...")
"""What marks a ref by the end of its id: ``T-…x2p4`` or ``T-...x2p4`` (SPEC "Refs by their
end"). Printed as the one character ``…``."""
REF_IN_TEXT = re.compile(r"T-(?:…|\.\.\.)?[0-9a-hjkmnp-tv-z]{4,26}(?:#[0-9]+(?:-[0-9]*)?)?")
"""A ref as written in free text (a citation in an answer, a ref in a message): ``T-<id>``, a
prefix, or ``T-…<end>``, with its ``#n``, ``#a-b`` or ``#a-`` anchor."""


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def id_at(when: datetime) -> str:
    """A new id that sorts at ``when`` (a thread imported with its source's time: listings,
    which go by id, then sort it where it happened), its random part fresh."""
    ms = int(when.timestamp() * 1000)
    rand = int.from_bytes(os.urandom(10), "big") & ((1 << _RANDOM_BITS) - 1)
    return _encode(max(ms, 0), 10) + _encode(rand, 16)


def new_id() -> str:
    """A new time-sortable id, monotonic within this process."""
    global _last
    with _lock:
        ms = time.time_ns() // 1_000_000
        last_ms, last_rand = _last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # leave headroom for increments
        _last = (ms, rand)
    return _encode(ms, 10) + _encode(rand & ((1 << _RANDOM_BITS) - 1), 16)


def _after_fork_in_child() -> None:
    # a forked child must not continue its parent's sequence: within the same millisecond both
    # would make the very same "next" id; draw fresh randomness instead
    global _last, _lock
    _last, _lock = (0, 0), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True, slots=True)
class ThreadRef:
    """``T-<id>``, optionally with a message anchor: ``#7``, ``#7-12`` or ``#7-``.

    ``id`` may be a prefix of a full id (at least 4 characters), or with ``suffix`` the end of
    one (``T-…x2p4``, also spelt ``T-...x2p4``): the store resolves it. Sibling workers' ids
    share their first characters (the same millisecond) and differ at the end, so the end is
    what tells them apart. ``start``/``end`` are 1-based and inclusive; ``end=None`` with
    ``open_end`` means "to the end".
    """

    id: str
    start: int | None = None
    end: int | None = None
    open_end: bool = False
    suffix: bool = False

    @classmethod
    def parse(cls, text: str) -> ThreadRef:
        raw = text.strip()
        body = raw[2:] if raw[:2] in ("T-", "t-") else raw
        mark = next((e for e in ELLIPSES if body.startswith(e)), "")
        body = body[len(mark) :]
        ident, sep, anchor = body.partition("#")
        ident = ident.lower()
        if len(ident) < MIN_PREFIX or len(ident) > ID_LENGTH or not _ID_CHARS.match(ident):
            raise RefSyntaxError(
                f"bad ref {_shown(text)}: expected T-<id> with at least {MIN_PREFIX} id characters"
                " (0-9, a-z without i, l, o, u) from its start, or T-…<id> from its end,"
                " optionally #N, #A-B or #A-"
            )
        # the whole id given from its end is the whole id
        suffix = bool(mark) and len(ident) < ID_LENGTH
        if not sep:
            return cls(ident, suffix=suffix)
        # ASCII digits only: ``\d`` would take ``#٣`` (an Arabic-Indic three) for ``#3``
        m = re.fullmatch(r"([0-9]+)(?:(-)([0-9]+)?)?", anchor)
        if not m:
            raise RefSyntaxError(
                f"bad ref {_shown(text)}: the anchor must be #N, #A-B or #A- (ASCII digits)"
            )
        if any(len(g) > MAX_SEQ_DIGITS for g in (m.group(1), m.group(3)) if g):
            raise RefSyntaxError(
                f"bad ref {_shown(text)}: a message number has at most {MAX_SEQ_DIGITS} digits"
            )
        start = int(m.group(1))
        if m.group(2) is None:
            end: int | None = start
            open_end = False
        elif m.group(3) is None:
            end, open_end = None, True
        else:
            end, open_end = int(m.group(3)), False
        if start < 1 or (end is not None and end < start):
            raise RefSyntaxError(f"bad ref {_shown(text)}: message numbers start at 1 and A <= B")
        return cls(ident, start, end, open_end, suffix)

    @property
    def has_anchor(self) -> bool:
        return self.start is not None

    @property
    def thread(self) -> ThreadRef:
        """The same ref without its anchor."""
        return ThreadRef(self.id, suffix=self.suffix)

    def with_id(self, full_id: str) -> ThreadRef:
        return ThreadRef(full_id, self.start, self.end, self.open_end)

    def matches(self, full_id: str) -> bool:
        """Whether this ref names the thread ``full_id`` (its id, its start or its end)."""
        return full_id.endswith(self.id) if self.suffix else full_id.startswith(self.id)

    @property
    def shown_id(self) -> str:
        """The id part as written in a ref: ``01m9…`` (a prefix, or the id) or ``…x2p4``."""
        return ("…" + self.id) if self.suffix else self.id

    def __str__(self) -> str:
        return format_ref(
            self.shown_id, self.start, None if self.open_end else self.end, self.open_end
        )


MAX_SEQ_DIGITS = 18
"""A message number longer than this is refused as syntax (it could never name a message)."""


def _shown(text: str, limit: int = 80) -> str:
    """A bad ref as quoted in an error: repr'd, and cut so a 5,000-character ref stays one line."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + f"… ({len(text)} characters)"


def format_ref(
    thread_id: str, start: int | None = None, end: int | None = None, open_end: bool = False
) -> str:
    """``T-<id>``, ``T-<id>#n``, ``T-<id>#a-b`` or ``T-<id>#a-``."""
    if start is None:
        return f"T-{thread_id}"
    if open_end:
        return f"T-{thread_id}#{start}-"
    if end is None or end == start:
        return f"T-{thread_id}#{start}"
    return f"T-{thread_id}#{start}-{end}"


def shortest_refs(wanted: Iterable[str], every_id: Iterable[str]) -> dict[str, str]:
    """The shortest ref by its end (``T-…x2p4``, at least ``MIN_PREFIX`` characters) that names
    each of ``wanted`` and no other of ``every_id`` (which holds them): what a table prints when
    it has no room for a whole ref (SPEC "Refs by their end"). Ids sorted by their reversed text
    put the ids sharing the longest end next to each other, so each needs one character more
    than it shares with its neighbours."""
    ends = sorted({i[::-1] for i in every_id})
    out: dict[str, str] = {}
    for full in wanted:
        rev = full[::-1]
        at = bisect.bisect_left(ends, rev)
        shared = 0
        for j in (at - 1, at + 1 if at < len(ends) and ends[at] == rev else at):
            if 0 <= j < len(ends) and ends[j] != rev:
                # a string's prefix, which is what commonprefix compares (not paths)
                shared = max(shared, len(os.path.commonprefix([ends[j], rev])))  # noqa: RUF071
        n = min(max(shared + 1, MIN_PREFIX), len(full))
        out[full] = format_ref(full) if n >= len(full) else f"T-…{full[-n:]}"
    return out


def is_full_id(ident: str) -> bool:
    return len(ident) == ID_LENGTH and bool(_ID_CHARS.match(ident))


def prefix_upper(prefix: str) -> str:
    """The exclusive upper bound of the ids starting with ``prefix`` (non-empty): the prefix
    with its last character incremented, so ``prefix <= id < upper`` is a byte-wise prefix
    match that an index serves (``store._threads.id_prefix_condition`` builds the same range)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def anchor_range(ref: ThreadRef, thread_id: str, head_seq: int) -> tuple[int | None, int | None]:
    """(start, end) of ``ref``'s anchor on a thread of ``head_seq`` messages, clamped as
    ``Store.resolve`` does: (None, None) without an anchor; ``#A-`` runs to the head; a start
    or an end past the head is ``ThreadNotFound`` naming the thread's size."""
    if ref.start is None:
        return None, None
    if ref.start > head_seq:
        raise ThreadNotFound(
            f"{format_ref(thread_id, ref.start)}: the thread has {head_seq} messages"
        )
    if ref.end is not None and not ref.open_end and ref.end > head_seq:
        raise ThreadNotFound(
            f"{format_ref(thread_id, ref.start, ref.end)}: the thread has {head_seq} messages"
        )
    end = head_seq if ref.open_end or ref.end is None else min(ref.end, head_seq)
    return ref.start, end


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """A ref resolved to its thread (``Store.resolve``); ``start``/``end`` are clamped to the
    thread's messages."""

    thread: ThreadInfo
    start: int | None
    end: int | None

    @property
    def ref(self) -> str:
        return format_ref(self.thread.id, self.start, self.end)
