"""Tool calls a model wrote as text in ``content`` instead of ``tool_calls``.

Small local models (and servers whose chat template cannot parse what the model wrote) answer
``finish_reason: "stop"`` with no ``tool_calls`` and the call in the text: a fenced
```` ```json {"name": …, "arguments": {…}} ``` ```` block, a Hermes/Qwen
``<tool_call>…</tool_call>`` block, or bare JSON, alone or after a line of prose.
``recognise(text, tools)`` finds such calls.

It is deliberately narrow, so that a model *talking about* JSON is not taken for a call:

- what a reasoning model thinks aloud (``<think>…</think>``) is never read for calls;
- a candidate is one fenced block (language ``json``, ``tool_call``, ``tool_code`` or none), one
  ``<tool_call>`` block, or one JSON value starting at the beginning of a line outside those (or
  right after Llama 3's ``<|python_tag|>`` or Mistral's ``[TOOL_CALLS]``);
- a candidate is an object or a non-empty list of objects, each ``{"name", "arguments"}`` or
  ``{"name", "parameters"}`` (arguments an object or a JSON string of one; ``id``/``type``
  allowed beside them), or ``{"function": {"name", "arguments"}}`` as in the API's own shape;
- every call in a candidate names a tool of the request and its arguments validate against that
  tool's ``input_schema`` (``conforms``), or the candidate gives nothing.

``conforms`` is a small JSON Schema check, enough to tell intent, not a full validator (the tool
itself validates again and reports to the model): ``type`` (one or a list), ``enum``, ``const``,
``required``, ``properties``, ``additionalProperties`` (false or a schema), ``items``,
``anyOf``/``oneOf``/``allOf`` and local ``$ref`` (``#/$defs/…``). A ``null`` for a property that
is not required is accepted: our tool schemas show ``X | None`` as ``X``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from workers._protocol import ToolSpec

_FENCE = re.compile(r"```[ \t]*([A-Za-z_-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_FENCE_LANGS = frozenset({"", "json", "tool_call", "tool_code", "tool"})
_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_LINE_START = re.compile(r"(?m)^[ \t]*[\[{]")
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)  # reasoning, not calls
_CALL_MARKERS = re.compile(r"<\|python_tag\|>|\[TOOL_CALLS\]")  # Llama 3.x, Mistral: a call follows
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_MAX_DEPTH = 32

Call = tuple[str, dict[str, Any]]


def recognise(text: str, tools: Sequence[ToolSpec]) -> list[Call]:
    """The tool calls written in ``text``, as ``(name, arguments)``: those in ``<tool_call>``
    blocks, then in fenced blocks, then bare, each group in the order written; empty when none
    names a tool of ``tools`` with arguments that validate."""
    if not tools or not text or ("{" not in text):
        return []
    by_name = {t.name: t for t in tools}
    calls: list[Call] = []
    rest = _CALL_MARKERS.sub("\n", _THINK.sub("\n", text))
    for pattern in (_TAG, _FENCE):
        for match in pattern.finditer(rest):
            if pattern is _FENCE and match[1].lower() not in _FENCE_LANGS:
                continue
            calls += _candidate(_loads(match[pattern.groups]), by_name)
        rest = pattern.sub("\n", rest)
    decoder = json.JSONDecoder()
    position = 0
    while found := _LINE_START.search(rest, position):
        start = found.end() - 1
        try:
            value, end = decoder.raw_decode(rest, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        calls += _candidate(value, by_name)
        position = end
    return calls


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return None


def _candidate(value: Any, tools: dict[str, ToolSpec]) -> list[Call]:
    items = value if isinstance(value, list) else [value]
    if not items:
        return []
    calls = [_call(item, tools) for item in items]
    return [c for c in calls if c is not None] if all(c is not None for c in calls) else []


def _call(item: Any, tools: dict[str, ToolSpec]) -> Call | None:
    if not isinstance(item, dict):
        return None
    if set(item) <= {"function", "id", "type"} and isinstance(item.get("function"), dict):
        item = item["function"]  # {"type": "function", "function": {"name", "arguments"}}
    if not set(item) <= _CALL_KEYS or not isinstance(item.get("name"), str):
        return None
    if ("arguments" in item) == ("parameters" in item):
        return None  # neither, or both: not a call we can read with confidence
    spec = tools.get(item["name"])
    if spec is None:
        return None
    arguments = item.get("arguments", item.get("parameters"))
    if isinstance(arguments, str):
        arguments = _loads(arguments) if arguments.strip() else {}
    if not isinstance(arguments, dict) or not conforms(arguments, spec.input_schema):
        return None
    return spec.name, arguments


def conforms(value: Any, schema: Any, root: Any = None) -> bool:
    """Whether ``value`` satisfies ``schema`` in the subset the module docstring lists."""
    return _conforms(value, schema, schema if root is None else root, 0)


def _conforms(value: Any, schema: Any, root: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if schema is True or not isinstance(schema, dict):
        return schema is not False
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, root)
        if target is None or not _conforms(value, target, root, depth + 1):
            return False
    for key, need in (("anyOf", any), ("oneOf", any), ("allOf", all)):
        variants = schema.get(key)
        if (
            isinstance(variants, list)
            and variants
            and not need(_conforms(value, v, root, depth + 1) for v in variants)
        ):
            return False
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"] or []):
        return False
    if "const" in schema and not _same(value, schema["const"]):
        return False
    types = schema.get("type")
    if types is not None:
        wanted = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, t) for t in wanted):
            return False
    if isinstance(value, dict):
        return _object_conforms(value, schema, root, depth)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        return all(_conforms(v, items, root, depth + 1) for v in value)
    return True


def _object_conforms(value: dict[str, Any], schema: dict[str, Any], root: Any, depth: int) -> bool:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    if any(key not in value for key in required):
        return False
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            if item is None and key not in required:
                continue
            if not _conforms(item, properties[key], root, depth + 1):
                return False
        elif extra is False or (
            isinstance(extra, dict) and not _conforms(item, extra, root, depth)
        ):
            return False
    return True


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#/"):
        return None
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):  # JSON equality: true is not 1 (1 is 1.0)
        return type(a) is type(b) and a == b
    return bool(a == b)


def _is_type(value: Any, name: Any) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "null":
        return value is None
    return False
