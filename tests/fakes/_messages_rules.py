"""Request validation of ``FakeMessagesAPI``: what the real Messages API refuses, and how it says
so (see the ``messages_api`` docstring)."""

from __future__ import annotations

import re
from typing import Any

from ._prompt_cache import content_blocks, estimate_tokens

CONTEXT_WINDOW = 200_000
MAX_CACHE_CONTROL = 4

_TOP_LEVEL_KEYS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "thinking",
        "service_tier",
        "container",
        "output_config",
        "inference_geo",
        "speed",
        "diagnostics",
    }
)
_BLOCK_KEYS = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "document": frozenset({"type", "source", "title", "context", "citations", "cache_control"}),
}
_ROLE_BLOCKS = {
    "user": frozenset({"text", "tool_result", "image", "document"}),
    "assistant": frozenset({"text", "tool_use", "thinking", "redacted_thinking"}),
}
_TOOL_KEYS = frozenset(
    {"name", "description", "input_schema", "cache_control", "type", "strict", "input_examples"}
)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


class InvalidRequest(Exception):
    def __init__(
        self, message: str, *, status: int = 400, error_type: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type


def validate(request: Any, headers: dict[str, str], *, context_window: int) -> None:
    """Raise ``InvalidRequest`` as the real API would refuse ``request``."""
    if not headers.get("x-api-key") and not headers.get("authorization"):
        raise InvalidRequest(
            "x-api-key header is required", status=401, error_type="authentication_error"
        )
    if not headers.get("anthropic-version"):
        raise InvalidRequest("anthropic-version: header is required")
    if not isinstance(request, dict):
        raise InvalidRequest("The request body is not valid JSON.")
    for key in request:
        if key not in _TOP_LEVEL_KEYS:
            raise InvalidRequest(f"{key}: Extra inputs are not permitted")
    for key in ("model", "max_tokens", "messages"):
        if key not in request:
            raise InvalidRequest(f"{key}: Field required")
    if not isinstance(request["model"], str) or not request["model"]:
        raise InvalidRequest("model: Input should be a valid string")
    max_tokens = request["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
        raise InvalidRequest("max_tokens: Input should be a valid integer")
    if request.get("stream"):
        raise InvalidRequest("stream: this fake server does not stream")
    cache_controls = 0
    cache_controls += _validate_tools(request.get("tools"))
    cache_controls += _validate_system(request.get("system"))
    cache_controls += _validate_messages(request["messages"])
    if not request.get("tools") and _has_tool_blocks(request["messages"]):
        raise InvalidRequest(
            "Requests which include `tool_use` or `tool_result` blocks must define tools."
        )
    if cache_controls > MAX_CACHE_CONTROL:
        raise InvalidRequest(
            f"A maximum of {MAX_CACHE_CONTROL} blocks with cache_control may be provided. "
            f"Found {cache_controls}."
        )
    tokens = estimate_tokens(request)
    if tokens > context_window:
        raise InvalidRequest(f"prompt is too long: {tokens} tokens > {context_window} maximum")


def _check_cache_control(block: dict[str, Any], where: str) -> int:
    marker = block.get("cache_control")
    if marker is None:
        return 0
    if (
        not isinstance(marker, dict)
        or marker.get("type") != "ephemeral"
        or set(marker) - {"type", "ttl"}
        or marker.get("ttl", "5m") not in ("5m", "1h")
    ):
        raise InvalidRequest(f"{where}.cache_control: Input should be {{'type': 'ephemeral'}}")
    return 1


def _validate_tools(tools: Any) -> int:
    if tools is None:
        return 0
    if not isinstance(tools, list):
        raise InvalidRequest("tools: Input should be a valid list")
    names: set[str] = set()
    marks = 0
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"{where}: Input should be a valid dictionary")
        for key in tool:
            if key not in _TOOL_KEYS:
                raise InvalidRequest(f"{where}.{key}: Extra inputs are not permitted")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise InvalidRequest(
                f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )
        if name in names:
            raise InvalidRequest("tools: Tool names must be unique.")
        names.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise InvalidRequest(f"{where}.input_schema: Field required")
        if schema.get("type") != "object":
            raise InvalidRequest(f"{where}.input_schema.type: Input should be 'object'")
        if "description" in tool and not isinstance(tool["description"], str):
            raise InvalidRequest(f"{where}.description: Input should be a valid string")
        marks += _check_cache_control(tool, where)
    return marks


def _validate_system(system: Any) -> int:
    if system is None or isinstance(system, str):
        return 0
    if not isinstance(system, list):
        raise InvalidRequest("system: Input should be a valid string or list")
    marks = 0
    for i, block in enumerate(system):
        where = f"system.{i}"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise InvalidRequest(f"{where}.type: Input should be 'text'")
        for key in block:
            if key not in _BLOCK_KEYS["text"]:
                raise InvalidRequest(f"{where}.{key}: Extra inputs are not permitted")
        if not isinstance(block.get("text"), str) or not block["text"]:
            raise InvalidRequest("system: text content blocks must be non-empty")
        marks += _check_cache_control(block, where)
    return marks


def _validate_block(block: Any, role: str, where: str) -> int:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidRequest(f"{where}.type: Field required")
    kind = block["type"]
    if kind not in _BLOCK_KEYS:
        raise InvalidRequest(f"{where}.type: Input tag '{kind}' found using 'type' does not match")
    if kind not in _ROLE_BLOCKS[role]:
        raise InvalidRequest(f"{where}: `{kind}` blocks are not allowed in {role} messages")
    for key in block:
        if key not in _BLOCK_KEYS[kind]:
            raise InvalidRequest(f"{where}.{kind}.{key}: Extra inputs are not permitted")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidRequest(f"{where}.text.text: Field required")
        if not block["text"]:
            raise InvalidRequest("messages: text content blocks must be non-empty")
        if not block["text"].strip():
            raise InvalidRequest("messages: text content blocks must contain non-whitespace text")
    elif kind == "thinking":
        if not isinstance(block.get("thinking"), str):
            raise InvalidRequest(f"{where}.thinking.thinking: Field required")
        if not isinstance(block.get("signature"), str) or not block["signature"]:
            raise InvalidRequest(f"{where}.thinking.signature: Field required")
    elif kind == "tool_use":
        if not isinstance(block.get("id"), str) or not _TOOL_ID.match(block["id"]):
            raise InvalidRequest(
                f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            )
        if not isinstance(block.get("name"), str) or not block["name"]:
            raise InvalidRequest(f"{where}.tool_use.name: Field required")
        if not isinstance(block.get("input"), dict):
            raise InvalidRequest(f"{where}.tool_use.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str) or not block["tool_use_id"]:
            raise InvalidRequest(f"{where}.tool_result.tool_use_id: Field required")
        content = block.get("content", "")
        marks = 0
        if isinstance(content, list):
            for j, inner in enumerate(content):
                marks += _validate_block(inner, "user", f"{where}.content.{j}")
                if isinstance(inner, dict) and inner.get("type") == "tool_result":
                    raise InvalidRequest(f"{where}.content.{j}: tool_result cannot be nested")
        elif not isinstance(content, str):
            raise InvalidRequest(f"{where}.tool_result.content: Input should be a valid list")
        if "is_error" in block and not isinstance(block["is_error"], bool):
            raise InvalidRequest(f"{where}.tool_result.is_error: Input should be a valid boolean")
        return marks + _check_cache_control(block, where)
    if kind in ("thinking", "redacted_thinking") and "cache_control" in block:
        raise InvalidRequest(f"{where}.{kind}.cache_control: Extra inputs are not permitted")
    return _check_cache_control(block, where)


def _validate_messages(messages: Any) -> int:
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Input should be a valid list")
    if not messages:
        raise InvalidRequest("messages: at least one message is required")
    marks = 0
    seen_ids: set[str] = set()
    last = len(messages) - 1
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where}: Input should be a valid dictionary")
        for key in message:
            if key not in ("role", "content"):
                raise InvalidRequest(f"{where}.{key}: Extra inputs are not permitted")
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise InvalidRequest(f"{where}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            raise InvalidRequest('messages: first message must use the "user" role')
        content = message.get("content")
        final_prefill = i == last and role == "assistant"
        if isinstance(content, str):
            if not content and not final_prefill:
                raise InvalidRequest(
                    f"{where}: all messages must have non-empty content except for the "
                    "optional final assistant message"
                )
            continue
        if not isinstance(content, list):
            raise InvalidRequest(f"{where}.content: Input should be a valid list")
        if not content and not final_prefill:
            raise InvalidRequest(
                f"{where}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        for j, block in enumerate(content):
            marks += _validate_block(block, role, f"{where}.content.{j}")
            if block["type"] == "tool_use":
                if block["id"] in seen_ids:
                    raise InvalidRequest(f"{where}.content.{j}: `tool_use` ids must be unique")
                seen_ids.add(block["id"])
    _validate_pairing(_combined(messages))
    return marks


def _combined(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns the API reads: consecutive messages of one role are combined into one turn (as
    its documentation says), their blocks in order. The pairing is checked on these: a tool
    result must be in the turn right after its call, first in it."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        blocks = content_blocks(message["content"])
        if turns and turns[-1]["role"] == message["role"]:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": message["role"], "content": list(blocks)})
    return turns


def _has_tool_blocks(messages: list[dict[str, Any]]) -> bool:
    return any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")
        for m in messages
        for b in content_blocks(m["content"])
    )


def _tool_use_ids(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b["id"] for b in content if b.get("type") == "tool_use"]


def _validate_pairing(messages: list[dict[str, Any]]) -> None:
    for i, message in enumerate(messages):
        content = message["content"]
        blocks = content if isinstance(content, list) else []
        if message["role"] == "user":
            previous = messages[i - 1] if i > 0 else None
            expected = (
                set(_tool_use_ids(previous))
                if previous is not None and previous["role"] == "assistant"
                else set()
            )
            seen_other = False
            for j, block in enumerate(blocks):
                if block["type"] != "tool_result":
                    seen_other = True
                    continue
                if block["tool_use_id"] not in expected:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block['tool_use_id']}. Each `tool_result` block "
                        "must have a corresponding `tool_use` block in the previous message."
                    )
                if seen_other:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: `tool_result` blocks must come first in the "
                        "user message content, before any other content."
                    )
        else:
            ids = _tool_use_ids(message)
            if not ids:
                continue
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered: set[str] = set()
            if following is not None and following["role"] == "user":
                answered = {
                    b["tool_use_id"]
                    for b in content_blocks(following["content"])
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                }
            missing = [x for x in ids if x not in answered]
            if missing:
                raise InvalidRequest(
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
