"""Row ↔ model conversion for threads and messages."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter

from ._engine import as_utc
from ._tables import messages, threads
from .models import ForkOrigin, Kind, Message, Result, Status, ThreadInfo

THREAD_COLUMNS = list(threads.c)
MESSAGE_COLUMNS = [
    messages.c.thread_id,
    messages.c.seq,
    messages.c.role,
    messages.c.content,
    messages.c.created_at,
]


def thread_from_row(row: sa.Row[Any]) -> ThreadInfo:
    m = row._mapping
    forked = (
        ForkOrigin(thread_id=m["forked_from_id"], at=m["forked_at_seq"])
        if m["forked_from_id"]
        else None
    )
    return ThreadInfo.model_construct(
        id=m["id"],
        kind=Kind(m["kind"]),
        title=m["title"] or "",
        status=Status(m["status"]),
        parent_id=m["parent_id"],
        forked_from=forked,
        job_id=m["job_id"],
        task=m["task"],
        system_prompt=m["system_prompt"],
        tools=list(m["tools"] or []),
        model=m["model"],
        result=Result.model_validate(m["result"]) if m["result"] else None,
        error=m["error"],
        version=m["version"],
        head_seq=m["head_seq"],
        lease_owner=m["lease_owner"],
        lease_expires_at=as_utc(m["lease_expires_at"]),
        created_at=as_utc(m["created_at"]),
        updated_at=as_utc(m["updated_at"]),
    )


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
