"""The SPEC JSON shapes (SPEC §Command line, ``--json``) of threads, messages, results and
usage: what every front door — the CLI, the MCP server, the web viewer — returns, built in one
place (``orchestrator.api`` computes them; the CLI's read-only fast path builds them from its
plain objects).

Pure functions over either read path's objects: the store's models or the fast path's plain
ones with the same attribute names (``store._rawmodels``). No click, no rich, and nothing heavy
at import (no pydantic: blocks are told by their ``type``, JSON comes from their
``model_dump``) — the fast path's start-up time is the point.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store import Message, Result, ThreadInfo, Usage
    from store._rawmodels import RawMessage, RawResult, RawThread, RawUsage

    # Either read path's objects: the store's models, or the fast path's plain ones with the
    # same attribute names (``store._rawmodels``). Nothing here imports pydantic to tell them
    # apart: blocks are told by their ``type``, JSON comes from their ``model_dump``.
    AnyThread = ThreadInfo | RawThread
    AnyMessage = Message | RawMessage
    AnyResult = Result | RawResult
    AnyUsage = Usage | RawUsage


def iso(when: datetime) -> str:
    """A timestamp as JSON carries it: ISO 8601, UTC when the database gave no zone."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.isoformat()


def usage_json(usage: AnyUsage) -> dict[str, int]:
    return usage.model_dump(mode="json")


def cache_share(usage: AnyUsage) -> float | None:
    """cache_read / (input + cache_read + cache_creation): how much input came from the cache."""
    total = usage.total_input
    return None if total == 0 else usage.cache_read_input_tokens / total


def fork_json(info: AnyThread) -> dict[str, Any] | None:
    f = info.forked_from
    return None if f is None else {"ref": f.ref, "at": f.at}


def thread_json(info: AnyThread) -> dict[str, Any]:
    """A thread's metadata as ``ls`` lists it (and ``show`` starts it)."""
    return {
        "ref": info.ref,
        "kind": str(info.kind),
        "status": str(info.status),
        "title": info.title,
        "parent": _ref(info.parent_id),
        "forked_from": fork_json(info),
        "created_at": iso(info.created_at),
        "messages": info.head_seq,
        "job": _ref(info.job_id),
        "model": info.model,
        "updated_at": iso(info.updated_at),
    }


def message_json(msg: AnyMessage, thread_id: str) -> dict[str, Any]:
    # the blocks as stored (``store.content_json``), from whichever read path built them
    content = [b.model_dump(mode="json", exclude_none=True) for b in msg.content]
    out: dict[str, Any] = {"seq": msg.seq, "role": msg.role, "content": content}
    if msg.thread_id != thread_id:
        out["from"] = _ref(msg.thread_id)
    out["created_at"] = iso(msg.created_at)
    return out


def result_json(result: AnyResult | None) -> dict[str, Any] | None:
    return None if result is None else result.model_dump(mode="json", exclude_none=True)


def _ref(thread_id: str | None) -> str | None:
    return None if thread_id is None else f"T-{thread_id}"
