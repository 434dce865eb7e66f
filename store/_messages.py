"""Statements on the ``messages`` table (and the search rows and usage rows written with them):
rows to ``Message`` models and back, inserts, and the body of one group-committed append
transaction (``apply_appends``; ``_writer`` decides what goes in it).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.ext.asyncio import AsyncConnection

from . import _outputs, _search
from ._engine import as_utc, utcnow
from ._invariants import check_append
from ._ledger import usage_row
from ._outputs import OutputFile
from ._tables import messages, threads, usage
from .errors import InvariantError, LeaseLost, StoreError, ThreadNotFound
from .models import CONTENT_FORMAT, Message, NewMessage, UsageRecord
from .refs import format_ref

MESSAGE_COLUMNS = [
    messages.c.thread_id,
    messages.c.seq,
    messages.c.role,
    messages.c.content,
    messages.c.created_at,
]

MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def messages_from_rows(rows: Iterable[Sequence[Any]]) -> list[Message]:
    """Messages from ``(thread_id, seq, role, content JSON, created_at)`` rows, validated in one
    pydantic-core call over one JSON document (the stored content is spliced in as is): about
    twice as fast as building them one by one, and fully validated."""
    parts = []
    for thread_id, seq, role, content, created_at in rows:
        if isinstance(created_at, str):  # a raw sqlite3 read: SQLAlchemy's naive UTC text
            stamp = created_at.replace(" ", "T")
            if not stamp.endswith("Z") and "+" not in stamp[10:]:
                stamp += "+00:00"
        else:
            stamp = as_utc(created_at).isoformat()
        parts.append(
            f'{{"thread_id":{json.dumps(thread_id)},"seq":{int(seq)},"role":{json.dumps(role)},'
            f'"content":{content},"created_at":"{stamp}"}}'
        )
    return MESSAGES_ADAPTER.validate_json("[" + ",".join(parts) + "]")


def encode(msgs: Sequence[NewMessage]) -> list[tuple[str, str]]:
    """Each message's stored content (JSON text) and its full-text row's text."""
    return [
        (
            json.dumps(
                [b.model_dump(mode="json", exclude_none=True) for b in m.content],
                ensure_ascii=False,
                separators=(",", ":"),
            ),
            _search.searchable_text(m.content),
        )
        for m in msgs
    ]


def message_rows(
    thread_id: str, first_seq: int, msgs: Sequence[NewMessage], now: datetime
) -> tuple[list[dict[str, Any]], list[Message]]:
    """Rows for ``messages`` (with their search text under ``_text``) and the stored models."""
    rows: list[dict[str, Any]] = []
    out: list[Message] = []
    for i, (m, (content, text)) in enumerate(zip(msgs, encode(msgs), strict=True)):
        seq = first_seq + i
        rows.append(
            {
                "thread_id": thread_id,
                "seq": seq,
                "role": m.role,
                "content": content,
                "format": CONTENT_FORMAT,
                "created_at": now,
                "_text": text,
            }
        )
        out.append(
            Message.model_construct(
                thread_id=thread_id, seq=seq, role=m.role, content=list(m.content), created_at=now
            )
        )
    return rows, out


async def insert_rows(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Message rows from ``message_rows`` and their search rows."""
    await conn.execute(
        messages.insert(), [{k: v for k, v in r.items() if k != "_text"} for r in rows]
    )
    await conn.execute(_search.INSERT, _search.index_rows(rows))


async def insert(
    conn: AsyncConnection,
    thread_id: str,
    first_seq: int,
    msgs: Sequence[NewMessage],
    now: datetime,
) -> list[Message]:
    """The first messages of a new thread (already checked by the caller)."""
    if _outputs.needs_apart(msgs, None):
        msgs = await _outputs.store_apart(conn, thread_id, first_seq, msgs, None)
    rows, out = message_rows(thread_id, first_seq, msgs, now)
    if rows:
        await insert_rows(conn, rows)
    return out


@dataclass(slots=True)
class PendingAppend:
    """One ``Store.append`` call waiting for the transaction that will hold it."""

    thread_id: str
    messages: Sequence[NewMessage]
    usage: UsageRecord | None
    future: asyncio.Future[list[Message]]
    lease_owner: str | None = None
    files: Mapping[str, OutputFile] | None = None
    encoded: list[tuple[str, str]] | None = None
    """``encode(messages)``, done before the transaction (None: stored apart, see _outputs)."""


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


async def apply_appends(
    conn: AsyncConnection, batch: list[PendingAppend]
) -> list[list[Message] | StoreError]:
    """Every append of ``batch`` that keeps its thread valid, in one transaction (one multi-row
    insert per table); the outcome of each, in order: its stored messages, or the error that
    refused it alone (the others still commit)."""
    ids = sorted({p.thread_id for p in batch})
    now = utcnow()
    live = sa.case((threads.c.lease_expires_at > now, True), else_=False).label("lease_live")
    cols = (threads.c.id, threads.c.head_seq, threads.c.pending_tool_ids, threads.c.lease_owner)
    q = sa.select(*cols, live).where(threads.c.id.in_(ids))
    if conn.dialect.name == "postgresql":
        q = q.with_for_update(of=threads)
    found = list(await conn.execute(q))
    state = {r.id: (int(r.head_seq), tuple(r.pending_tool_ids or ())) for r in found}
    leases = {r.id: (r.lease_owner, bool(r.lease_live)) for r in found}
    outcomes: list[list[Message] | StoreError] = []
    msg_rows: list[dict[str, Any]] = []
    usage_rows: list[dict[str, Any]] = []
    stored: list[Message] = []
    for p in batch:
        admitted = admit(p, state, leases)
        if isinstance(admitted, StoreError):
            outcomes.append(admitted)
            continue
        head, new_pending = admitted
        msgs = p.messages
        if _outputs.needs_apart(msgs, p.files):
            try:
                msgs = await _outputs.store_apart(conn, p.thread_id, head + 1, msgs, p.files)
            except InvariantError as err:
                outcomes.append(InvariantError(f"{format_ref(p.thread_id)}: {err}"))
                continue
        rows, out = message_rows(p.thread_id, head + 1, msgs, now)
        msg_rows.extend(rows)
        if p.usage is not None:
            last_assistant = next(
                (x.seq for x in reversed(out) if x.role == "assistant"), out[-1].seq
            )
            usage_rows.append(usage_row(p.thread_id, last_assistant, p.usage, now))
        state[p.thread_id] = (head + len(p.messages), new_pending)
        stored.extend(out)
        outcomes.append(out)
    if msg_rows:
        await insert_rows(conn, msg_rows)
        touched = {m.thread_id for m in stored}
        await conn.execute(
            threads.update()
            .where(threads.c.id == sa.bindparam("b_id"))
            .values(
                head_seq=sa.bindparam("b_head"),
                pending_tool_ids=sa.bindparam("b_pending", type_=sa.JSON),
                version=threads.c.version + 1,
                updated_at=now,
            ),
            [
                {"b_id": tid, "b_head": state[tid][0], "b_pending": list(state[tid][1])}
                for tid in sorted(touched)
            ],
        )
    if usage_rows:
        await conn.execute(usage.insert(), usage_rows)
    return outcomes


_RAW_INSERT_MESSAGE = (
    "INSERT INTO messages (thread_id, seq, role, content, format, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_RAW_INSERT_TEXT = "INSERT INTO messages_fts (text, thread_id, seq) VALUES (?, ?, ?)"
_RAW_UPDATE_HEAD = (
    "UPDATE threads SET head_seq = ?, pending_tool_ids = ?, version = version + 1,"
    " updated_at = ? WHERE id = ?"
)
_RAW_INSERT_USAGE = (
    "INSERT INTO usage (thread_id, seq, model, input_tokens, output_tokens,"
    " cache_read_input_tokens, cache_creation_input_tokens, cost_usd, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def sqlite_time(when: datetime) -> str:
    """A UTC datetime as SQLAlchemy stores it in SQLite (naive UTC text), so both paths write
    the same text and compare alike."""
    return f"{when:%Y-%m-%d %H:%M:%S.%f}"


def apply_appends_sqlite(
    conn: sqlite3.Connection, batch: list[PendingAppend]
) -> list[list[Message] | StoreError]:
    """``apply_appends`` on a raw ``sqlite3`` connection already in a ``BEGIN IMMEDIATE``
    transaction, for appends whose messages were encoded beforehand (nothing stored apart): the
    same checks in the same transaction, the same rows (one ``executemany`` per table)."""
    ids = sorted({p.thread_id for p in batch})
    now = utcnow()
    stamp = sqlite_time(now)
    found = conn.execute(
        "SELECT id, head_seq, pending_tool_ids, lease_owner, COALESCE(lease_expires_at > ?, 0)"
        f" FROM threads WHERE id IN ({', '.join('?' * len(ids))})",
        (stamp, *ids),
    ).fetchall()
    state = {r[0]: (int(r[1]), tuple(json.loads(r[2]) or ())) for r in found}
    leases = {r[0]: (r[3], bool(r[4])) for r in found}
    outcomes: list[list[Message] | StoreError] = []
    msg_rows: list[tuple[Any, ...]] = []
    text_rows: list[tuple[str, str, int]] = []
    usage_rows: list[tuple[Any, ...]] = []
    for p in batch:
        admitted = admit(p, state, leases)
        if isinstance(admitted, StoreError):
            outcomes.append(admitted)
            continue
        head, new_pending = admitted
        encoded = p.encoded if p.encoded is not None else encode(p.messages)
        tid = p.thread_id
        out = []
        for i, (m, (content, text)) in enumerate(zip(p.messages, encoded, strict=True)):
            seq = head + 1 + i
            msg_rows.append((tid, seq, m.role, content, CONTENT_FORMAT, stamp))
            text_rows.append((text, tid, seq))
            out.append(
                Message.model_construct(
                    thread_id=tid, seq=seq, role=m.role, content=list(m.content), created_at=now
                )
            )
        if p.usage is not None:
            last_assistant = next(
                (x.seq for x in reversed(out) if x.role == "assistant"), out[-1].seq
            )
            u = p.usage.usage
            usage_rows.append(
                (
                    tid,
                    last_assistant,
                    p.usage.model,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_input_tokens,
                    u.cache_creation_input_tokens,
                    p.usage.cost_usd,
                    stamp,
                )
            )
        state[tid] = (head + len(p.messages), new_pending)
        outcomes.append(out)
    if msg_rows:
        conn.executemany(_RAW_INSERT_MESSAGE, msg_rows)
        conn.executemany(_RAW_INSERT_TEXT, text_rows)
        touched = sorted({r[0] for r in msg_rows})
        conn.executemany(
            _RAW_UPDATE_HEAD,
            [(state[t][0], json.dumps(list(state[t][1])), stamp, t) for t in touched],
        )
    if usage_rows:
        conn.executemany(_RAW_INSERT_USAGE, usage_rows)
    return outcomes
