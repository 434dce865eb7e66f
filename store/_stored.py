"""Stored message rows into the store's models, without validating them a second time.

Every message is validated once, where it enters (``store.models``): a ``NewMessage`` is checked
before ``Store.append`` sees it, and its row is its ``model_dump(mode="json",
exclude_none=True)``. So the blocks of a row whose JSON has exactly a shape the store writes
(``KNOWN_SHAPES``: the keys of each block type, in the order they are written) are built from
the parsed JSON as it is: the object becomes the block's ``__dict__`` (a field the JSON leaves
out is the class's default), nested objects become their models. A row of any other shape
(written by another version, or not by the store) is validated in full, which gives the same
models. ``tests/store/test_models_stored.py`` holds the two ways equal for every shape.

A history is read per segment (``_history.segments``) as ``(content, role, created_at)`` rows
(``_history.HISTORY_SQL``): the owner and the seqs are the segment's, the contents are parsed
in one call, and equal timestamps (every message of one append shares one) are parsed once;
a long segment read through raw ``sqlite3`` comes ``CHUNK_ROWS`` messages a row instead
(``_history.JOINED_CHUNK_SQL``, ``joined_chunk``). Both build through one loop (``_chunk``).
"""

from __future__ import annotations

import functools
import gc
import itertools
import json
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from ._record import Model
from .models import (
    Change,
    Effects,
    Message,
    StoredOutput,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

KNOWN_SHAPES: dict[tuple[str, ...], type[Model]] = {
    # the keys of a stored block, in the order the store writes them → its class
    ("type", "text"): TextBlock,
    ("type", "thinking", "signature"): ThinkingBlock,
    ("type", "thinking"): ThinkingBlock,  # signature None: left out when written
    ("type", "id", "name", "input"): ToolUseBlock,
    ("type", "tool_use_id", "content", "is_error"): ToolResultBlock,
    ("type", "tool_use_id", "content", "is_error", "stored"): ToolResultBlock,
    ("type", "tool_use_id", "content", "is_error", "effects"): ToolResultBlock,
    ("type", "tool_use_id", "content", "is_error", "stored", "effects"): ToolResultBlock,
}
"""Each block shape built without validation; any other is validated."""

STORED_OUTPUT_SHAPE = StoredOutput.field_names
"""The keys of a stored ``ToolResultBlock.stored``, in order."""

EFFECTS_SHAPES = (Effects.field_names, Effects.field_names[1:])
"""The keys of a stored ``ToolResultBlock.effects`` (``exit_code`` left out when None)."""

_SHAPES = {
    # (class, its type, what is left to build: 0 nothing; 1 a tool result's content, unless it
    # is text (the usual output); 2 its content, ``stored`` and ``effects``)
    keys: (cls, cls.type, 0 if cls is not ToolResultBlock else 1 if len(keys) == 4 else 2)  # type: ignore[attr-defined]
    for keys, cls in KNOWN_SHAPES.items()
}
_ACTIONS = frozenset({"added", "modified", "deleted"})
_new = object.__new__
_set_dict = Model.__dict__["__dict__"].__set__


class _Unknown(Exception):
    """A stored shape this module does not know: validate the message instead."""


def _nested(d: dict[str, Any]) -> None:
    """A tool result's nested objects as their models: text blocks, ``stored``, ``effects``."""
    content = d["content"]
    if type(content) is list:
        d["content"] = [_text(b) for b in content]
    elif type(content) is not str:
        raise _Unknown
    stored = d.get("stored")
    if stored is not None:
        if type(stored) is not dict or tuple(stored) != STORED_OUTPUT_SHAPE:
            raise _Unknown
        d["stored"] = StoredOutput.trusted(stored)
    effects = d.get("effects")
    if effects is not None:
        d["effects"] = _effects(effects)


def _effects(d: Any) -> Effects:
    """A stored ``Effects`` as its model; any other shape or type is ``_Unknown``."""
    if (
        type(d) is not dict
        or tuple(d) not in EFFECTS_SHAPES
        or type(d["changed"]) is not list
        or type(d["complete"]) is not bool
        or type(d["concurrent"]) is not bool
    ):
        raise _Unknown
    code = d.get("exit_code")
    if code is not None and type(code) is not int:
        raise _Unknown
    changed = []
    for c in d["changed"]:
        if (
            type(c) is not dict
            or tuple(c) != Change.field_names
            or type(c["path"]) is not str
            or not c["path"]
            or c["action"] not in _ACTIONS
        ):
            raise _Unknown
        changed.append(Change.trusted(c))
    d["changed"] = changed
    return Effects.trusted(d)


def _text(d: Any) -> TextBlock:
    if type(d) is not dict or tuple(d) != ("type", "text") or d["type"] != "text":
        raise _Unknown
    return TextBlock.trusted(d)


def _parser() -> Callable[[str], Any]:
    """pydantic-core's JSON parser where the process has loaded it (it caches the keys'
    strings: a 20,000-message parse 17 -> 13 ms), else the standard library's: the CLI's
    read-only fast path does not pay pydantic's import for it."""
    core = sys.modules.get("pydantic_core")
    if core is None:
        return json.loads
    return functools.partial(core.from_json, cache_strings="keys")


def segment_messages(owner: str, first_seq: int, rows: Sequence[Sequence[Any]]) -> list[Message]:
    """Messages ``first_seq, first_seq + 1, …`` of ``owner`` from its ``(content JSON text,
    role, created_at)`` rows in seq order (a raw ``sqlite3`` read's timestamps are SQLAlchemy's
    naive UTC text, SQLAlchemy's are datetimes): the models full validation would give.

    The loop is written out (no helper calls in the usual case) because it is the whole cost
    of loading a long history: about 2 µs a message, against 30 µs validating. Rows are parsed
    and built ``CHUNK_ROWS`` at a time (``_build``)."""
    if not rows:
        return []
    if len(rows) < GC_PAUSE_ROWS:
        return _build(owner, first_seq, rows)
    with gc_paused(len(rows)):
        return _build(owner, first_seq, rows)


CHUNK_ROWS = 1000
"""Rows parsed, then built, at a time. Parsing a whole long history first and building it next
went over its parsed objects twice, the second time long after they had left the CPU's
caches: a fifth of a 20,000-message build was waiting on memory (``_build``). A chunk of 1,000
(~190 KB of JSON) builds as fast as one of 500 and halves the hand-offs between the reader and
the thread that fetches its chunks ahead (``Tx.fetch_each``)."""


def _build(owner: str, first_seq: int, rows: Sequence[Sequence[Any]]) -> list[Message]:
    """The messages of ``rows``, a chunk of ``CHUNK_ROWS`` at a time (``segment_chunk``)."""
    out: list[Message] = []
    if len(rows) <= CHUNK_ROWS:
        segment_chunk(owner, first_seq, rows, out)
    else:
        for i in range(0, len(rows), CHUNK_ROWS):
            segment_chunk(owner, first_seq + i, rows[i : i + CHUNK_ROWS], out)
    return out


def segment_chunk(
    owner: str, first_seq: int, rows: Sequence[Sequence[Any]], out: list[Message]
) -> None:
    """The messages of ``rows`` (message ``first_seq`` first) appended to ``out``: their
    contents parsed in one call, then built in one loop (``_chunk``). A raw ``sqlite3`` read of
    a long segment fetches its chunks as single rows instead (``joined_chunk``)."""
    parse = _parser()
    contents = parse("[" + ",".join([r[0] for r in rows]) + "]")
    _chunk(owner, first_seq, contents, rows, lambda i: parse(rows[i][0]), out)


def joined_chunk(
    owner: str, first_seq: int, row: Sequence[Any], sep: str, out: list[Message]
) -> None:
    """``segment_chunk`` for a chunk read as one row (``_history.JOINED_CHUNK_SQL``): its
    contents as one JSON array, its roles and its timestamps each joined by ``sep``.
    One row of three long strings instead of a row of three short ones per message: SQLite
    steps once, and no row is made or freed per message. ``ValueError`` (nothing appended)
    when the row does not split into as many contents, roles and timestamps as it counts."""
    count, text, roles, stamps = row
    parse = _parser()
    parsed = parse(text)
    role_list = roles.split(sep) if roles is not None else []
    stamp_list = stamps.split(sep) if stamps is not None else []
    if not count == len(parsed) == len(role_list) == len(stamp_list):
        raise ValueError(
            f"{count} rows read as {len(parsed)} contents, {len(role_list)} roles and"
            f" {len(stamp_list)} timestamps"
        )
    meta = zip(itertools.repeat(None), role_list, stamp_list)
    _chunk(owner, first_seq, parsed, meta, lambda i: json.loads(text)[i], out)


def _chunk(
    owner: str,
    first_seq: int,
    contents: list[Any],
    meta: Iterable[Sequence[Any]],
    fresh: Callable[[int], Any],
    out: list[Message],
) -> None:
    """The build of one chunk: ``contents`` (each message's parsed block list), ``meta`` its
    ``(anything, role, created_at)`` rows in the same order, and ``fresh(i)``: the i-th content
    parsed anew, for a message whose shape is not a known one (building may have changed the
    parsed blocks before that was found). A block is one allocation: its parsed object becomes
    its ``__dict__``."""
    new, set_dict, shapes, message = _new, _set_dict, _SHAPES, Message
    last: Any = _NO_STAMP
    at = _EPOCH
    append = out.append
    seq = first_seq
    for (_, role, created_at), content in zip(meta, contents, strict=True):
        if created_at != last:  # every message of one append shares its timestamp
            at = _stamp(created_at)
            last = created_at
        try:
            i = 0
            for d in content:  # a shape not in ``shapes``: KeyError; not a dict: TypeError
                cls, kind, nested = shapes[tuple(d)]
                if d["type"] != kind:
                    raise _Unknown
                if nested and (nested == 2 or type(d["content"]) is not str):
                    _nested(d)
                b = new(cls)
                set_dict(b, d)
                content[i] = b  # the parsed list becomes the message's: one list fewer
                i += 1
            if not i:
                raise _Unknown
        except (_Unknown, KeyError, TypeError):
            append(_validated(owner, seq, role, fresh(seq - first_seq), at))
        else:
            m = new(message)
            set_dict(
                m,
                {
                    "role": role,
                    "content": content,
                    "seq": seq,
                    "thread_id": owner,
                    "created_at": at,
                },
            )
            append(m)
        seq += 1


_NO_STAMP = object()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _validated(thread_id: str, seq: int, role: str, content: Any, at: datetime) -> Message:
    """Full validation of one message whose shape is not one of ``KNOWN_SHAPES``."""
    return Message.model_validate(
        {"role": role, "content": content, "seq": seq, "thread_id": thread_id, "created_at": at}
    )


def _stamp(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"a stored timestamp that is not one: {value!r}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


GC_PAUSE_ROWS = 1000
"""Building at least this many messages pauses the cyclic garbage collector meanwhile."""

_gc_lock = threading.Lock()
_gc_holders = 0
_gc_was_enabled = False


@contextmanager
def gc_paused(rows: int) -> Iterator[None]:
    """The collector paused while a large history is built. The models built here hold no
    cycles, but each is a container the collector counts: a 20,000-message history set off
    full collections over every object of the process about as long as the build itself. A
    pause (taken by the first of concurrent builds, given back by the last; never turned on
    where the process had turned it off).

    Given back, the models would still cost a young-generation pass over every one of them
    (a tenth of the build) and then count towards the next full collection, though a loaded
    history is long-lived by nature. So the last build out moves what the collector tracks
    into the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``: two list splices, no
    pass) before turning it back on: what is garbage among the young objects of that moment
    waits for the next full collection, which sees them all as before. A process that froze
    objects itself (``gc.get_freeze_count()``) keeps its frozen set: then no move."""
    global _gc_holders, _gc_was_enabled
    if rows < GC_PAUSE_ROWS:
        yield
        return
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                if not gc.get_freeze_count():
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()
