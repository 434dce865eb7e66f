"""Statements on the ``messages`` table (and the search rows and usage rows written with them):
inserts, and the body of one group-committed append transaction (``apply_appends``; ``_writer``
decides what goes in it).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import _outputs, _search, _threads
from ._invariants import check_append
from ._ledger import INSERT_USAGE, usage_row
from ._outputs import OutputFile
from ._sqlite import Tx, as_utc, json_value, utcnow
from .errors import InvariantError, LeaseLost, StoreError, ThreadNotFound
from .models import (
    CONTENT_FORMAT,
    ContentBlock,
    Message,
    NewMessage,
    ThreadInfo,
    UsageRecord,
    validate_blocks,
)
from .refs import format_ref

INSERT_MESSAGE = (
    "INSERT INTO messages (thread_id, seq, role, content, format, created_at)"
    " VALUES (:thread_id, :seq, :role, :content, :format, :created_at)"
)
UPDATE_HEAD = (
    "UPDATE threads SET head_seq = :head, pending_tool_ids = :pending, version = version + 1,"
    " updated_at = :now WHERE id = :id"
)


Encoded = tuple[str, str, "list[ContentBlock] | None"]
"""A message's stored content (JSON text), its full-text row's text, and its blocks as stored
when they differ from the message's (None: they do not)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def encode(msgs: Sequence[NewMessage]) -> list[Encoded]:
    """Each message's stored content (JSON text) and its full-text row's text. A lone surrogate
    (a model's JSON may hold ``"\\ud800"``) has no UTF-8 form, so neither database can keep it,
    nor can the store's JSON reader read its escape: it is stored as U+FFFD, and the message as
    stored is what the append returns (a resume then sends what the run sent)."""
    out: list[Encoded] = []
    for m in msgs:
        content = json.dumps(
            [b.model_dump(mode="json", exclude_none=True) for b in m.content],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        text = _search.searchable_text(m.content)
        if _SURROGATE.search(content) is None:
            out.append((content, text, None))
            continue
        content, text = _SURROGATE.sub("\ufffd", content), _SURROGATE.sub("\ufffd", text)
        out.append((content, text, validate_blocks(json.loads(content))))
    return out


def rows_of(
    tx: Tx,
    thread_id: str,
    first_seq: int,
    msgs: Sequence[NewMessage],
    now: datetime,
    encoded: list[Encoded] | None = None,
    times: Sequence[datetime | None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Message]]:
    """The ``messages`` rows of ``msgs``, their search rows, and the stored models; ``times``:
    each message's own time (None: ``now``), one a message."""
    stamp = tx.time(now)
    rows: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    out: list[Message] = []
    for i, (m, (content, text, stored)) in enumerate(
        zip(msgs, encoded or encode(msgs), strict=True)
    ):
        seq = first_seq + i
        own = times[i] if times is not None else None
        at = now if own is None else as_utc(own)
        rows.append(
            {
                "thread_id": thread_id,
                "seq": seq,
                "role": m.role,
                "content": content,
                "format": CONTENT_FORMAT,
                "created_at": stamp if own is None else tx.time(at),
            }
        )
        texts.append({"text": text, "thread_id": thread_id, "seq": seq})
        out.append(
            Message.trusted(
                {
                    "role": m.role,
                    "content": list(m.content) if stored is None else stored,
                    "seq": seq,
                    "thread_id": thread_id,
                    "created_at": at,
                }
            )
        )
    return rows, texts, out


def new_thread(
    tx: Tx, now: datetime, messages: Sequence[NewMessage], *, after_seq: int = 0, **values: Any
) -> None:
    """One thread row (its history starting after ``after_seq``: a fork's point) and its
    first ``messages``, validated against the pairing invariant before anything is written."""
    pending = check_append((), after_seq, messages)
    tid, first = values["id"], after_seq + 1
    _threads.insert(tx, now, head_seq=after_seq + len(messages), pending=pending, **values)
    if _outputs.needs_apart(messages, None):
        messages = _outputs.store_apart(tx, tid, first, messages, None)
    rows, texts, _ = rows_of(tx, tid, first, messages, now)
    if rows:
        tx.executemany(INSERT_MESSAGE, rows)
        tx.executemany(_search.INSERT, texts)


def create(
    tx: Tx,
    now: datetime,
    messages: Sequence[NewMessage],
    *,
    job_id: str | None,
    parent_id: str | None,
    **values: Any,
) -> ThreadInfo:
    """A new thread of ``job_id``, else of its parent's job, else a job of its own."""
    job = job_id
    if job is None and parent_id is not None:
        job = _threads.job_of(tx, parent_id)
    new_thread(tx, now, messages, parent_id=parent_id, job_id=job or values["id"], **values)
    return _threads.get(tx, values["id"])


@dataclass(slots=True)
class PendingAppend:
    """One ``Store.append`` call waiting for the transaction that will hold it."""

    thread_id: str
    messages: Sequence[NewMessage]
    usage: UsageRecord | None
    future: asyncio.Future[list[Message]]
    lease_owner: str | None = None
    files: Mapping[str, OutputFile] | None = None
    encoded: list[Encoded] | None = None
    """``encode(messages)``, done before the transaction (None: done in it)."""
    times: Sequence[datetime | None] | None = None
    """Each message's own time (``Store.append(times=…)``); None: the transaction's."""


def admit(
    p: PendingAppend,
    state: Mapping[str, tuple[int, tuple[str, ...]]],
    leases: Mapping[str, tuple[str | None, bool]],
) -> tuple[int, tuple[str, ...]] | StoreError:
    """Whether ``p`` may be appended to its thread as it stands in this transaction (``state``:
    head and pending tool_use ids; ``leases``: owner and whether unexpired): the head and the
    pending ids after it, or the error refusing it alone."""
    st = state.get(p.thread_id)
    if st is None:
        return ThreadNotFound(f"no thread {format_ref(p.thread_id)}")
    head, pending = st
    if p.lease_owner is not None and leases[p.thread_id] != (p.lease_owner, True):
        holder = leases[p.thread_id][0]
        # owners are one per run (host:pid:nonce), so a holder equal to the appender is its
        # own lease, expired: said so, not "held by <itself>"
        why = (
            "its lease expired before this append and was not renewed in time"
            if holder == p.lease_owner
            else f"the lease is held by {holder or 'nobody'}"
        )
        return LeaseLost(
            f"{format_ref(p.thread_id)}: {p.lease_owner} no longer holds the lease ({why});"
            " nothing was appended",
            holder,
        )
    try:
        return head, check_append(pending, head, p.messages)
    except InvariantError as err:
        return InvariantError(f"{format_ref(p.thread_id)}: {err}")


def apply_appends(tx: Tx, batch: list[PendingAppend]) -> list[list[Message] | StoreError]:
    """Every append of ``batch`` that keeps its thread valid, in one transaction (one multi-row
    insert per table); the outcome of each, in order: its stored messages, or the error that
    refused it alone (the others still commit). On PostgreSQL the threads' rows are locked
    first: another host appending to one of them waits for this transaction."""
    ids = sorted({p.thread_id for p in batch})
    now = utcnow()
    stamp = tx.time(now)
    names = {f"t{i}": tid for i, tid in enumerate(ids)}
    found = tx.fetchall(
        "SELECT id, head_seq, pending_tool_ids, lease_owner,"
        " CASE WHEN lease_expires_at > :now THEN 1 ELSE 0 END FROM threads"
        f" WHERE id IN ({', '.join(':' + n for n in names)})"
        + (" FOR UPDATE" if tx.postgres else ""),
        {"now": stamp, **names},
    )
    state = {r[0]: (int(r[1]), tuple(json_value(r[2]) or ())) for r in found}
    leases = {r[0]: (r[3], bool(r[4])) for r in found}
    outcomes: list[list[Message] | StoreError] = []
    msg_rows: list[dict[str, Any]] = []
    text_rows: list[dict[str, Any]] = []
    usage_rows: list[dict[str, Any]] = []
    for p in batch:
        admitted = admit(p, state, leases)
        if isinstance(admitted, StoreError):
            outcomes.append(admitted)
            continue
        head, new_pending = admitted
        msgs, encoded = p.messages, p.encoded
        if encoded is None and _outputs.needs_apart(msgs, p.files):
            try:
                msgs = _outputs.store_apart(tx, p.thread_id, head + 1, msgs, p.files)
            except InvariantError as err:
                outcomes.append(InvariantError(f"{format_ref(p.thread_id)}: {err}"))
                continue
        rows, texts, out = rows_of(tx, p.thread_id, head + 1, msgs, now, encoded, p.times)
        msg_rows.extend(rows)
        text_rows.extend(texts)
        if p.usage is not None:
            last_assistant = next(
                (x.seq for x in reversed(out) if x.role == "assistant"), out[-1].seq
            )
            usage_rows.append(usage_row(tx, p.thread_id, last_assistant, p.usage, now))
        state[p.thread_id] = (head + len(p.messages), new_pending)
        outcomes.append(out)
    if msg_rows:
        tx.executemany(INSERT_MESSAGE, msg_rows)
        tx.executemany(_search.INSERT, text_rows)
        touched = sorted({r["thread_id"] for r in msg_rows})
        tx.executemany(
            UPDATE_HEAD,
            [
                {
                    "head": state[t][0],
                    "pending": json.dumps(list(state[t][1])),
                    "now": stamp,
                    "id": t,
                }
                for t in touched
            ],
        )
    if usage_rows:
        tx.executemany(INSERT_USAGE, usage_rows)
    return outcomes
