"""The offline, deterministic scripted model (SPEC §Scripted model).

A script is JSON: ``{"rules": [{"match": REGEX, "turns": [TURN, …]}, …]}`` and a turn is
``{"text": str, "tool_calls": [{"name": str, "input": {…}}], "usage": {…}}`` (every key
optional). For each request:

1. take the newest user message that holds text (a message of only ``tool_result`` blocks does not
   count) — the *prompt*;
2. take the first rule whose ``match`` is found in the prompt (``re.search``);
3. k = the number of assistant messages after the prompt, not counting assistant turns the
   orchestrator wrote itself (every ``tool_use`` id starting with ``ORCHESTRATOR_TOOL_ID_PREFIX``);
4. answer the rule's turn k, or ``[scripted model: no turn left]`` with ``end_turn`` when the rule
   has no turn k.

The model keeps no state, so the same request gets the same answer across resume, fork, replay and
process restarts: tool-use ids are derived from the thread ref, the number of messages and the
call's index. Placeholders in any string of a turn (tool inputs included, recursively):
``{{thread}}`` is the ref of the thread being answered; ``{{ref:ID}}`` is the ref of the worker
thread of task ID (``request.resolve_task_ref``). A turn with neither text nor tool calls answers
one empty text block (providers never return an empty content list).

Every problem with the script is found when it is loaded and named with the file and the JSON path
(``rules[2].turns[0]: unknown key 'tool_call'``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store import ContentBlock, NewMessage, TextBlock, ToolUseBlock, Usage
from workers._protocol import ORCHESTRATOR_TOOL_ID_PREFIX, ModelRequest, ModelResponse
from workers.errors import ScriptError

NO_TURN_LEFT = "[scripted model: no turn left]"
MODEL_NAME = "scripted"

_TURN_KEYS = ("text", "tool_calls", "usage")
_RULE_KEYS = ("match", "turns")
_CALL_KEYS = ("name", "input")
_USAGE_KEYS = Usage.field_names
_PLACEHOLDER = re.compile(r"\{\{(thread|ref:([^{}]*))\}\}")
_SHOWN_TEXT = 120

_Fail = Callable[[str, str], ScriptError]


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Turn:
    text: str | None
    tool_calls: tuple[_Call, ...]
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    pattern: re.Pattern[str]
    turns: tuple[_Turn, ...]


class ScriptedModel:
    """A ``Model`` answering from a script file (or an already-parsed dict, for tests)."""

    def __init__(self, script: str | os.PathLike[str] | Mapping[str, Any]) -> None:
        if isinstance(script, Mapping):
            self._source = "<inline script>"
            data: Any = script
        else:
            self._source = os.fspath(script)
            data = _read_json(Path(self._source))
        self._rules = _parse_script(data, self._source)

    @property
    def spec(self) -> str:
        return f"scripted:{self._source}"

    def cost_usd(self, usage: Usage) -> float:
        return 0.0

    async def aclose(self) -> None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        prompt_at, prompt = _newest_user_text(request.messages)
        rule = next((r for r in self._rules if r.pattern.search(prompt)), None)
        if rule is None:
            shown = prompt if len(prompt) <= _SHOWN_TEXT else prompt[:_SHOWN_TEXT] + "…"
            raise ScriptError(f"scripted model {self._source}: no rule matches {shown!r}")
        k = sum(
            1
            for m in request.messages[prompt_at + 1 :]
            if m.role == "assistant" and not _orchestrator_turn(m)
        )
        turn = rule.turns[k] if k < len(rule.turns) else _Turn(NO_TURN_LEFT, (), None)
        fill = await _Filler.prepare(turn, request)

        content: list[ContentBlock] = []
        if turn.text:
            content.append(TextBlock(text=fill.text(turn.text)))
        for i, call in enumerate(turn.tool_calls):
            content.append(
                ToolUseBlock(
                    id=_tool_id(request, i),
                    name=fill.text(call.name),
                    input=fill.value(call.input),
                )
            )
        if not content:
            content.append(TextBlock(text=""))
        usage = turn.usage or _estimate_usage(request, content)
        return ModelResponse(
            content=content,
            stop_reason="tool_use" if turn.tool_calls else "end_turn",
            usage=usage,
            model=MODEL_NAME,
        )


def _orchestrator_turn(message: NewMessage) -> bool:
    uses = message.tool_uses()
    return bool(uses) and all(u.id.startswith(ORCHESTRATOR_TOOL_ID_PREFIX) for u in uses)


def _newest_user_text(messages: Sequence[NewMessage]) -> tuple[int, str]:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and any(isinstance(b, TextBlock) for b in m.content):
            return i, m.text
    raise ScriptError("scripted model: the request has no user message with text")


def _tool_id(request: ModelRequest, index: int) -> str:
    key = f"{request.thread_ref}\x1f{len(request.messages)}\x1f{index}".encode()
    return "toolu_s_" + hashlib.sha256(key).hexdigest()[:24]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _estimate_usage(request: ModelRequest, reply: list[ContentBlock]) -> Usage:
    sent = _dumps(
        {
            "system": request.system,
            "tools": [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ],
            "messages": [
                {"role": m.role, "content": [b.model_dump(mode="json") for b in m.content]}
                for m in request.messages
            ],
        }
    )
    got = _dumps([b.model_dump(mode="json") for b in reply])
    return Usage(input_tokens=math.ceil(len(sent) / 4), output_tokens=math.ceil(len(got) / 4))


class _Filler:
    """Placeholder values for one turn, resolved up front (resolution is async, ``re.sub`` not)."""

    def __init__(self, thread: str, refs: dict[str, str]) -> None:
        self._thread = thread
        self._refs = refs

    @classmethod
    async def prepare(cls, turn: _Turn, request: ModelRequest) -> _Filler:
        wanted: list[str] = []
        for s in _strings(turn):
            wanted.extend(m.group(2) for m in _PLACEHOLDER.finditer(s) if m.group(2) is not None)
        refs: dict[str, str] = {}
        for task_id in dict.fromkeys(wanted):
            ref = None
            if request.resolve_task_ref is not None:
                ref = await request.resolve_task_ref(task_id)
            if ref is None:
                raise ScriptError(
                    f"scripted model: {{{{ref:{task_id}}}}} names unknown task id {task_id!r}"
                )
            refs[task_id] = ref
        return cls(request.thread_ref, refs)

    def text(self, s: str) -> str:
        def sub(m: re.Match[str]) -> str:
            task_id = m.group(2)
            return self._thread if task_id is None else self._refs[task_id]

        return _PLACEHOLDER.sub(sub, s)

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, dict):
            return {self.text(k): self.value(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v


def _strings(turn: _Turn) -> list[str]:
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(turn.text)
    for call in turn.tool_calls:
        walk(call.name)
        walk(call.input)
    return out


# --- loading ------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(
            f"scripted model file {path}: cannot read: {exc.strerror or exc}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ScriptError(f"scripted model file {path}: not UTF-8 text") from exc
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ScriptError(
            f"scripted model file {path}: not valid JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno})"
        ) from exc


def _parse_script(data: Any, source: str) -> tuple[_Rule, ...]:
    def fail(where: str, what: str) -> ScriptError:
        return ScriptError(f"scripted model file {source}: {where}: {what}")

    if not isinstance(data, Mapping):
        raise fail("top level", 'expected an object {"rules": [...]}')
    extra = sorted(set(data) - {"rules"})
    if extra:
        raise fail("top level", f"unknown key {extra[0]!r} (allowed: rules)")
    rules = data.get("rules")
    if not isinstance(rules, list):
        raise fail("rules", "expected a list of rules")
    parsed: list[_Rule] = []
    for i, rule in enumerate(rules):
        where = f"rules[{i}]"
        if not isinstance(rule, Mapping):
            raise fail(where, "expected an object with match and turns")
        _check_keys(rule, _RULE_KEYS, where, fail)
        pattern = rule.get("match")
        if not isinstance(pattern, str):
            raise fail(f"{where}.match", "expected a regular expression string")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise fail(f"{where}.match", f"bad regular expression {pattern!r}: {exc}") from exc
        turns = rule.get("turns", [])
        if not isinstance(turns, list):
            raise fail(f"{where}.turns", "expected a list of turns")
        parsed.append(
            _Rule(
                index=i,
                pattern=compiled,
                turns=tuple(
                    _parse_turn(t, f"{where}.turns[{j}]", fail) for j, t in enumerate(turns)
                ),
            )
        )
    return tuple(parsed)


def _check_keys(obj: Mapping[str, Any], allowed: tuple[str, ...], where: str, fail: _Fail) -> None:
    for key in obj:
        if key not in allowed:
            raise fail(where, f"unknown key {key!r} (allowed: {', '.join(allowed)})")


def _parse_turn(turn: Any, where: str, fail: _Fail) -> _Turn:
    if not isinstance(turn, Mapping):
        raise fail(where, "expected an object with text, tool_calls and/or usage")
    _check_keys(turn, _TURN_KEYS, where, fail)
    text = turn.get("text")
    if text is not None and not isinstance(text, str):
        raise fail(f"{where}.text", "expected a string")
    raw_calls = turn.get("tool_calls", [])
    if not isinstance(raw_calls, list):
        raise fail(f"{where}.tool_calls", "expected a list")
    calls: list[_Call] = []
    for n, call in enumerate(raw_calls):
        cwhere = f"{where}.tool_calls[{n}]"
        if not isinstance(call, Mapping):
            raise fail(cwhere, "expected an object with name and input")
        _check_keys(call, _CALL_KEYS, cwhere, fail)
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise fail(f"{cwhere}.name", "expected a non-empty string")
        tool_input = call.get("input", {})
        if not isinstance(tool_input, dict):
            raise fail(f"{cwhere}.input", "expected an object")
        calls.append(_Call(name=name, input=tool_input))
    usage = None
    raw_usage = turn.get("usage")
    if raw_usage is not None:
        if not isinstance(raw_usage, Mapping):
            raise fail(f"{where}.usage", "expected an object")
        _check_keys(raw_usage, _USAGE_KEYS, f"{where}.usage", fail)
        for key, value in raw_usage.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise fail(f"{where}.usage.{key}", "expected a non-negative integer")
        usage = Usage(**raw_usage)
    return _Turn(text=text, tool_calls=tuple(calls), usage=usage)
