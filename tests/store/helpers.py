"""Small builders shared by the store tests."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from store import NewMessage, Store, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock


def user(text: str) -> NewMessage:
    return NewMessage.user(text)


def assistant(text: str) -> NewMessage:
    return NewMessage.assistant(text)


def calls(*ids: str, text: str | None = None) -> NewMessage:
    """An assistant message calling one tool per id."""
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    blocks += [ToolUseBlock(id=i, name="read_file", input={"path": f"{i}.py"}) for i in ids]
    return NewMessage(role="assistant", content=blocks)


def results(*ids: str, text: str | None = None) -> NewMessage:
    """A user message answering each id, in the order given."""
    blocks: list[Any] = [ToolResultBlock(tool_use_id=i, content=f"output of {i}") for i in ids]
    if text:
        blocks.append(TextBlock(text=text))
    return NewMessage(role="user", content=blocks)


def thinking(text: str) -> ThinkingBlock:
    return ThinkingBlock(thinking=text, signature="sig")


def conversation(turns: int) -> list[NewMessage]:
    """user, then ``turns`` × (assistant tool call, user tool result), then assistant text."""
    out = [user("start")]
    for i in range(turns):
        out += [calls(f"t{i}"), results(f"t{i}")]
    out.append(assistant("finished"))
    return out


def shape(msgs: Any) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """What a message *is* (seq, role, content), independent of which thread row holds it."""
    return [(m.seq, m.role, [b.model_dump() for b in m.content]) for m in msgs]


async def count_rows(store: Store, table: str) -> int:
    async def fn(conn: Any) -> int:
        return int(await conn.scalar(sa.text(f"SELECT count(*) FROM {table}")))

    return await store.db.read(fn)
