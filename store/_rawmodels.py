"""Plain models of the read-only fast path (``store.rawread``): the attribute names of the
store's pydantic models (``ThreadInfo``, ``Message``, the content blocks, ``Result``, ``Usage``)
and, where the renderers call it, ``model_dump`` giving the same JSON — built from stored rows
without pydantic.

Built strictly: ``LIGHT_SHAPES`` is what this module knows of each stored JSON shape (fields,
defaults, order); a key it does not know, a missing required field or a wrong type raises
``Unsupported`` — the full path, whose models would normalise it, answers instead. A test
holds ``LIGHT_SHAPES`` to the pydantic models' fields.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, ClassVar, Literal

from .refs import format_ref


class Unsupported(Exception):
    """This read cannot be answered here exactly as the full store would: fall back to it."""


# ----------------------------------------------------------------- plain models
# Plain classes with __slots__, not dataclasses: nine dataclasses cost ~20 ms to define, a
# fifth of the whole fast path's budget.


class _Plain:
    """Equality and repr from ``__slots__`` (for tests and debugging)."""

    __slots__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"{type(self).__name__}({body})"


class RawFork(_Plain):
    __slots__ = ("at", "thread_id")

    def __init__(self, thread_id: str, at: int) -> None:
        self.thread_id = thread_id
        self.at = at

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id)


class RawUsage(_Plain):
    __slots__ = (
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "input_tokens",
        "output_tokens",
    )

    def __init__(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_input_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_read_input_tokens = cache_read_input_tokens
        self.cache_creation_input_tokens = cache_creation_input_tokens

    @property
    def total_tokens(self) -> int:
        return self.total_input + self.output_tokens

    @property
    def total_input(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def model_dump(self, *, mode: str = "json", exclude_none: bool = False) -> dict[str, int]:
        return {  # in ``Usage``'s field order
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }


class RawResult(SimpleNamespace):
    """A distilled result: ``Result``'s attributes, and ``model_dump`` giving its JSON."""

    def model_dump(self, *, mode: str = "json", exclude_none: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = self.__dict__["_json"]
        if exclude_none:
            return _without_none(data)  # type: ignore[no-any-return]
        return dict(data)


def _without_none(value: Any) -> Any:
    """``value`` with every None-valued key left out, at every depth (as pydantic's
    ``exclude_none`` does for nested models)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


class RawEffects(RawResult):
    """A tool call's recorded ``Effects``: its attributes, and ``model_dump`` giving its JSON."""


class RawText(_Plain):
    __slots__ = ("text",)
    type: ClassVar[Literal["text"]] = "text"

    def __init__(self, text: str) -> None:
        self.text = text

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


class RawThinking(_Plain):
    __slots__ = ("signature", "thinking")
    type: ClassVar[Literal["thinking"]] = "thinking"

    def __init__(self, thinking: str, signature: str | None = None) -> None:
        self.thinking = thinking
        self.signature = signature

    def model_dump(self, *, exclude_none: bool = False, **_: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "thinking", "thinking": self.thinking}
        if self.signature is not None or not exclude_none:
            out["signature"] = self.signature
        return out


class RawToolUse(_Plain):
    __slots__ = ("id", "input", "name")
    type: ClassVar[Literal["tool_use"]] = "tool_use"

    def __init__(self, id: str, name: str, input: dict[str, Any]) -> None:
        self.id = id
        self.name = name
        self.input = input

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": self.input}


class RawStoredOutput(_Plain):
    """``StoredOutput``: where the whole text of an output too large to keep inline is."""

    __slots__ = ("bytes", "chars", "chunks", "head", "sha256", "tail")

    def __init__(
        self, *, chars: int, bytes: int, chunks: int, head: int, tail: int, sha256: str
    ) -> None:
        self.chars = chars
        self.bytes = bytes
        self.chunks = chunks
        self.head = head
        self.tail = tail
        self.sha256 = sha256

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {  # in ``StoredOutput``'s field order
            "chars": self.chars,
            "bytes": self.bytes,
            "chunks": self.chunks,
            "head": self.head,
            "tail": self.tail,
            "sha256": self.sha256,
        }


class RawToolResult(_Plain):
    __slots__ = ("content", "effects", "is_error", "stored", "tool_use_id")
    type: ClassVar[Literal["tool_result"]] = "tool_result"

    def __init__(
        self,
        tool_use_id: str,
        content: str | list[RawText],
        is_error: bool = False,
        stored: RawStoredOutput | None = None,
        effects: RawEffects | None = None,
    ) -> None:
        self.tool_use_id = tool_use_id
        self.content = content
        self.is_error = is_error
        self.stored = stored
        self.effects = effects

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content)

    def model_dump(self, *, exclude_none: bool = False, **_: Any) -> dict[str, Any]:
        content: Any = self.content
        if not isinstance(content, str):
            content = [b.model_dump() for b in content]
        out = {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": content,
            "is_error": self.is_error,
        }
        if self.stored is not None or not exclude_none:
            out["stored"] = None if self.stored is None else self.stored.model_dump()
        if self.effects is not None or not exclude_none:
            out["effects"] = (
                None if self.effects is None else self.effects.model_dump(exclude_none=exclude_none)
            )
        return out


RawBlock = RawText | RawThinking | RawToolUse | RawToolResult


class RawMessage(_Plain):
    __slots__ = ("content", "created_at", "role", "seq", "thread_id")

    def __init__(
        self, thread_id: str, seq: int, role: str, content: list[RawBlock], created_at: datetime
    ) -> None:
        self.thread_id = thread_id
        self.seq = seq
        self.role = role
        self.content = content
        self.created_at = created_at


class RawThread(_Plain):
    """A thread's metadata row, with ``ThreadInfo``'s attribute names."""

    __slots__ = (
        "continued_by",
        "continues",
        "created_at",
        "error",
        "forked_from",
        "head_seq",
        "id",
        "job_id",
        "kind",
        "lease_expires_at",
        "lease_owner",
        "model",
        "parent_id",
        "result",
        "status",
        "system_prompt",
        "task",
        "title",
        "tools",
        "updated_at",
        "version",
    )
    id: str
    kind: str
    title: str
    status: str
    parent_id: str | None
    forked_from: RawFork | None
    job_id: str
    task: dict[str, Any] | None
    system_prompt: str | None
    tools: list[str]
    model: str | None
    result: RawResult | None
    error: str | None
    version: int
    head_seq: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    continues: str | None
    continued_by: str | None

    def __init__(self, **values: Any) -> None:
        for k in self.__slots__:
            setattr(self, k, values.pop(k))
        if values:
            raise TypeError(f"unknown fields {sorted(values)}")

    def with_status(self, status: str) -> RawThread:
        values = {k: getattr(self, k) for k in self.__slots__}
        return RawThread(**{**values, "status": status})

    @property
    def ref(self) -> str:
        return format_ref(self.id)

    @property
    def own_messages(self) -> int:
        return self.head_seq - (self.forked_from.at if self.forked_from else 0)


class RawUsageTotal(_Plain):
    __slots__ = ("cost_usd", "responses", "thread_id", "usage")

    def __init__(self, thread_id: str, usage: RawUsage, cost_usd: float, responses: int) -> None:
        self.thread_id = thread_id
        self.usage = usage
        self.cost_usd = cost_usd
        self.responses = responses


class RawHit(_Plain):
    __slots__ = ("marks", "role", "seq", "snippet", "thread_id")

    def __init__(
        self, thread_id: str, seq: int, snippet: str, role: str, marks: list[tuple[int, int]]
    ) -> None:
        self.thread_id = thread_id
        self.seq = seq
        self.snippet = snippet
        self.role = role
        self.marks = marks

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id, self.seq)


# ----------------------------------------------------------------- stored shapes

_MISSING = object()

LIGHT_SHAPES: dict[str, tuple[tuple[str, Any], ...]] = {
    # (field, default or _MISSING when required), in the pydantic model's field order
    "TextBlock": (("type", "text"), ("text", _MISSING)),
    "ThinkingBlock": (("type", "thinking"), ("thinking", _MISSING), ("signature", None)),
    "ToolUseBlock": (("type", "tool_use"), ("id", _MISSING), ("name", _MISSING), ("input", {})),
    "ToolResultBlock": (
        ("type", "tool_result"),
        ("tool_use_id", _MISSING),
        ("content", ""),
        ("is_error", False),
        ("stored", None),
        ("effects", None),
    ),
    "Effects": (("exit_code", None), ("changed", []), ("complete", True), ("concurrent", False)),
    "ClaimCheck": (
        ("kind", _MISSING),
        ("index", None),
        ("verdict", _MISSING),
        ("reason", _MISSING),
        ("refs", []),
    ),
    "Check": (("verdict", _MISSING), ("claims", []), ("rounds", 1)),
    "StoredOutput": (
        ("chars", _MISSING),
        ("bytes", _MISSING),
        ("chunks", _MISSING),
        ("head", _MISSING),
        ("tail", _MISSING),
        ("sha256", _MISSING),
    ),
    "Usage": (
        ("input_tokens", 0),
        ("output_tokens", 0),
        ("cache_read_input_tokens", 0),
        ("cache_creation_input_tokens", 0),
    ),
    "Finding": (("claim", _MISSING), ("evidence", [])),
    "Change": (("path", _MISSING), ("action", _MISSING)),
    "Verification": (("command", _MISSING), ("outcome", _MISSING)),
    "Result": (
        ("status", _MISSING),
        ("summary", _MISSING),
        ("findings", []),
        ("changes", []),
        ("verification", []),
        ("negative_results", []),
        ("open_questions", []),
        ("ref", None),
        ("task", None),
        ("turns", None),
        ("usage", None),
        ("duration_s", None),
        ("dropped_evidence", 0),
        ("branch", None),
        ("diff_stat", None),
        ("check", None),
    ),
}
"""What this module knows of the stored JSON: each model's fields with their defaults, in the
model's order (the order its JSON is written in). A test compares it with the models."""


def _shaped(value: Any, shape: str) -> dict[str, Any]:
    """``value`` (stored JSON) with the fields of ``shape`` in order, defaults filled in; a
    key the shape lacks, or a missing required one, is ``Unsupported``."""
    if not isinstance(value, dict):
        raise Unsupported(f"{shape}: not an object")
    fields = LIGHT_SHAPES[shape]
    if not value.keys() <= {name for name, _ in fields}:
        raise Unsupported(f"{shape}: unknown keys {sorted(value.keys() - dict(fields).keys())}")
    out: dict[str, Any] = {}
    for name, default in fields:
        if name in value:
            out[name] = value[name]
        elif default is _MISSING:
            raise Unsupported(f"{shape}: missing {name!r}")
        else:
            out[name] = list(default) if isinstance(default, list) else default
    return out


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise Unsupported("expected a string")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise Unsupported("expected an integer")
    return value


def strs(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise Unsupported("expected a list")
    return [_str(v) for v in value]


def _usage(value: Any) -> RawUsage:
    d = _shaped(value, "Usage")
    return RawUsage(**{k: _int(v) for k, v in d.items()})


_RESULT_STATUSES = ("done", "partial", "failed", "blocked")
_CHANGE_ACTIONS = ("added", "modified", "deleted")


def result_from_json(value: Any) -> RawResult:
    """A stored result as ``Result.model_dump(mode="json")`` would give it, and its view."""
    d = _shaped(value, "Result")
    if d["status"] not in _RESULT_STATUSES:
        raise Unsupported("result status")
    findings = [_shaped(f, "Finding") for f in _list(d["findings"])]
    changes = [_shaped(c, "Change") for c in _list(d["changes"])]
    verification = [_shaped(v, "Verification") for v in _list(d["verification"])]
    for f in findings:
        _str(f["claim"])
        f["evidence"] = strs(f["evidence"])
    for c in changes:
        _str(c["path"])
        if c["action"] not in _CHANGE_ACTIONS:
            raise Unsupported("change action")
    for v in verification:
        _str(v["command"])
        _str(v["outcome"])
    usage = None if d["usage"] is None else _usage(d["usage"])
    duration = d["duration_s"]
    if duration is not None:
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            raise Unsupported("duration_s")
        duration = float(duration)
    data = {
        **d,
        "summary": _str(d["summary"]),
        "findings": findings,
        "changes": changes,
        "verification": verification,
        "negative_results": strs(d["negative_results"]),
        "open_questions": strs(d["open_questions"]),
        "ref": _opt_str(d["ref"]),
        "task": _opt_str(d["task"]),
        "turns": None if d["turns"] is None else _int(d["turns"]),
        "usage": None if usage is None else usage.model_dump(),
        "duration_s": duration,
        "dropped_evidence": _int(d["dropped_evidence"]),
        "branch": _opt_str(d["branch"]),
        "diff_stat": _opt_str(d["diff_stat"]),
        "check": None if d["check"] is None else _check(d["check"]),
    }
    check = data["check"]
    return RawResult(
        _json=data,
        **{
            **data,
            "findings": [SimpleNamespace(**f) for f in findings],
            "changes": [SimpleNamespace(**c) for c in changes],
            "verification": [SimpleNamespace(**v) for v in verification],
            "usage": usage,
            "check": None
            if check is None
            else SimpleNamespace(
                **{**check, "claims": [SimpleNamespace(**c) for c in check["claims"]]}
            ),
        },
    )


_VERDICTS = ("verified", "unverified", "contradicted")
_CLAIM_KINDS = ("status", "finding", "verification", "change")


def _check(value: Any) -> dict[str, Any]:
    """A stored ``Check`` as its JSON, every field present (``Unsupported`` otherwise)."""
    d = _shaped(value, "Check")
    if d["verdict"] not in _VERDICTS:
        raise Unsupported("check verdict")
    claims = [_shaped(c, "ClaimCheck") for c in _list(d["claims"])]
    for c in claims:
        if c["kind"] not in _CLAIM_KINDS or c["verdict"] not in _VERDICTS:
            raise Unsupported("claim check")
        if c["index"] is not None:
            _int(c["index"])
        _str(c["reason"])
        c["refs"] = strs(c["refs"])
    return {"verdict": d["verdict"], "claims": claims, "rounds": _int(d["rounds"])}


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise Unsupported("expected a list")
    return value


def _effects(value: Any) -> RawEffects:
    """A stored ``Effects``: its attributes, and ``model_dump`` giving its JSON."""
    d = _shaped(value, "Effects")
    if d["exit_code"] is not None:
        _int(d["exit_code"])
    if not isinstance(d["complete"], bool) or not isinstance(d["concurrent"], bool):
        raise Unsupported("effects flags")
    changed = [_shaped(c, "Change") for c in _list(d["changed"])]
    for c in changed:
        _str(c["path"])
        if c["action"] not in _CHANGE_ACTIONS:
            raise Unsupported("change action")
    data = {**d, "changed": changed}
    return RawEffects(_json=data, **{**data, "changed": [SimpleNamespace(**c) for c in changed]})


def block_from_json(value: Any) -> RawBlock:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return RawText(_str(_shaped(value, "TextBlock")["text"]))
    if kind == "thinking":
        d = _shaped(value, "ThinkingBlock")
        return RawThinking(_str(d["thinking"]), _opt_str(d["signature"]))
    if kind == "tool_use":
        d = _shaped(value, "ToolUseBlock")
        if not isinstance(d["input"], dict):
            raise Unsupported("tool_use input")
        return RawToolUse(_str(d["id"]), _str(d["name"]), d["input"])
    if kind == "tool_result":
        d = _shaped(value, "ToolResultBlock")
        content = d["content"]
        if not isinstance(content, str):
            content = [block_from_json(b) for b in _list(content)]
            if not all(isinstance(b, RawText) for b in content):
                raise Unsupported("tool_result content")
        if not isinstance(d["is_error"], bool):
            raise Unsupported("tool_result is_error")
        stored = None
        if d["stored"] is not None:
            so = _shaped(d["stored"], "StoredOutput")
            sizes = {k: _int(so[k]) for k in ("chars", "bytes", "chunks", "head", "tail")}
            if min(sizes.values()) < 0:
                raise Unsupported("stored output sizes")
            stored = RawStoredOutput(**sizes, sha256=_str(so["sha256"]))
        effects = None if d["effects"] is None else _effects(d["effects"])
        return RawToolResult(_str(d["tool_use_id"]), content, d["is_error"], stored, effects)
    raise Unsupported(f"block type {kind!r}")


_STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{6})?")


def stamp(value: Any) -> datetime:
    """SQLAlchemy's SQLite DATETIME text (naive UTC) as an aware datetime."""
    if not isinstance(value, str) or not _STAMP.fullmatch(value):
        raise Unsupported(f"timestamp {value!r}")
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def json_or_none(text: Any) -> Any:
    return None if text is None else json.loads(text)
