"""What a parser hands the writer: one ``Draft`` per thread, built by a ``Builder`` that keeps
the store's pairing invariant whatever order the source wrote things in.

Other agents' logs are not threadloom transcripts: an assistant turn arrives split over several
lines, each tool result on a line of its own, a call may never have been answered (the user
interrupted it), a result may answer nothing we know of. The builder takes raw turns in the
order of the conversation and gives back messages that ``check_append`` accepts:

- consecutive turns of one role become one message (tool results first in a user message);
- an assistant turn that continues an earlier one (the same source message id, with only tool
  results in between) is folded back into it, so its calls and their results stay paired;
- a call with no result gets a stored error result saying so; a result that answers no call of
  the message before it is kept as text, never dropped;
- a conversation that opens with the assistant gets a one-line user message first.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from store import (
    Kind,
    NewMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UsageRecord,
)

from ._lines import first_text

Block = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock

NO_RESULT = "[imported: the source session recorded no result for this call]"
OPENS_WITH_ASSISTANT = "[imported: the source conversation opens with an assistant message]"
COMPACTION_MARK = "[compaction summary]"
"""First line of the user message that stands for a compaction's summary: the history before it
is imported whole, so the summary is a marked message, not a replacement."""


@dataclass
class Branch:
    """One line of a conversation, whole from its first message: the writer finds how much of
    it is stored already (in any thread of the session) and adds the rest, as an append or a
    fork. ``usage`` maps an index into ``messages`` to that assistant message's usage row."""

    messages: list[NewMessage]
    usage: dict[int, UsageRecord] = field(default_factory=dict)
    label: str = ""
    times: list[datetime | None] = field(default_factory=list)
    """Each message's time at the source (None: unknown), one a message when given."""

    def time(self, i: int) -> datetime | None:
        return self.times[i] if i < len(self.times) else None


@dataclass
class Session:
    """One source session (a Claude Code session or subagent file, a Codex rollout) as threads
    to write: ``branches[0]`` is the main line (the active branch), the others are abandoned
    ones (rewinds, edits, rolled-back turns) that become forks.

    ``key`` names it in the source (``claude-code:<session>``, ``claude-code:<session>/<agent>``,
    ``codex:<id>``) and is how a re-import finds its threads; ``parent_key`` is the session
    that spawned it (a subagent); ``fork_parent_key`` one it was forked from (its main line
    then becomes a fork of that session's thread at the history they share)."""

    key: str
    kind: Kind
    title: str
    source: dict[str, Any]
    branches: list[Branch]
    parent_key: str | None = None
    fork_parent_key: str | None = None
    created_ms: int | None = None
    model: str | None = None
    skipped: int = 0
    stat: list[int] | None = None
    """The source file's [size, mtime_ns] when it was read (``_lines.JsonLines.stat``)."""
    chain: Any = None
    """The parser's own state, kept for linking sessions across files (``claude_code.link``)."""


@dataclass
class _Raw:
    role: str
    blocks: list[Block]
    msg_id: str | None = None
    usage: UsageRecord | None = None
    turn: bool = False
    alone: bool = False
    at: int | None = None


class Builder:
    """Raw turns in conversation order in, invariant-keeping messages out (``messages()``).

    ``at``: the source's time (ms since the epoch) of the line being read, set by the parser
    before each line; a turn keeps the time of its first line, and so does its message."""

    def __init__(self) -> None:
        self._raw: list[_Raw] = []
        self.at: int | None = None

    def user(
        self, blocks: Sequence[Block], *, turn: bool | None = None, alone: bool = False
    ) -> None:
        """A user turn; ``turn`` says whether a person wrote it (default: it holds text), which
        is what a rollback counts; ``alone`` keeps it a message of its own (a compaction's
        summary), never merged with a neighbour."""
        if blocks:
            if turn is None:
                turn = any(isinstance(b, TextBlock) for b in blocks)
            self._raw.append(_Raw("user", list(blocks), turn=turn, alone=alone, at=self.at))

    def assistant(
        self,
        blocks: Sequence[Block],
        *,
        msg_id: str | None = None,
        usage: UsageRecord | None = None,
    ) -> None:
        """An assistant turn, or a piece of one: pieces sharing ``msg_id`` are one message when
        only tool results came between them (the usage of a later piece replaces the earlier
        one's: the source repeats it on every piece)."""
        if msg_id is not None:
            for i in range(len(self._raw) - 1, -1, -1):
                r = self._raw[i]
                if r.role == "assistant":
                    if r.msg_id == msg_id:
                        r.blocks.extend(blocks)
                        r.usage = usage or r.usage
                        return
                    break
                if not all(isinstance(b, ToolResultBlock) for b in r.blocks):
                    break
        if blocks or usage is not None:
            self._raw.append(_Raw("assistant", list(blocks), msg_id, usage, at=self.at))

    def usage_for_last_assistant(self, usage: UsageRecord) -> bool:
        """Add ``usage`` to the newest assistant turn (a source that reports usage apart from
        the turn); False when there is none yet."""
        for r in reversed(self._raw):
            if r.role == "assistant":
                r.usage = usage if r.usage is None else _add(r.usage, usage)
                return True
        return False

    def __len__(self) -> int:
        return len(self._raw)

    def snapshot(self) -> Builder:
        """A copy holding the same turns (for a branch that is abandoned later)."""
        other = Builder()
        other._raw = [
            _Raw(r.role, list(r.blocks), r.msg_id, r.usage, r.turn, r.alone, r.at)
            for r in self._raw
        ]
        return other

    def truncate(self, n: int) -> None:
        del self._raw[n:]

    def requests(self) -> list[str]:
        """The text of each user turn a person wrote, in order (what ``request_title`` reads)."""
        return [
            "\n".join(b.text for b in r.blocks if isinstance(b, TextBlock))
            for r in self._raw
            if r.role == "user" and r.turn
        ]

    def user_turn_starts(self) -> list[int]:
        """Indices of the raw user turns a person wrote (not tool results, not context)."""
        return [i for i, r in enumerate(self._raw) if r.role == "user" and r.turn]

    def branch(self, label: str = "") -> Branch:
        msgs, usage, times = self.messages()
        return Branch(msgs, usage, label, times)

    def messages(
        self,
    ) -> tuple[list[NewMessage], dict[int, UsageRecord], list[datetime | None]]:
        """The messages, the usage row of each assistant message that has one (by index), and
        each message's source time."""
        merged: list[_Raw] = []
        for r in self._raw:
            if not r.blocks and r.usage is None:
                continue
            if merged and merged[-1].role == r.role and not (merged[-1].alone or r.alone):
                last = merged[-1]
                last.blocks = last.blocks + r.blocks
                if r.usage is not None:
                    last.usage = r.usage if last.usage is None else _add(last.usage, r.usage)
            else:
                merged.append(
                    _Raw(r.role, list(r.blocks), r.msg_id, r.usage, alone=r.alone, at=r.at)
                )
        out: list[NewMessage] = []
        usage: dict[int, UsageRecord] = {}
        times: list[datetime | None] = []
        pending: list[str] = []
        for r in merged:
            at = source_time(r.at)
            if r.role == "assistant":
                blocks = _dedupe_calls(r.blocks)
                if not blocks:
                    continue
                if pending:  # an answered-nothing gap cannot happen after merging; be safe
                    out.append(_answer(pending, []))
                    times.append(at)
                if not out:
                    out.append(NewMessage.user(OPENS_WITH_ASSISTANT))
                    times.append(at)
                if r.usage is not None:
                    usage[len(out)] = r.usage
                out.append(NewMessage(role="assistant", content=blocks))
                times.append(at)
                pending = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
            else:
                out.append(_answer(pending, r.blocks))
                times.append(at)
                pending = []
        return out, usage, times


def source_time(ms: int | None) -> datetime | None:
    """A source's time (ms since the epoch) as the store takes it."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _answer(pending: Sequence[str], blocks: Sequence[Block]) -> NewMessage:
    """The user message after a turn that called ``pending``: their results first (one each,
    a stored error result for a missing one), then the rest; stray results become text."""
    results: dict[str, ToolResultBlock] = {}
    rest: list[Block] = []
    for b in blocks:
        if isinstance(b, ToolResultBlock):
            if b.tool_use_id in pending and b.tool_use_id not in results:
                results[b.tool_use_id] = b
            else:
                rest.append(TextBlock(text=f"[tool result for call {b.tool_use_id}]\n{b.text}"))
        elif isinstance(b, TextBlock):
            rest.append(b)
        elif isinstance(b, ThinkingBlock):
            rest.append(TextBlock(text=b.thinking))
        else:  # a call in a user turn: only a broken source writes one
            rest.append(TextBlock(text=f"[tool call {b.name}] {json.dumps(b.input)}"))
    head = [
        results.get(i) or ToolResultBlock(tool_use_id=i, content=NO_RESULT, is_error=True)
        for i in pending
    ]
    return NewMessage(role="user", content=[*head, *rest] or [TextBlock(text="(empty)")])


def _dedupe_calls(blocks: Sequence[Block]) -> list[Block]:
    seen: set[str] = set()
    out: list[Block] = []
    for b in blocks:
        if isinstance(b, ToolResultBlock):
            out.append(TextBlock(text=f"[tool result for call {b.tool_use_id}]\n{b.text}"))
            continue
        if isinstance(b, ToolUseBlock):
            if b.id in seen:
                continue
            seen.add(b.id)
        out.append(b)
    return out


def _add(a: UsageRecord, b: UsageRecord) -> UsageRecord:
    return UsageRecord(
        model=b.model or a.model, usage=a.usage + b.usage, cost_usd=a.cost_usd + b.cost_usd
    )


def usage_record(model: str | None, usage: Usage) -> UsageRecord:
    """A usage row priced like threadloom's own (0.0 for a model without a known price)."""
    name = model or "unknown"
    rates = _rates(name)
    cost = (
        usage.input_tokens * rates[0]
        + usage.output_tokens * rates[1]
        + usage.cache_read_input_tokens * rates[2]
        + usage.cache_creation_input_tokens * rates[3]
    )
    return UsageRecord(model=name, usage=usage, cost_usd=cost)


@functools.lru_cache(maxsize=256)
def _rates(model: str) -> tuple[float, float, float, float]:
    """``workers.providers.cost_usd`` of one token of each kind: it is linear in the counts,
    and looking the price up once per model, not once per row, is most of an import's cost."""
    from workers.providers import cost_usd

    return (
        cost_usd(model, Usage(input_tokens=1)),
        cost_usd(model, Usage(output_tokens=1)),
        cost_usd(model, Usage(cache_read_input_tokens=1)),
        cost_usd(model, Usage(cache_creation_input_tokens=1)),
    )


def fingerprint(message: NewMessage, *, outputs: bool = True) -> str:
    """A digest of a message as the store keeps it, whether its outputs are inline or stored
    apart (an output counts by the SHA-256 of its whole text, which a stored-apart block
    carries), so a re-import can tell what it already wrote without reading outputs back.
    ``outputs=False`` leaves tool results' text and error flag out: how an older mapping
    (``_writer.MAPPING``) stored the same results does not count."""
    parts: list[Any] = [message.role]
    for b in message.content:
        if isinstance(b, ToolResultBlock) and not outputs:
            parts.append(["tool_result", b.tool_use_id])
        elif isinstance(b, ToolResultBlock):
            sha = (
                b.stored.sha256
                if b.stored is not None
                else hashlib.sha256(_whole(b).encode("utf-8", "surrogatepass")).hexdigest()
            )
            parts.append(["tool_result", b.tool_use_id, b.is_error, sha])
        else:
            parts.append(b.model_dump(mode="json", exclude_none=True))
    data = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def _whole(b: ToolResultBlock) -> str:
    return b.content if isinstance(b.content, str) else "\n".join(t.text for t in b.content)


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def fork_point(messages: Sequence[NewMessage], n: int) -> int:
    """The largest valid fork point <= n: never after a message whose calls are answered in
    the next one (SPEC: a fork point never falls between a tool_use and its result)."""
    while n > 0 and messages[n - 1].tool_uses():
        n -= 1
    return n


CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "<permissions",
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
    "Caveat: The messages below were generated by the user while running local commands",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "[Request interrupted by user",
)
"""How the user-role text a CLI writes for itself begins (Codex's environment and AGENTS.md
blocks, Claude Code's local-command caveat and output, an interruption's note): context the
model saw, not a request a person typed."""
_IDE_REQUEST = "## My request for Codex:"
_COMMAND = re.compile(r"<command-name>\s*/?([^<]*?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)


def request_title(texts: Iterable[str]) -> str:
    """A title from a conversation's user turns: the first request a person wrote — not
    context the CLI wrote (``CONTEXT_PREFIXES``), the request of a Codex IDE turn (after its
    ``## My request for Codex:``), a Claude Code slash command as ``/name args`` (one without
    arguments only when nothing else was asked) — shortened to one line; "" when none."""
    bare = ""
    for text in texts:
        text = text.strip()
        if not text or text.startswith(CONTEXT_PREFIXES):
            continue
        if _IDE_REQUEST in text:
            text = text.split(_IDE_REQUEST, 1)[1].strip()
        command = _COMMAND.search(text)
        if command is not None:
            found = _COMMAND_ARGS.search(text)
            args = found.group(1).strip() if found else ""
            if not args:
                bare = bare or f"/{command.group(1)}"
                continue
            text = f"/{command.group(1)} {args}"
        if text:
            return first_text([NewMessage.user(text)])
    return bare


_PAUSES = [0]


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """The cyclic garbage collector off for an import (restored after the last of overlapping
    ones): parsing and writing a session allocates millions of objects that stay alive until
    it is written — parsed lines, blocks, messages — and hold no cycles, and the collector's
    passes over them were a third of an import's time (``tests/benchmarks/bench_import.py``).
    Reference counting still frees everything as usual; only cycles wait for the end."""
    if _PAUSES[0] == 0 and not gc.isenabled():
        yield  # someone else turned it off: theirs to turn on
        return
    _PAUSES[0] += 1
    gc.disable()
    try:
        yield
    finally:
        _PAUSES[0] -= 1
        if _PAUSES[0] == 0:
            gc.enable()
