"""Small builders shared by the store tests."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from store import (
    Message,
    NewMessage,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from store._sqlite import Tx, as_time


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
    row = await store.db.read(lambda tx: tx.fetchone(f"SELECT count(*) FROM {table}"))
    assert row is not None
    return int(row[0])


class Procs:
    """Several ``tests/store/_proc.py`` processes, started once, released together per command.

    ``broadcast(cmd, n=…)`` writes the command to every process (or the first ``n``) before
    reading any answer, so they all act at the same moment; it returns their answers in order."""

    ROOT = Path(__file__).resolve().parents[2]

    def __init__(self, n: int) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.store._proc"],
                cwd=self.ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]
        for p in self.procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"

    def broadcast(self, cmd: dict[str, Any], *, n: int | None = None) -> list[dict[str, Any]]:
        line = json.dumps(cmd) + "\n"
        procs = self.procs[:n]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(line)
            p.stdin.flush()
        answers = []
        for p in procs:
            assert p.stdout is not None
            out = p.stdout.readline()
            assert out, f"process {p.pid} died (exit {p.wait()})"
            answers.append(json.loads(out))
        return answers

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None and p.stdin is not None:
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def pg_dsn(url: str) -> str:
    return "postgresql://" + url.split("://", 1)[1]


async def raw_sql(backend: str, url: str, sql: str) -> str | None:
    """Run ``sql`` on a connection of its own, outside the store; the error text, or None."""
    if backend == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute(sql)
        except sqlite3.DatabaseError as err:
            return str(err)
        finally:
            conn.close()
        return None
    aconn = await asyncpg.connect(pg_dsn(url))
    try:
        await aconn.execute(sql)
    except asyncpg.PostgresError as err:
        return str(err)
    finally:
        await aconn.close()
    return None


async def validated_messages(
    store: Store, thread_id: str, start: int = 1, end: int | None = None
) -> list[Message]:
    """A reference read, independent of the store's read plan: each message's row found through
    ``Store.ancestry`` (the owner whose bound covers its seq), one select per message, every row
    validated in full by the model."""
    ancestry = await store.ancestry(thread_id)
    head = ancestry[0][1]
    wanted = range(start, (head if end is None else min(end, head)) + 1)

    def fn(tx: Tx) -> list[Message]:
        out = []
        for seq in wanted:
            owner = next(o for o, bound in reversed(ancestry) if bound >= seq)
            row = tx.fetchone(
                "SELECT role, content, created_at FROM messages WHERE thread_id = :t AND seq = :s",
                {"t": owner, "s": seq},
            )
            assert row is not None, (owner, seq)
            role, content, at = row
            out.append(
                Message.model_validate(
                    {
                        "role": role,
                        "content": json.loads(content),
                        "seq": seq,
                        "thread_id": owner,
                        "created_at": as_time(at),
                    }
                )
            )
        return out

    return await store.db.read(fn)
