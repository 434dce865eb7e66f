"""Stored message rows into the store's pydantic models, without validating them a second time.

Every message is validated once, at the boundary: a ``NewMessage`` is a validated model before
``Store.append`` sees it, and its row is that model's ``model_dump(mode="json",
exclude_none=True)``. Validating it again on every read was most of the time of loading a long
history. So the blocks of a row whose JSON has exactly a shape this module knows — the keys the
store writes for each block type, in the order it writes them — are built straight into the
models (their ``__dict__`` set as ``model_construct`` sets it, defaults filled in, the field set
the validated model would have); a row of any other shape (written by another version, or not by
the store) is validated in full, which gives the same models. ``KNOWN_SHAPES`` is held to the
models' fields by a test (``tests/store/test_models_stored.py``), which also holds the two ways
equal for every shape.

A history is read per segment (``_readsql.segments``) as ``(content, role, created_at)`` rows
(``_readsql.HISTORY_SQL``): the owner and the seqs are the segment's, the contents are parsed
in one call, and equal timestamps (every message of one append shares one) are parsed once;
a long segment read through raw ``sqlite3`` comes ``CHUNK_ROWS`` messages a row instead
(``_readsql.JOINED_CHUNK_SQL``, ``joined_chunk``). Both build through one loop (``_chunk``).
"""

from __future__ import annotations

import gc
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pydantic_core
from pydantic import BaseModel

from .models import (
    Change,
    Effects,
    Message,
    StoredOutput,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    _new,
    _set_dict,
    _set_extra,
    _set_fields,
    _set_private,
    construct_model,
)

_TEXT = ("type", "text")
_STORED = ("chars", "bytes", "chunks", "head", "tail", "sha256")

KNOWN_SHAPES: dict[tuple[str, ...], tuple[type[BaseModel], str]] = {
    # the keys of a stored block, in the order the store writes them → (model, its type)
    _TEXT: (TextBlock, "text"),
    ("type", "thinking", "signature"): (ThinkingBlock, "thinking"),
    ("type", "thinking"): (ThinkingBlock, "thinking"),  # signature None: left out when written
    ("type", "id", "name", "input"): (ToolUseBlock, "tool_use"),
    ("type", "tool_use_id", "content", "is_error"): (ToolResultBlock, "tool_result"),
    ("type", "tool_use_id", "content", "is_error", "stored"): (ToolResultBlock, "tool_result"),
    ("type", "tool_use_id", "content", "is_error", "effects"): (ToolResultBlock, "tool_result"),
    ("type", "tool_use_id", "content", "is_error", "stored", "effects"): (
        ToolResultBlock,
        "tool_result",
    ),
}
"""Each block shape built without validation; any other is validated."""

STORED_OUTPUT_SHAPE = _STORED
"""The keys of a stored ``ToolResultBlock.stored``, in order."""

_CHANGE = ("path", "action")
_EFFECTS = (
    ("exit_code", "changed", "complete", "concurrent"),
    ("changed", "complete", "concurrent"),
)
EFFECTS_SHAPES = _EFFECTS
"""The keys of a stored ``ToolResultBlock.effects`` (``exit_code`` left out when None)."""

# One field set per shape, shared by the models built here: a frozen model never changes its
# own, and pydantic copies it when it copies a model.
_FIELDS_SET = {keys: set(keys) for keys in (*KNOWN_SHAPES, _STORED, _CHANGE, *_EFFECTS)}
_MESSAGE_SET = set(Message.model_fields)


class _Unknown(Exception):
    """A stored shape this module does not know: validate the message instead."""


def _left_to_fill(keys: tuple[str, ...], cls: type[BaseModel]) -> int:
    """0: nothing; 1: a tool result (inline, nothing recorded, unless ``stored`` or ``effects``
    is there); 2: ``_fill`` it."""
    if cls is ToolResultBlock:
        return 2 if "stored" in keys or "effects" in keys else 1
    return 2 if cls is ThinkingBlock and "signature" not in keys else 0


_SHAPES = {
    # (model, its type, its field set, what is left to fill)
    keys: (cls, kind, _FIELDS_SET[keys], _left_to_fill(keys, cls))
    for keys, (cls, kind) in KNOWN_SHAPES.items()
}


def _fill(cls: type[Any], d: dict[str, Any]) -> None:
    """The defaults a block's stored JSON leaves out, and its nested models."""
    if cls is ToolResultBlock:
        content = d["content"]
        if type(content) is list:
            d["content"] = [_text(b) for b in content]
        elif type(content) is not str:
            raise _Unknown
        effects = d.pop("effects", None)  # set again below: the fields' order is the JSON's
        stored = d.get("stored")
        if stored is None:
            d["stored"] = None
        elif type(stored) is dict and tuple(stored) == _STORED:
            d["stored"] = construct_model(StoredOutput, stored, _FIELDS_SET[_STORED])
        else:
            raise _Unknown
        d["effects"] = None if effects is None else _effects(effects)
    elif cls is ThinkingBlock and "signature" not in d:
        d["signature"] = None


def _effects(d: Any) -> Effects:
    """A stored ``Effects`` as its model; any other shape or type is ``_Unknown``."""
    keys = tuple(d) if type(d) is dict else ()
    if (
        keys not in _EFFECTS
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
            or tuple(c) != _CHANGE
            or type(c["path"]) is not str
            or not c["path"]
            or c["action"] not in _ACTIONS
        ):
            raise _Unknown
        changed.append(construct_model(Change, c, _FIELDS_SET[_CHANGE]))
    values = {
        "exit_code": code,
        "changed": changed,
        "complete": d["complete"],
        "concurrent": d["concurrent"],
    }
    return construct_model(Effects, values, _FIELDS_SET[keys])


_ACTIONS = frozenset({"added", "modified", "deleted"})


def _text(d: Any) -> Any:
    if type(d) is not dict or tuple(d) != _TEXT or d["type"] != "text":
        raise _Unknown
    return construct_model(TextBlock, d, _FIELDS_SET[_TEXT])


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


CHUNK_ROWS = 500
"""Rows parsed, then built, at a time. Parsing a whole long history first and building it next
went over its parsed objects twice, the second time long after they had left the CPU's
caches: a fifth of a 20,000-message build was waiting on memory (``_build``)."""


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
    contents = pydantic_core.from_json(
        "[" + ",".join([r[0] for r in rows]) + "]", cache_strings="keys"
    )
    _chunk(owner, first_seq, contents, rows, lambda i: pydantic_core.from_json(rows[i][0]), out)


def joined_chunk(
    owner: str, first_seq: int, row: Sequence[Any], sep: str, out: list[Message]
) -> None:
    """``segment_chunk`` for a chunk read as one row (``_readsql.JOINED_CHUNK_SQL``): its
    contents' JSON texts joined by commas, its roles and its timestamps each joined by ``sep``.
    One row of three long strings instead of a row of three short ones per message: SQLite
    steps once, and no row is made or freed per message. ``ValueError`` (nothing appended)
    when the row does not split into as many contents, roles and timestamps as it counts."""
    count, contents, roles, stamps = row
    text = "[" + (contents or "") + "]"
    parsed = pydantic_core.from_json(text, cache_strings="keys")
    role_list = roles.split(sep) if roles is not None else []
    stamp_list = stamps.split(sep) if stamps is not None else []
    if not count == len(parsed) == len(role_list) == len(stamp_list):
        raise ValueError(
            f"{count} rows read as {len(parsed)} contents, {len(role_list)} roles and"
            f" {len(stamp_list)} timestamps"
        )
    meta = zip(itertools.repeat(None), role_list, stamp_list)
    _chunk(owner, first_seq, parsed, meta, lambda i: pydantic_core.from_json(text)[i], out)


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
    parsed blocks before that was found).

    The parser caches the keys' strings alone: looking every short value up in its cache cost
    more (a 20,000-message build 37 -> 35 ms) than it saved; a block's ``type`` is the module's
    own string instead."""
    new, set_dict, set_fields = _new, _set_dict, _set_fields
    set_extra, set_private = _set_extra, _set_private
    shapes, message, message_set = _SHAPES, Message, _MESSAGE_SET
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
                cls, kind, fields, fill = shapes[tuple(d)]
                if d["type"] != kind:
                    raise _Unknown
                d["type"] = kind  # one string for every block of a type: parsed, it is not
                if fill:  # text, tool_use and a signed thinking block: nothing to fill
                    if fill == 1 and type(d["content"]) is str:
                        d["stored"] = None  # the usual tool result: an inline text output
                        d["effects"] = None
                    else:
                        _fill(cls, d)
                b = new(cls)
                set_dict(b, d)
                set_fields(b, fields)
                set_extra(b, None)
                set_private(b, None)
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
            set_fields(m, message_set)
            set_extra(m, None)
            set_private(m, None)
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
