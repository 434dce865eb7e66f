"""``FakeMessagesAPI``: a loopback HTTP server speaking the Anthropic Messages API.

It is a real server (``POST /v1/messages`` on 127.0.0.1, port 0 by default, in a background
thread), so the real ``anthropic`` SDK talks to it over real HTTP:

    with FakeMessagesAPI() as api:
        model = AnthropicModel("claude-sonnet-4-5", api_key="test", base_url=api.base_url)
        api.respond_with(lambda req: {"content": [{"type": "text", "text": "hi"}]})
        api.inject("529", times=2)
        ...
        assert len(api.requests) == 3 and not api.rejections

Validation — every request is checked the way the real API checks it, and refused with a 400
``invalid_request_error`` (401 without an API key) whose message imitates the real one: known
top-level keys only; ``model``/``max_tokens``/``messages`` present; the first message is ``user``;
roles alternate freely but every assistant ``tool_use`` must be answered by a ``tool_result`` with
its id in the immediately following user message, tool results first in that message; no
``tool_result`` without a matching ``tool_use`` in the previous assistant message; ``tool_use`` ids
unique; no empty or blank text blocks and no empty messages (but a final assistant prefill);
thinking blocks carry a signature; no unknown keys in blocks; tool names unique and well formed;
at most 4 ``cache_control`` markers across tools, system and messages; the prompt fits the
context window.
Each refusal is kept in ``.rejections``; every request (parsed JSON and lower-cased headers) in
``.requests``, faults included — ``len(api.requests)`` is the number of attempts the client made.

Responses: ``.respond_with(fn)`` where ``fn(request_json) -> dict`` gives ``content`` (a list of
blocks or a string), optionally ``stop_reason`` (default: ``tool_use`` if there is a tool call,
else ``end_turn``), ``usage`` (overrides of the simulated counts) and ``model``; a tool_use block
without an ``id`` gets one. ``.respond_with([d1, d2, …])`` or ``.enqueue(d1, …)`` answers from a
queue. With neither, or once the queue is empty, the answer is the text ``ok``, ``end_turn``.
A responder may raise ``InvalidRequest(message)`` to refuse the request with a 400 (recorded as a
rejection); any other exception it raises is answered with a 500 ``api_error`` (which clients
retry), so a bug in a test's responder shows up as retries and then ``ProviderUnavailable``.

Faults — ``.inject(kind, times=n, **params)`` applies to the next n requests, before validation:
``"429"`` rate_limit_error with ``retry-after-ms`` (param ``retry_after_ms``, default 10) and
``retry-after`` (whole seconds, rounded up); ``"529"`` overloaded_error; ``"500"`` api_error;
``"drop"`` closes the connection without a response; ``"spend_limit"`` a 429 saying the spend
limit is reached (param ``message``); ``"too_long"`` a 400 ``prompt is too long: N tokens > 200000
maximum``; ``"slow"`` sleeps ``delay_s`` (default 1.0) before answering normally — set the client's
timeout below it.

Usage comes from a prefix-cache simulation. Tokens are estimated as ceil(chars/4) of each block's
canonical JSON (sorted keys, no spaces, ``cache_control`` removed), blocks taken in the order the
API caches them: tools, then system blocks, then message blocks. Each block extends a running
hash (seeded with the model; a message block also hashes its message's index and role). For every
``cache_control`` breakpoint the prefix up to and including that block is looked up: the longest
prefix written by an earlier request within ``cache_ttl_s`` (5 minutes) and at least
``min_cache_tokens`` long is read from cache (``cache_read_input_tokens`` = its tokens); the span
from there to the last breakpoint is ``cache_creation_input_tokens``; the rest is
``input_tokens``. Then every breakpoint's prefix is written (or its TTL refreshed). Unlike the
real API there is no 20-block lookback from a breakpoint: only a prefix that ends exactly at a
breakpoint of this request can hit — stricter than the real thing, so a client that caches well
here caches at least as well there. ``output_tokens`` is ceil(chars/4) of the reply's content.

Standalone: ``python -m tests.fakes.messages_api --port 0 [--script FILE.json]`` prints
``listening on http://127.0.0.1:PORT`` and serves until killed; with ``--script`` it answers with
the scripted model (SPEC §Scripted model) applied to each request (``{{thread}}`` is empty,
``{{ref:…}}`` is an error since the fake knows no tasks).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import signal
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ._server import DROP, FakeServer, Fault, RecordedRequest, Reply

Responder = Callable[[dict[str, Any]], dict[str, Any]]

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


# --- token accounting and the prefix cache -------------------------------------------------------


def canonical(block: Any) -> str:
    """The canonical JSON of a block for token counting and prefix hashing."""
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return json.dumps(block, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def tokens_of(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def _system_blocks(system: Any) -> list[Any]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return list(system)


def _content_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _segments(request: dict[str, Any]) -> list[tuple[str, Any]]:
    """(hash piece, block) for every cacheable block, in cache order."""
    out: list[tuple[str, Any]] = []
    for tool in request.get("tools") or []:
        out.append(("t:", tool))
    for block in _system_blocks(request.get("system")):
        out.append(("s:", block))
    for i, message in enumerate(request.get("messages") or []):
        for block in _content_blocks(message.get("content", [])):
            out.append((f"m{i}:{message.get('role')}:", block))
    return out


def _has_cache_control(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


class PromptCache:
    """The prefix-cache simulation described in the module docstring. Thread-safe."""

    def __init__(self, *, ttl_s: float = 300.0, min_tokens: int = 0) -> None:
        self.ttl_s = ttl_s
        self.min_tokens = min_tokens
        self._entries: dict[str, float] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def account(self, request: dict[str, Any]) -> dict[str, int]:
        """Input-side usage of ``request``; writes its breakpoints' prefixes."""
        digest = hashlib.sha256(f"model:{request.get('model')}".encode())
        cumulative = 0
        breakpoints: list[tuple[str, int]] = []
        for piece, block in _segments(request):
            text = canonical(block)
            cumulative += tokens_of(text)
            digest.update(piece.encode())
            digest.update(text.encode())
            digest.update(b"\x1e")
            if _has_cache_control(block):
                breakpoints.append((digest.copy().hexdigest(), cumulative))
        total = cumulative
        if not breakpoints:
            return {
                "input_tokens": total,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
        now = time.monotonic()
        with self._lock:
            hit = 0
            for key, tokens in breakpoints:
                expires = self._entries.get(key)
                if expires is not None and expires > now:
                    hit = max(hit, tokens)
            last = breakpoints[-1][1]
            cached_end = last if last >= self.min_tokens else 0
            for key, tokens in breakpoints:
                if tokens >= self.min_tokens:
                    self._entries[key] = now + self.ttl_s
        creation = max(cached_end - hit, 0)
        return {
            "input_tokens": total - hit - creation,
            "cache_read_input_tokens": hit,
            "cache_creation_input_tokens": creation,
        }


def estimate_tokens(request: dict[str, Any]) -> int:
    return sum(tokens_of(canonical(block)) for _, block in _segments(request))


# --- validation ---------------------------------------------------------------------------------


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
    _validate_pairing(messages)
    return marks


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
                    for b in _content_blocks(following["content"])
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                }
            missing = [x for x in ids if x not in answered]
            if missing:
                raise InvalidRequest(
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )


# --- the server ---------------------------------------------------------------------------------


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_fake_{uuid.uuid4().hex[:20]}",
    }


class FakeMessagesAPI(FakeServer):
    """See the module docstring."""

    FAULT_KINDS = frozenset({"429", "529", "500", "drop", "spend_limit", "too_long", "slow"})

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        cache_ttl_s: float = 300.0,
        min_cache_tokens: int = 0,
        context_window: int = CONTEXT_WINDOW,
    ) -> None:
        super().__init__(host=host, port=port)
        self.cache = PromptCache(ttl_s=cache_ttl_s, min_tokens=min_cache_tokens)
        self.context_window = context_window
        self._responder: Responder | None = None
        self._queue: deque[dict[str, Any]] = deque()
        self.usages: list[dict[str, int]] = []
        """The usage of every successful response, in order."""

    def __enter__(self) -> FakeMessagesAPI:
        self.start()
        return self

    @property
    def base_url(self) -> str:
        """What to give the SDK as ``base_url`` (it appends ``/v1/messages``)."""
        return self.root_url

    @property
    def message_requests(self) -> list[dict[str, Any]]:
        """The parsed JSON of every ``POST /v1/messages`` received."""
        return [r.json for r in self.requests if r.path.startswith("/v1/messages")]

    def respond_with(self, responder: Responder | Iterable[dict[str, Any]] | None) -> None:
        """Answer with ``fn(request_json)``, or from a list of replies (then ``ok``)."""
        with self._lock:
            self._queue.clear()
            if responder is None or callable(responder):
                self._responder = responder
            else:
                self._responder = None
                self._queue.extend(responder)

    def enqueue(self, *replies: dict[str, Any]) -> None:
        with self._lock:
            self._queue.extend(replies)

    # -- handling --------------------------------------------------------------------------------

    def handle(self, recorded: RecordedRequest) -> Reply | object:
        path = recorded.path.split("?", 1)[0]
        if recorded.method != "POST" or path != "/v1/messages":
            recorded.outcome = "not_found"
            return Reply.json(404, _error_body("not_found_error", f"Not found: {path}"))
        fault = self.take_fault()
        if fault is not None:
            recorded.outcome = f"fault:{fault.kind}"
            reply = self._fault(fault, recorded)
            if reply is not None:
                return reply
        try:
            validate(recorded.json, recorded.headers, context_window=self.context_window)
        except InvalidRequest as exc:
            self.reject(recorded, exc.status, exc.error_type, exc.message)
            return Reply.json(exc.status, _error_body(exc.error_type, exc.message))
        request: dict[str, Any] = recorded.json
        try:
            spec = self._next_reply(request)
        except InvalidRequest as exc:  # a responder may refuse, e.g. no scripted rule matches
            self.reject(recorded, exc.status, exc.error_type, exc.message)
            return Reply.json(exc.status, _error_body(exc.error_type, exc.message))
        content = spec.get("content", "ok")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        content = [dict(b) for b in content]
        for block in content:
            if block.get("type") == "tool_use":
                block.setdefault("id", f"toolu_fake_{uuid.uuid4().hex[:20]}")
                block.setdefault("input", {})
        usage = self.cache.account(request)
        usage["output_tokens"] = tokens_of(canonical(content))
        usage.update(spec.get("usage") or {})
        stop = spec.get("stop_reason") or (
            "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        )
        with self._lock:
            self.usages.append(dict(usage))
        if not recorded.outcome:
            recorded.outcome = "ok"
        return Reply.json(
            200,
            {
                "id": f"msg_fake_{uuid.uuid4().hex[:20]}",
                "type": "message",
                "role": "assistant",
                "model": spec.get("model") or request["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            },
            {"request-id": f"req_fake_{uuid.uuid4().hex[:20]}"},
        )

    def _next_reply(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            responder = self._responder
            queued = self._queue.popleft() if self._queue else None
        if responder is not None:
            return responder(request)
        return queued or {"content": "ok", "stop_reason": "end_turn"}

    def _fault(self, fault: Fault, recorded: RecordedRequest) -> Reply | object | None:
        kind, params = fault.kind, fault.params
        if kind == "429":
            headers = {"x-should-retry": "true"}
            ms = params.get("retry_after_ms", 10)
            if ms is not None:
                headers["retry-after-ms"] = f"{float(ms):g}"
            seconds = params.get("retry_after", None if ms is None else math.ceil(ms / 1000))
            if seconds is not None:
                headers["retry-after"] = str(seconds)
            return Reply.json(
                429,
                _error_body(
                    "rate_limit_error",
                    "This request would exceed the rate limit for your organization of 50,000 "
                    "input tokens per minute. Please reduce the prompt length or retry later.",
                ),
                headers,
            )
        if kind == "529":
            return Reply.json(
                529, _error_body("overloaded_error", "Overloaded"), {"x-should-retry": "true"}
            )
        if kind == "500":
            return Reply.json(
                500, _error_body("api_error", "Internal server error"), {"x-should-retry": "true"}
            )
        if kind == "drop":
            return DROP
        if kind == "spend_limit":
            message = params.get(
                "message",
                "You have reached your organization's monthly spend limit. Raise it in the "
                "Console under Settings > Limits to continue.",
            )
            return Reply.json(429, _error_body("rate_limit_error", message))
        if kind == "too_long":
            tokens = max(
                estimate_tokens(recorded.json) if isinstance(recorded.json, dict) else 0,
                CONTEXT_WINDOW + 1 + int(params.get("over", 15_011)),
            )
            return Reply.json(
                400,
                _error_body(
                    "invalid_request_error",
                    f"prompt is too long: {tokens} tokens > {CONTEXT_WINDOW} maximum",
                ),
            )
        if kind == "slow":
            self.sleep(float(params.get("delay_s", 1.0)))
            return None  # then answer normally
        raise AssertionError(kind)  # pragma: no cover


# --- scripted answers for end-to-end runs --------------------------------------------------------


def scripted_responder(script: str | dict[str, Any]) -> Responder:
    """A responder that answers each request with the scripted model (SPEC §Scripted model)."""
    from store import NewMessage
    from workers._protocol import ModelRequest, ToolSpec
    from workers.errors import ScriptError
    from workers.providers import ScriptedModel

    model = ScriptedModel(script)

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        system = request.get("system") or ""
        if isinstance(system, list):
            system = "\n".join(b.get("text", "") for b in system)
        messages = []
        for m in request["messages"]:
            content = strip(m["content"])
            if isinstance(content, list):
                content = [b for b in content if b.get("type") != "redacted_thinking"]
            messages.append(NewMessage.model_validate({"role": m["role"], "content": content}))
        tools = [
            ToolSpec(t["name"], t.get("description", ""), t["input_schema"])
            for t in request.get("tools") or []
        ]
        try:
            reply = asyncio.run(
                model.complete(ModelRequest(system=system, tools=tools, messages=messages))
            )
        except ScriptError as exc:
            raise InvalidRequest(str(exc)) from exc
        content = [b.model_dump(mode="json") for b in reply.content]
        content = [b for b in content if b.get("type") != "text" or b.get("text")]
        return {
            "content": content or [{"type": "text", "text": "(empty)"}],
            "stop_reason": reply.stop_reason,
        }

    return respond


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake Anthropic Messages API on loopback.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--script", help="answer with the scripted model from this JSON file")
    args = parser.parse_args(argv)
    api = FakeMessagesAPI(host=args.host, port=args.port)
    if args.script:
        api.respond_with(scripted_responder(args.script))
    api.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"listening on {api.base_url}", flush=True)
    try:
        stop.wait()
    finally:
        api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
