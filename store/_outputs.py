"""Tool outputs too large to keep inline in their message: stored whole, apart, in chunks.

SPEC: every tool output is stored whole. Small ones (the usual case) stay inline in their
``tool_result`` block exactly as always. One longer than ``INLINE_LIMIT`` characters — or handed
to ``Store.append`` as an ``OutputFile`` (``bash`` spills a large output to one instead of
holding it in memory) — is stored as:

- its message's block: ``content`` is a preview (the first ``PREVIEW_HEAD`` characters, a marker
  line naming the whole size and the ref, the last ``PREVIEW_TAIL`` characters) and ``stored``
  (``StoredOutput``) records the whole output's size, chunk count and SHA-256;
- rows of ``outputs`` (thread_id, seq, tool_use_id, chunk, start, data): the whole text as UTF-8,
  in chunks of about ``CHUNK_BYTES``, each ending at a character boundary (so each decodes on its
  own) and ``start`` the offset of its first character, so a reader seeks to any character.

The chunks are written in the same transaction as the message (SPEC invariant 2), streamed from
the file or sliced from the string, so memory stays bounded by a chunk, not the output. A fork's
inherited messages' outputs are their owner's rows (readers walk the fork chain, as for
messages); nothing is copied. The full-text index sees the block's preview only. Outputs are
stored as they were — the record — like inline ones; ``show --redact``/``export --redact`` mask
them when they are read.

``MAX_OUTPUT_BYTES`` (4 GiB) is the documented ceiling per output: ``bash`` keeps the first
``MAX_OUTPUT_BYTES - 1 MiB`` and the last MiB of a larger one around a marker, as it always did
beyond its cap.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import IO, Any

from ._sqlite import Tx
from .errors import InvariantError
from .models import NewMessage, StoredOutput, ToolResultBlock
from .refs import format_ref

INLINE_LIMIT = 1 << 20
"""Characters: a tool output longer than this is stored apart (1 MiB of ASCII text)."""
CHUNK_BYTES = 1 << 20
"""About how many bytes each ``outputs`` row holds (a string is cut every 1 Mi characters)."""
MAX_OUTPUT_BYTES = 4 << 30
"""The ceiling of one stored output (4 GiB); ``bash`` keeps head and tail beyond it."""
PREVIEW_HEAD = 64 * 1024
PREVIEW_TAIL = 32 * 1024
"""Characters of a stored-apart output kept inline in its block: enough for the model's view
(head and tail of 30,000 characters by default) to be exactly what it would be inline."""


class OutputFile:
    """A tool's output held in a file instead of memory. Its bytes, decoded as UTF-8 with
    invalid sequences replaced (as inline outputs are decoded), are the output's whole text.

    The file is an anonymous temporary file (unlinked at creation), so nothing is left on disk
    whatever happens to the process; ``close()`` frees it — whoever appends it closes it after
    the append."""

    def __init__(self, file: IO[bytes] | None = None) -> None:
        self.file: IO[bytes] = file if file is not None else tempfile.TemporaryFile()  # noqa: SIM115 (owned)
        self.size = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.size += len(data)

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The bytes from the start, ``size`` at a time."""
        self.file.flush()
        self.file.seek(0)
        while True:
            data = self.file.read(size)
            if not data:
                return
            yield data

    def read_range(self, start: int, length: int) -> bytes:
        self.file.flush()
        self.file.seek(start)
        return self.file.read(length)

    def close(self) -> None:
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def __repr__(self) -> str:
        return f"OutputFile({self.size} bytes)"


def needs_apart(msgs: Sequence[NewMessage], files: Mapping[str, OutputFile] | None) -> bool:
    """Whether any tool result of ``msgs`` must be stored apart (the append's one extra check)."""
    if files:
        return True
    for m in msgs:
        if m.role == "user":
            for b in m.content:
                if isinstance(b, ToolResultBlock) and (
                    b.stored is not None or len(b.text) > INLINE_LIMIT
                ):
                    return True
    return False


def store_apart(
    tx: Tx,
    thread_id: str,
    first_seq: int,
    msgs: Sequence[NewMessage],
    files: Mapping[str, OutputFile] | None,
) -> list[NewMessage]:
    """``msgs`` with every large tool result (or one whose output is in ``files``, keyed by
    tool_use_id) written to ``outputs`` in this transaction and replaced by its preview block.
    Refuses a block that already carries ``stored``: only the store sets it."""
    files = files or {}
    out: list[NewMessage] = []
    for i, m in enumerate(msgs):
        seq = first_seq + i
        blocks: list[Any] = []
        changed = False
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                if b.stored is not None:
                    raise InvariantError(
                        f"tool_result {b.tool_use_id!r}: 'stored' is set by the store only"
                    )
                source: str | OutputFile | None = None
                if m.role == "user":
                    source = files.get(b.tool_use_id)
                if source is None and len(b.text) > INLINE_LIMIT:
                    source = b.text
                if source is not None:
                    ref = format_ref(thread_id, seq)
                    b = _write(tx, thread_id, seq, b, source, ref)
                    changed = True
            blocks.append(b)
        out.append(NewMessage.trusted({"role": m.role, "content": blocks}) if changed else m)
    return out


def _write(
    tx: Tx,
    thread_id: str,
    seq: int,
    block: ToolResultBlock,
    source: str | OutputFile,
    ref: str,
) -> ToolResultBlock:
    if isinstance(source, OutputFile) and source.size <= INLINE_LIMIT:
        # small after all: inline, as any small output (bytes >= characters)
        text = b"".join(source.chunks()).decode("utf-8", "replace")
        return ToolResultBlock(tool_use_id=block.tool_use_id, content=text, is_error=block.is_error)
    key = {"thread_id": thread_id, "seq": seq, "tool_use_id": block.tool_use_id}
    digest = hashlib.sha256()
    chars = nbytes = chunk = 0
    head = ""
    tail = ""
    for piece in _pieces(source):
        data = piece.encode("utf-8")
        tx.execute(_INSERT, {**key, "chunk": chunk, "start": chars, "data": data})
        digest.update(data)
        chunk += 1
        nbytes += len(data)
        chars += len(piece)
        if len(head) < PREVIEW_HEAD:
            head += piece[: PREVIEW_HEAD - len(head)]
        tail = (tail + piece if len(piece) < PREVIEW_TAIL else piece)[-PREVIEW_TAIL:]
    kept_head = len(head)
    kept_tail = min(len(tail), chars - kept_head)
    tail = tail[len(tail) - kept_tail :] if kept_tail else ""
    stored = StoredOutput(
        chars=chars,
        bytes=nbytes,
        chunks=chunk,
        head=kept_head,
        tail=kept_tail,
        sha256=digest.hexdigest(),
    )
    return ToolResultBlock(
        tool_use_id=block.tool_use_id,
        content=head + preview_marker(stored, ref) + tail,
        is_error=block.is_error,
        stored=stored,
    )


_INSERT = (
    "INSERT INTO outputs (thread_id, seq, tool_use_id, chunk, start, data)"
    " VALUES (:thread_id, :seq, :tool_use_id, :chunk, :start, :data)"
)


def preview_marker(stored: StoredOutput, ref: str) -> str:
    """The line between a stored-apart output's head and tail in its preview."""
    omitted = stored.chars - stored.head - stored.tail
    return (
        f"\n\n[… {omitted:,} characters not in this preview; the whole output"
        f" ({stored.chars:,} characters, {stored.bytes:,} bytes) is stored with {ref}:"
        f" `threadloom show {ref} --raw` …]\n\n"
    )


def _pieces(source: str | OutputFile) -> Iterator[str]:
    """The text of ``source`` in pieces of about ``CHUNK_BYTES`` (never empty)."""
    if isinstance(source, str):
        for i in range(0, len(source), CHUNK_BYTES):
            yield source[i : i + CHUNK_BYTES]
        return
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for data in source.chunks():
        piece = decoder.decode(data)
        if piece:
            yield piece
    rest = decoder.decode(b"", final=True)
    if rest:
        yield rest


# ----------------------------------------------------------------- reading

_KEY = "thread_id = :thread_id AND seq = :seq AND tool_use_id = :tool_use_id"
_FIRST = f"SELECT chunk FROM outputs WHERE {_KEY} AND start <= :pos ORDER BY chunk DESC LIMIT 1"
_CHUNK = f"SELECT start, data FROM outputs WHERE {_KEY} AND chunk = :chunk"

Read = Callable[[Callable[[Tx], Any]], Awaitable[Any]]
"""Runs a statement function in a read (``Database.read``)."""


def first_chunk(tx: Tx, key: Mapping[str, Any], pos: int) -> int | None:
    """The chunk holding character ``pos`` of the output ``key`` names (the last at or before
    it), None when it has none."""
    row = tx.fetchone(_FIRST, {**key, "pos": pos})
    return None if row is None else int(row[0])


def chunk(tx: Tx, key: Mapping[str, Any], n: int) -> tuple[int, bytes] | None:
    """Chunk ``n`` of the output: (its first character's offset, its UTF-8 bytes)."""
    row = tx.fetchone(_CHUNK, {**key, "chunk": n})
    return None if row is None else (int(row[0]), bytes(row[1]))


async def read_pieces(
    read: Read, key: Mapping[str, Any], *, start: int = 0, end: int | None = None
) -> AsyncIterator[str]:
    """The characters ``start..end`` (end exclusive; None: to the end) of a stored output
    (``key``: its thread_id, seq and tool_use_id), one chunk (one read) at a time."""
    n = await read(lambda tx: first_chunk(tx, key, max(start, 0)))
    if n is None:
        return
    while True:
        got: tuple[int, bytes] | None = await read(functools.partial(chunk, key=key, n=n))
        if got is None:
            return
        offset, data = got
        if end is not None and offset >= end:
            return
        piece = data.decode("utf-8")
        lo = max(start - offset, 0)
        hi = len(piece) if end is None else min(len(piece), end - offset)
        if lo < hi:
            yield piece[lo:hi] if (lo, hi) != (0, len(piece)) else piece
        n += 1


def owner_of(ancestry: Sequence[tuple[str, int]], seq: int) -> str:
    """Whose rows hold message ``seq`` of a thread with this ``Store.ancestry``."""
    for owner, bound in reversed(ancestry):
        if bound >= seq:
            return owner
    return ancestry[0][0]
