"""Row ↔ model conversion for threads and messages."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ._db import as_utc
from ._models import CONTENT_ADAPTER, ForkOrigin, Kind, Message, Result, Status, ThreadInfo
from ._tables import messages, threads

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


def message_from_row(row: sa.Row[Any]) -> Message:
    # content was validated when it was appended; validating from the JSON text is still cheap
    # (pydantic-core) and keeps the read path typed
    return Message.model_construct(
        thread_id=row.thread_id,
        seq=row.seq,
        role=row.role,
        content=CONTENT_ADAPTER.validate_json(row.content),
        created_at=as_utc(row.created_at),
    )
