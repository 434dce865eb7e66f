"""Bounded pages of a transcript, for ``read_thread`` (the lead's and the readers' tool).

A page never exceeds ``max_chars``; it names the range it shows and the ref of the next page, so
the reader walks a long transcript in steps whose size it chooses, and its context only grows by
what it asked for.

A message larger than a page — in any mode: a 50,000-character tool output under the 20,000
an MCP page holds, or one with an output stored apart (``ToolResultBlock.stored``, whose whole
text is read from the store only where the page falls) — is paged through itself: the next-page
ref then carries a character offset into that message's text as the mode renders it,
``T-<id>#7-@20000`` (the range as asked, then ``@`` and the offset). Every page that stops
before the end of its range names the ref that reads on; none says "read it with a larger
max_chars". ``overview`` and ``grep`` see an output stored apart by its inline preview (its head
and tail).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import regex

from store import (
    ContentBlock,
    Message,
    ResolvedRef,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    format_ref,
)

from ..errors import ReadError
from ..views import output_summary

Mode = Literal["messages", "overview", "tool_outputs", "grep"]
DEFAULT_MAX_CHARS = 12_000
MIN_MAX_CHARS = 500
MAX_MAX_CHARS = 100_000
_GREP_LINE_CHARS = 300
GREP_BUDGET_S = 2.0
"""How long one page's grep may spend matching. A pattern comes from a model or a client, and
one that backtracks catastrophically (``(a|aa)+$``) would otherwise match for ever."""
_FRAME = 300
"""Room a page keeps for its header (with a note) and footer: the body holds max_chars - 300."""

REF_DESCRIPTION = (
    "T-<id> (or a unique start of the id, T-01m9…, or a unique end, T-…x2p4), optionally with a"
    " range: T-<id>#7, #7-12 or #7- (message 7 to the end). To read on, pass the `next` ref a"
    " page names: a message longer than a page is read on from a character offset,"
    " T-<id>#7-@20000 (message 7 from its character 20,000, then the rest of the range)."
)
"""What ``read_thread``'s ``ref`` takes: the lead's tool and MCP's say the same."""

READ_THREAD_DESCRIPTION = (
    "A bounded page of any thread's transcript by ref: overview (one line a message), messages,"
    " tool_outputs (the raw outputs) or grep (lines matching pattern, a regular expression)."
    " Every page that stops before the end of its range names the ref of the next page"
    " (`next page: T-…`; a message longer than a page continues as T-<id>#7-@20000, from that"
    " character): read it with that ref, in the same mode, until the page says (end of range)."
)


@dataclass(frozen=True, slots=True)
class Page:
    text: str
    next_ref: str | None


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _call(use: ToolUseBlock, limit: int = 160) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in use.input.items())
    return _one_line(f"{use.name}({args})", limit)


def _stored_chars(b: ToolResultBlock) -> int:
    return b.stored.chars if b.stored is not None else len(b.text)


def overview_line(msg: Message, thread_id: str) -> str:
    parts: list[str] = []
    for b in msg.content:
        if isinstance(b, TextBlock) and b.text.strip():
            parts.append(_one_line(b.text, 140))
        elif isinstance(b, ThinkingBlock):
            parts.append("(thinking)")
        elif isinstance(b, ToolUseBlock):
            parts.append("→ " + _call(b, 120))
        elif isinstance(b, ToolResultBlock):
            text = b.text
            # a failed command says "exit 1" and the line that tells, not "ok" and its first
            status, telling = output_summary(text, is_error=b.is_error)
            if b.stored is not None:
                size = f"{b.stored.chars:,} chars, stored apart"
            else:
                size = f"{text.count(chr(10)) + 1} lines · {len(text):,} chars"
            parts.append(f"← {status} · {size}: {_one_line(telling, 80)}")
    return f"{format_ref(thread_id, msg.seq)} {msg.role}: " + " | ".join(parts)


def message_text(msg: Message, thread_id: str) -> str:
    out = [f"--- {format_ref(thread_id, msg.seq)} {msg.role}"]
    out += [_block_text(b) for b in msg.content]
    return "\n".join(out)


def _block_text(b: ContentBlock) -> str:
    if isinstance(b, TextBlock):
        return b.text
    if isinstance(b, ThinkingBlock):
        return f"(thinking) {b.thinking}"
    if isinstance(b, ToolUseBlock):
        return f"→ {b.name} {json.dumps(b.input, ensure_ascii=False)}"
    return f"← {'error' if b.is_error else 'result'}:\n{b.text}"


Part = str | ToolResultBlock
"""A piece of a message's text: literal, or the whole output of a block stored apart."""


def _parts(msg: Message, thread_id: str, mode: Mode) -> list[Part] | None:
    """The text of ``msg`` in mode ``messages`` (``message_text``) or ``tool_outputs`` (its
    outputs, each under its tool_use_id), with each output stored apart left as its block; None
    when the mode shows nothing of the message."""
    if mode == "tool_outputs":
        results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
        if not results:
            return None
        parts: list[Part] = [f"--- {format_ref(thread_id, msg.seq)} tool outputs"]
        for r in results:
            parts.append(f"\n[{r.tool_use_id}{' error' if r.is_error else ''}]\n")
            parts.append(r if r.stored is not None else r.text)
        return parts
    parts = [f"--- {format_ref(thread_id, msg.seq)} {msg.role}"]
    for b in msg.content:
        if isinstance(b, ToolResultBlock) and b.stored is not None:
            parts += [f"\n← {'error' if b.is_error else 'result'}:\n", b]
        else:
            parts.append("\n" + _block_text(b))
    return parts


def _part_len(part: Part) -> int:
    return len(part) if isinstance(part, str) else _stored_chars(part)


async def _slice(store: Store, msg: Message, parts: Sequence[Part], start: int, n: int) -> str:
    """Characters ``start..start+n`` of the text ``parts`` make, reading stored outputs from
    the store only where the slice falls."""
    out: list[str] = []
    pos = 0
    end = start + n
    for part in parts:
        size = _part_len(part)
        lo, hi = max(start - pos, 0), min(end - pos, size)
        if lo < hi:
            if isinstance(part, str):
                out.append(part[lo:hi])
            else:
                out.append(await store.output_text(msg, part, start=lo, end=hi))
        pos += size
        if pos >= end:
            break
    return "".join(out)


def _grep_lines(
    msg: Message, thread_id: str, pattern: regex.Pattern[str], deadline: float
) -> list[str]:
    ref = format_ref(thread_id, msg.seq)
    lines = []
    for line in message_text(msg, thread_id).splitlines()[1:]:
        try:
            found = pattern.search(line, timeout=max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise ReadError(
                f"pattern {pattern.pattern[:80]!r} took longer than {GREP_BUDGET_S:g} s on {ref}"
                " (it backtracks too much): make it simpler or more specific"
            ) from None
        if found:
            lines.append(f"{ref}: {_one_line(line, _GREP_LINE_CHARS)}")
    return lines


def _compile(mode: Mode, pattern: str | None) -> regex.Pattern[str] | None:
    if mode != "grep":
        return None
    if not pattern:
        raise ReadError("mode 'grep' needs a pattern")
    try:
        return regex.compile(pattern)
    except regex.error as err:
        raise ReadError(f"bad pattern {pattern!r}: {err}") from None


def _rendered(
    msg: Message, thread_id: str, mode: Mode, rx: regex.Pattern[str] | None, deadline: float
) -> list[Part] | None:
    """``msg`` as ``mode`` shows it: its parts (each output stored apart left as its block, in
    ``messages`` and ``tool_outputs``), or None when the mode shows nothing of it."""
    if mode in ("messages", "tool_outputs"):
        return _parts(msg, thread_id, mode)
    if mode == "overview":
        return [overview_line(msg, thread_id)]
    assert rx is not None
    lines = _grep_lines(msg, thread_id, rx, deadline)
    return ["\n".join(lines)] if lines else None


def _larger_than_a_page(parts: Sequence[Part] | None, max_chars: int) -> bool:
    if parts is None:
        return False
    if any(not isinstance(p, str) for p in parts):
        return True  # an output stored apart: paged through on its own, however long
    return sum(_part_len(p) for p in parts) > max_chars - _FRAME


def paginate(
    thread_id: str,
    msgs: Sequence[Message],
    *,
    mode: Mode,
    max_chars: int,
    total: int,
    range_end: int,
    pattern: str | None = None,
    note: str = "",
) -> Page:
    """Render ``msgs`` (consecutive, from the requested start) in ``mode`` within ``max_chars``;
    ``note`` (at most a line) goes after the header. The first message fits the page
    (``read_page`` pages one larger than a page through itself); the page stops before the
    first that does not fit, and names it as the next."""
    if not msgs:
        return Page(f"{format_ref(thread_id)} has {total} messages; nothing in that range.", None)
    rx = _compile(mode, pattern)
    deadline = time.monotonic() + GREP_BUDGET_S  # the grep's: matching starts now
    first = msgs[0].seq
    budget = max_chars - _FRAME
    body: list[str] = []
    used = 0
    last_done = first - 1
    for msg in msgs:
        parts = _rendered(msg, thread_id, mode, rx, deadline)
        if msg.seq != first and _larger_than_a_page(parts, max_chars):
            break  # paged through on its own, from the next page
        chunk = "".join(p for p in parts or () if isinstance(p, str))
        cost = len(chunk) + 1 if chunk else 0
        if msg.seq != first and used + cost > budget:
            break
        if chunk:
            body.append(chunk)
            used += cost
        last_done = msg.seq
    next_ref = None
    if last_done < range_end:
        next_ref = (
            format_ref(thread_id, last_done + 1, None, True)
            if range_end >= total
            else format_ref(thread_id, last_done + 1, range_end)
        )
    header = f"{format_ref(thread_id, first, last_done)} of {total} messages ({mode})"
    if note:
        header += f"\n{note}"
    if mode == "grep" and not body:
        body.append(f"no line matches {pattern!r}")
    footer = f"next page: {next_ref}" if next_ref else "(end of range)"
    text = "\n".join([header, *body, footer])
    return Page(text[:max_chars], next_ref)


def split_offset(ref: str) -> tuple[str, int]:
    """``T-…#7-@120000`` → (``T-…#7-``, 120000); a ref without ``@`` → (ref, 0). Callers that
    check a ref before paging (a reader confined to one thread) resolve the first part."""
    base, at, tail = ref.rpartition("@")
    if not at:
        return ref, 0
    if "#" not in base or not tail.isascii() or not tail.isdigit() or len(tail) > 18:
        raise ReadError(
            f"bad ref {ref[:80]!r}: after '@' comes a character offset into the ref's first"
            " message (T-…#7-@120000)"
        )
    return base, int(tail)


async def read_page(
    store: Store,
    ref: str,
    *,
    mode: Mode = "overview",
    pattern: str | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Page:
    """The page of ``ref`` (a thread, or a range in it; ``…@N``: from character N of its first
    message) in ``mode``, at most ``max_chars``."""
    if mode not in ("messages", "overview", "tool_outputs", "grep"):
        raise ReadError(f"unknown mode {mode!r}: use messages, overview, tool_outputs or grep")
    asked_ref = ref
    ref, offset = split_offset(ref)
    asked = int(max_chars)
    max_chars = max(MIN_MAX_CHARS, min(asked, MAX_MAX_CHARS))
    note = (
        f"(max_chars {asked} is outside {MIN_MAX_CHARS}-{MAX_MAX_CHARS}; this page uses"
        f" {max_chars})"
        if asked != max_chars
        else ""
    )
    rx = _compile(mode, pattern)
    resolved = await store.resolve(ref)
    info = resolved.thread
    start = resolved.start or 1
    range_end = info.head_seq if resolved.end is None else resolved.end
    # one page comes from a bounded window of messages, whatever the thread's length
    window = {"overview": max(20, max_chars // 40), "grep": 500}.get(mode, 50)
    msgs = await store.messages(info.id, start=start, end=min(range_end, start + window - 1))
    if msgs:
        # the first message as the mode renders it: a message larger than a page is paged
        # through itself. A grep (here, and over up to 500 messages below) runs in a thread,
        # so that the event loop (a job's other threads, an MCP server's calls) never waits
        render = functools.partial(
            _rendered, msgs[0], info.id, mode, rx, time.monotonic() + GREP_BUDGET_S
        )
        parts = await asyncio.to_thread(render) if mode == "grep" else render()
        if offset and parts is None:
            raise ReadError(
                f"{asked_ref[:80]!r}: {mode} shows nothing of {format_ref(info.id, start)}"
                " to read on from"
            )
        if parts is not None and (offset or _larger_than_a_page(parts, max_chars)):
            return await _page_in_message(
                store, info.id, msgs[0], parts, offset, max_chars, info.head_seq, resolved, note
            )
    page = functools.partial(
        paginate,
        info.id,
        msgs,
        mode=mode,
        max_chars=max_chars,
        total=info.head_seq,
        range_end=range_end,
        pattern=pattern,
        note=note,
    )
    return await asyncio.to_thread(page) if mode == "grep" else page()


async def _page_in_message(
    store: Store,
    thread_id: str,
    msg: Message,
    parts: Sequence[Part],
    offset: int,
    max_chars: int,
    total: int,
    resolved: ResolvedRef,
    note: str,
) -> Page:
    """One page of a single message's text from character ``offset``, its outputs stored
    apart read only where the page falls."""
    size = sum(_part_len(p) for p in parts)
    offset = min(offset, size)
    budget = max_chars - _FRAME
    body = await _slice(store, msg, parts, offset, budget)
    end = offset + len(body)
    range_end = total if resolved.end is None else resolved.end
    open_end = resolved.end is None or resolved.end >= total
    if end < size:
        anchor = format_ref(thread_id, msg.seq, None if open_end else range_end, open_end)
        if not open_end and range_end == msg.seq:
            anchor = format_ref(thread_id, msg.seq)
        next_ref: str | None = f"{anchor}@{end}"
    elif msg.seq < range_end:
        next_ref = (
            format_ref(thread_id, msg.seq + 1, None, True)
            if open_end
            else format_ref(thread_id, msg.seq + 1, range_end)
        )
    else:
        next_ref = None
    header = (
        f"{format_ref(thread_id, msg.seq)} of {total} messages: characters {offset:,}-{end:,}"
        f" of its {size:,}"
    )
    if note:
        header += f"\n{note}"
    footer = f"next page: {next_ref}" if next_ref else "(end of range)"
    return Page("\n".join([header, body, footer])[:max_chars], next_ref)
