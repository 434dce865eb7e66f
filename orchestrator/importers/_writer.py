"""Sessions into the store, incrementally and idempotently.

Every imported thread carries ``task.source`` = ``{"format", "session_id", "path", "key", …,
"imported": {"messages": n, "digest": d}}``: ``key`` names its source session and ``digest``
its whole visible history (``fingerprint`` of each message, in order). Importing a session
again places each of its branches against the threads of that key:

- a thread whose history is a prefix of the branch (its digest equals the branch's prefix
  digest) is extended with the rest: the common case, a session that grew; nothing stored is
  read back;
- otherwise (a rewind, an edit, a line rewritten in place) the histories are compared message
  by message and the branch becomes a fork at the longest history it shares with one of them
  (at the last valid fork point), or a thread of its own when it shares nothing;
- a branch whose messages are all stored already adds nothing.

Metadata follows the source: a thread's title is the session's (``imported.title``, with the
thread's own ``imported.suffix``, `` (rewound branch)`` …) and is renamed when the session is,
unless the title was given (``--title``) or is no longer the one the import wrote; a subagent
imported before the session that spawned it (``imported.parent_key``) is hung under that
session's thread when it comes (``Store.adopt``). The caller holds ``Store.exclusive("import")``
around a whole import, so two imports at once never both create what neither found.

Transcripts stay append-only: no message stored is ever changed. A session's usage rows go with
their assistant messages in the same appends (one ``Store.append`` per usage row, issued
together, so the store's group commit writes a thread's import in a transaction or two).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from store import Kind, NewMessage, SourceTaken, Store, ThreadInfo, UsageRecord, format_ref

from ..views import source_json
from ._draft import Branch, Session, common_prefix, fingerprint, fork_point, source_time


@dataclass
class Written:
    """One thread an import touched: ``added`` messages (0: it was already all there)."""

    info: ThreadInfo
    parent: str | None
    source: dict[str, Any]
    added: int
    created: bool


@dataclass
class _Known:
    info: ThreadInfo
    head: int
    digest: str | None
    prints: list[str] | None = None
    legacy: bool = False
    """Imported by an older ``MAPPING``: compared by ``fingerprint(outputs=False)``."""


MAPPING = 2
"""What a source line becomes, by version, kept with each import (``imported.mapping``): 2 stores
Codex's JSON-string outputs as text with their exit status, titles threads with the first
request a person wrote, keeps the source's times. A thread of an older mapping has its file
read again (its title follows the new rule) and is matched without its outputs' text, so it is
extended, not forked, where only the way its outputs were stored changed."""


@dataclass
class _Prints:
    prints: list[str]
    prefix: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, messages: Sequence[NewMessage]) -> _Prints:
        prints = [fingerprint(m) for m in messages]
        h = hashlib.sha256()
        prefix = [h.hexdigest()]
        for p in prints:
            h.update(p.encode("ascii"))
            prefix.append(h.hexdigest())
        return cls(prints, prefix)


class Writer:
    """Writes sessions into ``store``; ``title`` overrides the title of new main threads of
    lead sessions."""

    def __init__(self, store: Store, *, title: str | None = None) -> None:
        self.store = store
        self.title = title
        self._index: dict[str, list[_Known]] | None = None
        self._holding: list[_Known] = []  # those whose ``prints`` this write holds

    async def _known(self) -> dict[str, list[_Known]]:
        if self._index is None:
            index: dict[str, list[_Known]] = {}
            for t in await self.store.list_threads(oldest_first=True):
                found = _known_of(t)
                if found is not None:
                    index.setdefault(found[0], []).append(found[1])
            self._index = index
        return self._index

    async def write(self, sessions: Sequence[Session], *, adopt: bool = True) -> list[Written]:
        """Write ``sessions`` (parents and fork origins first, whatever the order given), then
        (``adopt``) hang orphans under their parents (``adopted``; an import writing a file at a
        time does that once, after the last). The histories compared while writing are let go
        after: memory holds what one call writes, not what an import wrote before."""
        out: list[Written] = []
        for s in _ordered(sessions):
            out.extend(await self.write_session(s))
        for k in self._holding:
            k.prints = None  # read back from the store if a later session needs them
        self._holding = []
        return await self.adopted(out) if adopt else out

    async def adopted(self, out: list[Written]) -> list[Written]:
        """``out`` and each thread adopted now (``_adopt_orphans``) that it does not hold."""
        seen = {w.info.id for w in out}
        more = [self._written(k, 0) for k in await self._adopt_orphans() if k.info.id not in seen]
        return out + more

    async def _adopt_orphans(self) -> list[_Known]:
        """Hang each thread whose spawning session was missing when it was written under that
        session's main thread, now that it is stored; the threads adopted."""
        index = await self._known()
        adopted = []
        for known in index.values():
            for k in known:
                imp = ((k.info.task or {}).get("source") or {}).get("imported") or {}
                parent_key = imp.get("parent_key")
                if k.info.parent_id is not None or k.info.forked_from is not None:
                    continue
                if not isinstance(parent_key, str) or not index.get(parent_key):
                    continue
                parent = index[parent_key][0].info
                if parent.id == k.info.id:
                    continue
                k.info = await self.store.adopt(k.info.id, parent.id)
                if k.info.parent_id is not None:
                    adopted.append(k)
        if adopted:  # their jobs moved: forks and children of theirs are in another job now
            for known in index.values():
                for k in known:
                    if k.info.job_id in {a.info.id for a in adopted} and k not in adopted:
                        k.info = await self.store.get_thread(k.info.id)
        return adopted

    async def write_session(self, s: Session) -> list[Written]:
        """Write one session's branches; when another import creates one of its threads
        first (``SourceTaken``: the database keeps one thread a source key), that import is
        writing the session: its thread is reported, and the rest left to it."""
        index = await self._known()
        known = index.setdefault(s.key, [])
        out: list[Written] = []
        for n, branch in enumerate(s.branches):
            try:
                written = await self._place(s, n, branch, known, index)
            except SourceTaken as taken:
                info = await self.store.get_thread(taken.thread_id)
                found = _known_of(info)
                k = found[1] if found is not None else _Known(info, -1, None)
                known.append(k)
                out.append(self._written(k, 0))
                break
            if written is not None:
                out.append(written)
        return out

    async def _place(
        self,
        s: Session,
        n: int,
        branch: Branch,
        known: list[_Known],
        index: dict[str, list[_Known]],
    ) -> Written | None:
        p = _Prints.of(branch.messages)
        total = len(p.prints)
        # the common case: a stored thread's history is a prefix of this branch
        matching = [
            k
            for k in known
            if k.digest is not None and 0 < k.head <= total and p.prefix[k.head] == k.digest
        ]
        best = max(matching, key=lambda k: k.head, default=None)
        if best is not None:
            return await self._extend(s, best, branch, p, best.head, main=n == 0)
        candidates = list(known)
        if not candidates and s.fork_parent_key is not None:
            candidates = list(index.get(s.fork_parent_key, []))
        shared, origin = 0, None
        loose: list[str] | None = None
        for k in candidates:
            if k.prints is None:
                stored = await self.store.messages(k.info.id)
                k.prints = [fingerprint(m, outputs=not k.legacy) for m in stored]
                self._holding.append(k)
            if k.legacy:
                loose = loose or [fingerprint(m, outputs=False) for m in branch.messages]
            lcp = common_prefix(k.prints, loose if k.legacy and loose else p.prints)
            if lcp > shared:
                shared, origin = lcp, k
        if origin is not None and shared == total:  # every message of it is stored already
            if origin.legacy and origin in known and shared == len(origin.prints or ()):
                return await self._extend(s, origin, branch, p, shared, main=n == 0)
            return self._written(origin, 0) if origin in known else None
        if origin is not None and origin in known and shared == len(origin.prints or ()):
            return await self._extend(s, origin, branch, p, shared, main=n == 0)
        at = fork_point(branch.messages, shared) if origin is not None else 0
        if at == 0:
            return await self._create(s, n, branch, p, known, index)
        assert origin is not None
        label = branch.label or "fork"
        suffix = f" ({label})" if origin in known else ""
        info = await self.store.fork(
            origin.info.id,
            at=at,
            title=s.title + suffix,
            created_at=branch.time(at),
            source_key=_source_key(s, p, known),
        )
        if origin not in known:
            label = branch.label
        return await self._new(s, info, branch, p, at, known, label=label, suffix=suffix)

    async def _create(
        self,
        s: Session,
        n: int,
        branch: Branch,
        p: _Prints,
        known: list[_Known],
        index: dict[str, list[_Known]],
    ) -> Written:
        parent: ThreadInfo | None = None
        if s.parent_key is not None and index.get(s.parent_key):
            parent = index[s.parent_key][0].info
        title, suffix = s.title, ""
        if n == 0 and self.title is not None and s.kind == Kind.LEAD:
            title = self.title
        if known:  # a branch sharing nothing with the main line: hang it under the main thread
            suffix = f" ({branch.label or 'branch'})"
            title = s.title + suffix
            parent = known[0].info
        first = branch.time(0)
        began = first if known else source_time(s.created_ms) or first
        info = await self.store.create_thread(
            created_at=began,
            source_key=_source_key(s, p, known),
            kind=s.kind,
            title=title,
            parent_id=parent.id if parent else None,
            model=s.model,
            tools=_worker_tools() if s.kind == Kind.WORKER else (),
            task={"source": self._source(s, branch.label, p, len(p.prints), suffix=suffix)},
        )
        return await self._new(s, info, branch, p, 0, known, label=branch.label, suffix=suffix)

    async def _new(
        self,
        s: Session,
        info: ThreadInfo,
        branch: Branch,
        p: _Prints,
        at: int,
        known: list[_Known],
        *,
        label: str,
        suffix: str,
    ) -> Written:
        k = _Known(info, at, None, p.prints[:at])
        known.append(k)
        self._holding.append(k)
        written = await self._extend(s, k, branch, p, at, label=label, suffix=suffix)
        written.created = True
        return written

    async def _extend(
        self,
        s: Session,
        k: _Known,
        branch: Branch,
        p: _Prints,
        start: int,
        *,
        label: str | None = None,
        suffix: str | None = None,
        main: bool = False,
    ) -> Written:
        new = branch.messages[start:]
        total = len(p.prints)
        src = (k.info.task or {}).get("source") or {}
        if not isinstance(src, dict):
            src = {}
        if label is None:
            label = str(src.get("branch", ""))
        got = src.get("imported")
        before: dict[str, Any] = got if isinstance(got, dict) else {}
        kept = before.get("suffix")
        end = suffix if suffix is not None else kept if isinstance(kept, str) else ""
        target = self._source(s, label, p, total, suffix=end)
        title = self._title(s, k.info, before, end, main=main)
        if src != target or title is not None:
            # written before the messages: a crash in between leaves a head short of
            # ``imported.messages``, which the next import sees and compares message by message
            task = {**(k.info.task or {}), "source": target}
            k.info = await self.store.update_thread(k.info.id, task=task, title=title)
        if new:
            usage = {i - start: u for i, u in branch.usage.items() if i >= start}
            times = [branch.time(i) for i in range(start, total)]
            await self._append(k.info.id, new, usage, times)
            k.info = await self.store.get_thread(k.info.id)
        k.head, k.digest, k.prints = total, p.prefix[total], list(p.prints)
        self._holding.append(k)
        k.legacy = False
        return self._written(k, len(new))

    @staticmethod
    def _written(k: _Known, added: int) -> Written:
        parent = k.info.parent_id
        return Written(
            k.info,
            parent=None if parent is None else format_ref(parent),
            source=source_json(k.info.task) or {},
            added=added,
            created=False,
        )

    def _title(
        self, s: Session, info: ThreadInfo, before: dict[str, Any], suffix: str, *, main: bool
    ) -> str | None:
        """The thread's new title, or None to keep it: the ``--title`` given for a main thread;
        else the session's title (and the thread's suffix) when the session was renamed at
        the source and the thread still has the title the last import gave it."""
        if main and self.title is not None and s.kind == Kind.LEAD:
            return self.title if info.title != self.title else None
        old = before.get("title")
        if not isinstance(old, str):
            return None  # imported before titles were kept: whether it was given is unknown
        wanted = s.title + suffix
        return wanted if info.title == old + suffix and wanted != info.title else None

    @staticmethod
    def _source(
        s: Session, label: str, p: _Prints, total: int, *, suffix: str = ""
    ) -> dict[str, Any]:
        src: dict[str, Any] = {**s.source, "key": s.key}
        if label:
            src["branch"] = label
        imported: dict[str, Any] = {
            "messages": total,
            "digest": p.prefix[total],
            "mapping": MAPPING,
        }
        if s.stat is not None:
            imported["stat"] = s.stat
        imported["title"] = s.title
        if suffix:
            imported["suffix"] = suffix
        if s.parent_key is not None:
            imported["parent_key"] = s.parent_key
        src["imported"] = imported
        return src

    async def unchanged_files(self) -> dict[str, list[int]]:
        """path → [size, mtime_ns] of each source file every thread of which is whole in the
        store as of that stat (a file with a thread left short by a crash is not in it)."""
        out: dict[str, list[int]] = {}
        bad: set[str] = set()
        for known in (await self._known()).values():
            for k in known:
                src = (k.info.task or {}).get("source") or {}
                path = src.get("path")
                stat = (src.get("imported") or {}).get("stat")
                if not isinstance(path, str):
                    continue
                if k.digest is None or not isinstance(stat, list) or out.get(path, stat) != stat:
                    bad.add(path)
                    continue
                if k.legacy:
                    bad.add(path)  # imported by an older mapping: read to title it anew
                    continue
                if _orphan(k.info) and "parent_key" not in (src.get("imported") or {}):
                    bad.add(path)  # imported before parent keys were kept: read to learn it
                    continue
                out[path] = stat
        return {p: s for p, s in out.items() if p not in bad}

    async def names(self) -> dict[str, str | None]:
        """path → the Codex thread name its threads were imported with (None: none), so a
        thread renamed in Codex's index has its unchanged rollout read again."""
        out: dict[str, str | None] = {}
        for known in (await self._known()).values():
            for k in known:
                src = (k.info.task or {}).get("source") or {}
                if isinstance(src.get("path"), str):
                    name = src.get("thread_name")
                    out[src["path"]] = name if isinstance(name, str) else None
        return out

    async def threads_of(self, paths: Sequence[str]) -> list[Written]:
        """What is stored of the files at ``paths`` (skipped as unchanged), as unchanged rows."""
        wanted = set(paths)
        return [
            self._written(k, 0)
            for known in (await self._known()).values()
            for k in known
            if ((k.info.task or {}).get("source") or {}).get("path") in wanted
        ]

    async def _append(
        self,
        thread_id: str,
        msgs: Sequence[NewMessage],
        usage: dict[int, UsageRecord],
        times: Sequence[datetime | None],
    ) -> None:
        """``msgs`` (with their source ``times``) in pieces that each end at a message with a
        usage row (the store ties a usage row to the last assistant message of its append),
        issued at once so the store's group commit writes them together, in order."""
        pieces: list[tuple[list[NewMessage], UsageRecord | None, list[datetime | None]]] = []
        cur: list[NewMessage] = []
        start = 0
        for i, m in enumerate(msgs):
            cur.append(m)
            if i in usage:
                pieces.append((cur, usage[i], list(times[start : i + 1])))
                cur, start = [], i + 1
        if cur:
            pieces.append((cur, None, list(times[start:])))
        results = await asyncio.gather(
            *(self.store.append(thread_id, ms, usage=u, times=ts) for ms, u, ts in pieces),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r


def _known_of(t: ThreadInfo) -> tuple[str, _Known] | None:
    """An imported thread's source key and what is known of it (None: not imported)."""
    src = (t.task or {}).get("source")
    if not isinstance(src, dict) or not isinstance(src.get("key"), str):
        return None
    imp = src.get("imported")
    imp = imp if isinstance(imp, dict) else {}
    head = imp.get("messages")
    dig = imp.get("digest")
    return src["key"], _Known(
        t,
        head if isinstance(head, int) else -1,
        dig if isinstance(dig, str) and head == t.head_seq else None,
        legacy=imp.get("mapping") != MAPPING,
    )


def _source_key(s: Session, p: _Prints, known: list[_Known]) -> str:
    """The ``source_key`` of a new thread of ``s``: the session's key for its first thread,
    the key and the digest of the branch it is created for for each other one (two imports
    creating the same branch at once give the same key, and one of them is refused)."""
    return s.key if not known else f"{s.key}@{p.prefix[-1]}"


def _orphan(info: ThreadInfo) -> bool:
    return info.kind == Kind.WORKER and info.parent_id is None and info.forked_from is None


def _worker_tools() -> list[str]:
    from workers import DEFAULT_WORKER_TOOLS

    return list(DEFAULT_WORKER_TOOLS)


def _ordered(sessions: Sequence[Session]) -> list[Session]:
    """Sessions with every parent and fork origin of the batch before the sessions that need
    it."""
    return ordered(
        sessions, lambda s: {s.key}, lambda s: {d for d in (s.parent_key, s.fork_parent_key) if d}
    )


T = TypeVar("T")


def ordered(
    items: Sequence[T], keys: Callable[[T], set[str]], deps: Callable[[T], set[str]]
) -> list[T]:
    """``items`` with each after every item whose ``keys`` hold one of its ``deps``, otherwise
    in the order given (a cycle, which only a hostile source writes, is broken in that
    order)."""
    given = {k for x in items for k in keys(x)}
    done: set[str] = set()
    out: list[T] = []
    pending = list(items)
    while pending:
        rest = []
        for x in pending:
            if (deps(x) & given) - keys(x) <= done:
                out.append(x)
                done |= keys(x)
            else:
                rest.append(x)
        if len(rest) == len(pending):
            out.extend(rest)
            break
        pending = rest
    return out
