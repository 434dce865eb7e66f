"""Transcripts as JSON lines: the format of ``threadloom import`` and ``export --format jsonl``.

One message a line: ``{"role": "user" | "assistant", "content": str | [block, …]}``, blocks in
the Anthropic Messages format (``text``, ``thinking``, ``tool_use``, ``tool_result``). Blank
lines are ignored; ``cache_control`` keys are dropped from blocks (a request-time marker, never
stored); any other unknown key, role or block type is refused. The pairing invariant (SPEC
§Threads) is checked line by line, so the first problem is reported at its line. A trailing
``tool_use`` with no answer is accepted: resuming the thread answers it.

Every problem is one ``ImportFormatError`` naming the line and what is wrong::

    transcript.jsonl:7: content[1] (tool_use): missing key 'id'

``dump_transcript(parse_transcript(text))`` reproduces each message's content exactly, and
``parse_transcript(dump_transcript(msgs))`` gives back ``msgs``.

A tool output stored apart (``ToolResultBlock.stored``) is exported whole, as if it were inline:
``transcript_parts`` cuts the line where its text goes, for the exporter to stream it from the
store, and the ``stored`` key never appears in a transcript (an import refuses it; importing a
line whose output is large stores it apart again, by the same rule as any append).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from store import (
    ImportFormatError,
    InvariantError,
    NewMessage,
    ToolResultBlock,
    ValidationError,
    check_append,
    validate_blocks,
)

BLOCK_TYPES = ("text", "thinking", "tool_use", "tool_result")
_MESSAGE_KEYS = frozenset({"role", "content"})
_STRIPPED_KEYS = frozenset({"cache_control"})


def parse_transcript(text: str | Iterable[str], *, source: str = "transcript") -> list[NewMessage]:
    """Parse JSONL transcript text (or its lines) into messages ready to append to a new thread.

    Raises ``ImportFormatError`` (with ``line`` set) at the first bad line; ``source`` names the
    file in the message."""
    # JSON Lines ends a line at "\n" only: ``str.splitlines`` would also split inside strings
    # holding U+2028, U+2029 or U+0085, which ``export`` writes unescaped
    lines = text.split("\n") if isinstance(text, str) else text
    out: list[NewMessage] = []
    pending: tuple[str, ...] = ()
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip(" \t\r\n\ufeff" if lineno == 1 else " \t\r\n")
        if not line:
            continue

        def bad(what: str, lineno: int = lineno) -> ImportFormatError:
            return ImportFormatError(f"{source}:{lineno}: {what}", line=lineno)

        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as err:
            raise bad(f"bad JSON: {err.msg} (column {err.colno})") from None
        except RecursionError:
            raise bad("bad JSON: nested too deeply to parse") from None
        except ValueError as err:  # NaN or Infinity; an integer of more digits than Python reads
            raise bad(f"bad JSON: {err}") from None
        problem = _unstorable(obj)
        if problem:
            raise bad(problem)
        msg = _message(obj, bad)
        try:
            pending = check_append(pending, len(out), [msg])
        except InvariantError as err:
            raise bad(str(err)) from None
        out.append(msg)
    return out


MAX_DEPTH = 64
"""How deep a message's JSON may nest; content blocks need five levels."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (standard JSON has no NaN or Infinity)")


def _unstorable(obj: Any) -> str | None:
    """Why ``obj`` cannot be stored as UTF-8 JSON (too deep, a lone surrogate), or None."""
    stack: list[tuple[Any, int, str]] = [(obj, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels (at {where or 'the top'})"
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as err:
                return (
                    f"{where or 'a string'} holds a lone surrogate "
                    f"(U+{ord(value[err.start]):04X}), which is not valid Unicode text"
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                stack.append((key, depth + 1, f"{where}.{key}" if where else str(key)))
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{where}[{i}]") for i, item in enumerate(value))
    return None


def transcript_line(message: NewMessage) -> str:
    """One message as one JSONL line (no newline): its content blocks exactly as stored."""
    return json.dumps(
        {
            "role": message.role,
            "content": [b.model_dump(mode="json", exclude_none=True) for b in message.content],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def transcript_parts(message: NewMessage) -> list[str | ToolResultBlock]:
    """``transcript_line(message)`` with each tool output stored apart left out: the strings are
    the line's JSON text, and each block stands where the JSON-escaped characters of its whole
    output go (between the quotes of its ``content``), so the line written with them is the one
    ``transcript_line`` gives for the same message with that output inline."""
    if not any(isinstance(b, ToolResultBlock) and b.stored is not None for b in message.content):
        return [transcript_line(message)]
    parts: list[str | ToolResultBlock] = []
    text = '{"role":' + json.dumps(message.role) + ',"content":['
    for i, b in enumerate(message.content):
        if i:
            text += ","
        data = b.model_dump(mode="json", exclude_none=True)
        if not (isinstance(b, ToolResultBlock) and b.stored is not None):
            text += json.dumps(data, ensure_ascii=False, separators=(",", ":"))
            continue
        del data["stored"]
        data["content"] = "\x00"
        dumped = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        before, after = dumped.split('"content":"\\u0000"', 1)
        parts += [text + before + '"content":"', b]
        text = '"' + after
    parts.append(text + "]}")
    return parts


def dump_transcript(messages: Iterable[NewMessage]) -> str:
    """The JSONL text of ``messages``, one line each, newline-terminated."""
    return "".join(f"{transcript_line(m)}\n" for m in messages)


# ----------------------------------------------------------------- validation


def _message(obj: Any, bad: Any) -> NewMessage:
    if not isinstance(obj, dict):
        raise bad(f'expected an object {{"role": …, "content": …}}, got {_json_type(obj)}')
    unknown = sorted(set(obj) - _MESSAGE_KEYS)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (a message has only 'role' and 'content')")
    for key in ("role", "content"):
        if key not in obj:
            raise bad(f"missing key {key!r}")
    role = obj["role"]
    if role not in ("user", "assistant"):
        raise bad(f"role must be 'user' or 'assistant', got {json.dumps(role)}")
    content = obj["content"]
    if isinstance(content, str):
        if not content:
            raise bad("content is empty")
        blocks: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        if not content:
            raise bad("content is empty")
        blocks = [_block(b, i, bad) for i, b in enumerate(content)]
    else:
        raise bad(f"content must be a string or a list of blocks, got {_json_type(content)}")
    try:
        validated = validate_blocks(blocks)
    except ValidationError as err:
        raise bad(_describe(err, blocks)) from None
    return NewMessage(role=role, content=validated)


def _block(block: Any, index: int, bad: Any) -> dict[str, Any]:
    where = f"content[{index}]"
    if not isinstance(block, dict):
        raise bad(f"{where} must be a block object, got {_json_type(block)}")
    kind = block.get("type")
    if kind is None:
        raise bad(f"{where} has no 'type'")
    if kind not in BLOCK_TYPES:
        raise bad(
            f"{where}: unknown block type {json.dumps(kind)} (expected {', '.join(BLOCK_TYPES)})"
        )
    out = {k: v for k, v in block.items() if k not in _STRIPPED_KEYS}
    if kind == "tool_result" and "stored" in out:
        # set by the store only, on an output it keeps apart; an export writes outputs whole
        raise bad(f"{where} (tool_result): unknown key 'stored'")
    if kind == "tool_result" and isinstance(out.get("content"), list):
        inner: list[Any] = []
        for j, sub in enumerate(out["content"]):
            if not isinstance(sub, dict) or sub.get("type") != "text":
                got = sub.get("type") if isinstance(sub, dict) else _json_type(sub)
                raise bad(
                    f"{where}.content[{j}]: a tool_result holds text blocks only, got"
                    f" {json.dumps(got)}"
                )
            inner.append({k: v for k, v in sub.items() if k not in _STRIPPED_KEYS})
        out["content"] = inner
    return out


def _describe(err: ValidationError, blocks: list[Any]) -> str:
    """The first validation error as ``content[i] (type): field: what``."""
    first = err.errors()[0]
    loc = list(first["loc"])
    parts: list[str] = []
    if loc and isinstance(loc[0], int):
        index = int(loc.pop(0))
        kind = blocks[index].get("type") if index < len(blocks) else None
        parts.append(f"content[{index}] ({kind})")
        if loc and loc[0] == kind:  # the discriminator's tag, not a field
            loc.pop(0)
    field = ".".join(str(x) for x in loc)
    if first["type"] == "missing":
        what = f"missing key {field!r}"
    elif first["type"] == "extra_forbidden":
        what = f"unknown key {field!r}"
    else:
        what = f"{field}: {first['msg']}" if field else first["msg"]
    return ": ".join([*parts, what])


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"
