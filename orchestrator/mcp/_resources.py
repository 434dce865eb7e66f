"""threadloom's MCP resources: refs as URIs (SPEC §Wave 2 — MCP server).

- ``threadloom://thread/{id}`` — the thread as ``show --json`` has it, without messages;
- ``threadloom://thread/{id}/messages/{range}`` — its messages ``7``, ``7-12`` or ``7-``, at
  most ``MAX_RESOURCE_CHARS`` of them; ``next`` names the range that follows, if any;
- ``threadloom://job/{id}`` — the job's tree (``tree --json``).

``id`` is a thread id or its ``T-`` ref, or a unique prefix of either.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._refusals import refusals

if TYPE_CHECKING:
    from ._server import Threadloom

MAX_RESOURCE_CHARS = 100_000
MIME = "application/json"


def _ref(thread_id: str) -> str:
    return thread_id if thread_id.startswith("T-") else f"T-{thread_id}"


def bounded_messages(shown: dict[str, Any], ref: str) -> dict[str, Any]:
    """The messages that fit in ``MAX_RESOURCE_CHARS`` (always at least one), and the range
    of the rest as ``next``."""
    messages = shown.get("messages") or []
    kept: list[dict[str, Any]] = []
    used = 0
    for msg in messages:
        size = len(json.dumps(msg, ensure_ascii=False))
        if kept and used + size > MAX_RESOURCE_CHARS:
            break
        kept.append(msg)
        used += size
    rest = messages[len(kept) :]
    thread = ref.split("#", 1)[0]
    nxt = f"{thread}#{rest[0]['seq']}-{messages[-1]['seq']}" if rest else None
    return {"ref": ref, "messages": kept, "next": nxt}


def register_resources(app: Threadloom) -> None:
    server = app.server

    @server.resource(
        "threadloom://thread/{id}",
        name="thread",
        description="A thread: status, lineage, result, usage (show --json without messages)",
        mime_type=MIME,
    )
    async def thread(id: str) -> str:
        with refusals(resource=True):
            return json.dumps(await app.orch.show(_ref(id), messages=False), ensure_ascii=False)

    @server.resource(
        "threadloom://thread/{id}/messages/{range}",
        name="thread messages",
        description="Messages of a thread: 7, 7-12 or 7- (bounded; `next` names the rest)",
        mime_type=MIME,
    )
    async def thread_messages(id: str, range: str) -> str:
        with refusals(resource=True):
            ref = f"{_ref(id)}#{range}"
            shown = await app.orch.show(ref)
            return json.dumps(bounded_messages(shown, ref), ensure_ascii=False)

    @server.resource(
        "threadloom://job/{id}",
        name="job",
        description="A job as a tree of spawn and fork edges with status and tokens (tree --json)",
        mime_type=MIME,
    )
    async def job(id: str) -> str:
        with refusals(resource=True):
            return json.dumps(await app.orch.tree(_ref(id)), ensure_ascii=False)
