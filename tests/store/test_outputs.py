"""Tool outputs too large to keep inline are stored whole, apart, in the append's transaction:
read back exactly (any slice, across chunk boundaries), shared by forks without copies,
append-only in the database, never half-written — on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from orchestrator.importers.jsonl import parse_transcript, transcript_line, transcript_parts
from store import (
    INLINE_LIMIT,
    ImportFormatError,
    InvariantError,
    LeaseLost,
    NewMessage,
    OutputFile,
    Store,
    StoredOutput,
    ToolResultBlock,
    ToolUseBlock,
)
from store._outputs import CHUNK_BYTES, PREVIEW_HEAD, PREVIEW_TAIL
from tests.store.helpers import raw_sql

from .helpers import count_rows, user


def _call(tid: str = "t1") -> NewMessage:
    return NewMessage(
        role="assistant", content=[ToolUseBlock(id=tid, name="bash", input={"command": "x"})]
    )


def _result(text: str, tid: str = "t1") -> NewMessage:
    return NewMessage(role="user", content=[ToolResultBlock(tool_use_id=tid, content=text)])


def _big_text(n_chars: int) -> str:
    """Mixed text: ASCII lines, two- and three-byte characters (some straddle chunk bounds), a
    NUL, and a distinctive last line."""
    unit = "line of output é ✓ \x00 done\n"
    body = unit * (n_chars // len(unit) + 1)
    return body[: n_chars - 12] + "END-MARKER\n!"


async def _thread_with_call(store: Store) -> str:
    t = await store.create_thread(kind="worker", messages=[user("go")])
    await store.append(t.id, _call())
    return t.id


async def test_a_small_output_stays_inline_exactly_as_before(store: Store) -> None:
    tid = await _thread_with_call(store)
    text = "x" * INLINE_LIMIT  # at the limit: still inline
    (msg,) = await store.append(tid, _result(text))
    block = msg.content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.stored is None and block.text == text
    assert await count_rows(store, "outputs") == 0
    stored = await store.message(tid, 3)
    assert stored.content[0].model_dump(mode="json", exclude_none=True) == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": text,
        "is_error": False,
    }


async def test_a_large_output_is_stored_whole_apart_with_an_inline_preview(store: Store) -> None:
    tid = await _thread_with_call(store)
    text = _big_text(3 * CHUNK_BYTES + 12345)
    (msg,) = await store.append(tid, _result(text))
    block = msg.content[0]
    assert isinstance(block, ToolResultBlock) and block.stored is not None
    data = text.encode()
    assert block.stored == StoredOutput(
        chars=len(text),
        bytes=len(data),
        chunks=4,
        head=PREVIEW_HEAD,
        tail=PREVIEW_TAIL,
        sha256=hashlib.sha256(data).hexdigest(),
    )
    ref = f"T-{tid}#3"
    assert block.text.startswith(text[:PREVIEW_HEAD])
    assert block.text.endswith(text[-PREVIEW_TAIL:])
    assert f"({len(text):,} characters, {len(data):,} bytes) is stored with {ref}" in block.text
    assert len(block.text) < 2 * (PREVIEW_HEAD + PREVIEW_TAIL)
    # read back as stored (a fresh read of the message, then its chunks)
    again = await store.message(tid, 3)
    whole = await store.output_text(again, again.content[0])  # type: ignore[arg-type]
    assert hashlib.sha256(whole.encode()).hexdigest() == block.stored.sha256
    assert whole == text
    assert await count_rows(store, "outputs") == 4


async def test_any_slice_of_a_stored_output_reads_exactly_across_chunk_bounds(
    store: Store,
) -> None:
    tid = await _thread_with_call(store)
    text = _big_text(2 * CHUNK_BYTES + 999)
    (msg,) = await store.append(tid, _result(text))
    block = msg.content[0]
    assert isinstance(block, ToolResultBlock)
    for lo, hi in [
        (0, 10),
        (CHUNK_BYTES - 5, CHUNK_BYTES + 5),
        (CHUNK_BYTES, CHUNK_BYTES + 1),
        (2 * CHUNK_BYTES - 1, len(text)),
        (len(text) - 3, len(text) + 100),
        (5, 5),
    ]:
        assert await store.output_text(msg, block, start=lo, end=hi) == text[lo:hi], (lo, hi)
    pieces = [p async for p in store.output_pieces(tid, 3, "t1")]
    assert len(pieces) == 3 and "".join(pieces) == text


async def test_an_output_file_is_decoded_as_utf8_with_replacement_and_stored_whole(
    store: Store,
) -> None:
    tid = await _thread_with_call(store)
    # a three-byte character cut by the 1 MiB read boundary, and bytes that are not UTF-8
    raw = b"a" * (CHUNK_BYTES - 1) + "✓".encode() + b"b" * CHUNK_BYTES + b"\xff\xfe tail\n"
    f = OutputFile()
    f.write(raw)
    placeholder = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="t1")])
    try:
        (msg,) = await store.append(tid, placeholder, output_files={"t1": f})
    finally:
        f.close()
    block = msg.content[0]
    assert isinstance(block, ToolResultBlock) and block.stored is not None
    expected = raw.decode("utf-8", "replace")
    assert await store.output_text(msg, block) == expected
    assert block.stored.chars == len(expected)
    assert block.stored.sha256 == hashlib.sha256(expected.encode()).hexdigest()


async def test_a_small_output_file_is_stored_inline(store: Store) -> None:
    tid = await _thread_with_call(store)
    f = OutputFile()
    f.write(b"short\n[exit code: 0]")
    (msg,) = await store.append(
        tid,
        NewMessage(role="user", content=[ToolResultBlock(tool_use_id="t1")]),
        output_files={"t1": f},
    )
    block = msg.content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.stored is None and block.text == "short\n[exit code: 0]"
    assert await count_rows(store, "outputs") == 0


async def test_a_fork_reads_its_parents_outputs_without_copying_them(store: Store) -> None:
    tid = await _thread_with_call(store)
    text = _big_text(INLINE_LIMIT + 5000)
    await store.append(tid, _result(text))
    rows = await count_rows(store, "outputs")
    fork = await store.fork(tid, messages=[user("and now?")])
    fork2 = await store.fork(fork.id)
    assert await count_rows(store, "outputs") == rows
    for thread in (fork.id, fork2.id):
        msg = await store.message(thread, 3)
        assert msg.thread_id == tid  # inherited: the parent's row
        block = msg.content[0]
        assert isinstance(block, ToolResultBlock)
        assert await store.output_text(msg, block) == text
        # the fork's own id names the same output (the store walks the fork chain)
        pieces = [p async for p in store.output_pieces(thread, 3, "t1", start=len(text) - 12)]
        assert "".join(pieces) == text[-12:]


async def test_nothing_of_an_append_refused_by_the_invariant_or_the_lease_is_stored(
    store: Store,
) -> None:
    tid = await _thread_with_call(store)
    big = _big_text(INLINE_LIMIT + 10)
    with pytest.raises(InvariantError):  # answers a tool_use that does not exist
        await store.append(tid, _result(big, tid="nope"))
    await store.leases.acquire(tid, "runner-a")
    with pytest.raises(LeaseLost):
        await store.append(tid, _result(big), lease_owner="runner-b")
    assert await count_rows(store, "outputs") == 0
    assert (await store.get_thread(tid)).head_seq == 2


async def test_a_block_claiming_to_be_stored_apart_is_refused(store: Store) -> None:
    tid = await _thread_with_call(store)
    fake = StoredOutput(chars=9, bytes=9, chunks=1, head=1, tail=1, sha256="0" * 64)
    msg = NewMessage(
        role="user", content=[ToolResultBlock(tool_use_id="t1", content="x", stored=fake)]
    )
    with pytest.raises(InvariantError, match="'stored' is set by the store only"):
        await store.append(tid, msg)
    assert (await store.get_thread(tid)).head_seq == 2


async def test_search_indexes_the_preview_of_an_output_stored_apart(store: Store) -> None:
    tid = await _thread_with_call(store)
    text = "firstword " + "filler " * (INLINE_LIMIT // 7) + " middleword " + "filler " * 200_000
    text += " lastword"
    await store.append(tid, _result(text))
    assert [h.ref for h in await store.search("firstword")] == [f"T-{tid}#3"]
    assert [h.ref for h in await store.search("lastword")] == [f"T-{tid}#3"]
    assert await store.search("middleword") == []  # documented: the preview only


async def test_a_direct_connection_cannot_rewrite_or_delete_stored_outputs(
    store: Store, backend: str, db_url: str
) -> None:
    tid = await _thread_with_call(store)
    text = _big_text(INLINE_LIMIT + 10)
    await store.append(tid, _result(text))
    attacks = [
        f"UPDATE outputs SET data = x'00' WHERE thread_id = '{tid}'",
        f"DELETE FROM outputs WHERE thread_id = '{tid}'",
    ]
    if backend == "postgres":
        attacks = [a.replace("x'00'", "'\\x00'::bytea") for a in attacks]
        attacks.append("TRUNCATE outputs")
    for attack in attacks:
        error = await raw_sql(backend, db_url, attack)
        assert error is not None and "outputs are append-only" in error, attack
    msg = await store.message(tid, 3)
    assert await store.output_text(msg, msg.content[0]) == text  # type: ignore[arg-type]


async def test_import_of_a_huge_line_stores_it_apart_and_export_parts_give_the_line_back(
    store: Store,
) -> None:
    text = _big_text(INLINE_LIMIT + 77)
    lines = [
        json.dumps({"role": "user", "content": "run it"}),
        json.dumps(
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash"}]}
        ),
        json.dumps(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": text, "is_error": False}
                ],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ),
    ]
    msgs = parse_transcript("\n".join(lines))
    t = await store.create_thread(kind="worker", messages=msgs)
    stored = await store.message(t.id, 3)
    block = stored.content[0]
    assert isinstance(block, ToolResultBlock) and block.stored is not None
    assert await count_rows(store, "outputs") > 0
    # the export's line, streamed from its parts, is the line of the same message inline
    out: list[str] = []
    for part in transcript_parts(stored):
        if isinstance(part, str):
            out.append(part)
        else:
            async for piece in store.output_pieces(stored.thread_id, stored.seq, part.tool_use_id):
                out.append(json.dumps(piece, ensure_ascii=False)[1:-1])
    assert "".join(out) == transcript_line(msgs[2]) == lines[2]


def test_an_imported_line_carrying_stored_is_refused_naming_its_line() -> None:
    line = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "x", "stored": {"chars": 1}}
        ],
    }
    text = "\n".join(
        [
            json.dumps({"role": "user", "content": "go"}),
            json.dumps({"role": "assistant", "content": [_use_json()]}),
            json.dumps(line),
        ]
    )
    with pytest.raises(ImportFormatError, match=r"^t\.jsonl:3: content\[0\] \(tool_result\): "):
        parse_transcript(text, source="t.jsonl")


def _use_json() -> dict[str, Any]:
    return {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}


def _alembic(sync_conn: Any, action: str, revision: str) -> None:
    from alembic import command

    from store._engine import alembic_config

    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    getattr(command, action)(cfg, revision)


def _tables(sync_conn: Any) -> set[str]:
    import sqlalchemy as sa

    return set(sa.inspect(sync_conn).get_table_names())


async def test_migration_0004_goes_down_to_0003_and_up_again(empty_db_url: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from store import database_url

    engine = create_async_engine(database_url(empty_db_url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "0004")
        async with engine.connect() as conn:
            assert "outputs" in await conn.run_sync(_tables)
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "downgrade", "0003")
        async with engine.connect() as conn:
            tables = await conn.run_sync(_tables)
            assert "outputs" not in tables and "messages" in tables
        async with engine.begin() as conn:
            await conn.run_sync(_alembic, "upgrade", "head")
    finally:
        await engine.dispose()
    store = await Store.open(empty_db_url)
    try:
        tid = await _thread_with_call(store)
        text = _big_text(INLINE_LIMIT + 1)
        (msg,) = await store.append(tid, _result(text))
        assert await store.output_text(msg, msg.content[0]) == text  # type: ignore[arg-type]
    finally:
        await store.close()
