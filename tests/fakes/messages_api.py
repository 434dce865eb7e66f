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
consecutive messages of one role are combined into one turn, as the API documents, and the
pairing is checked on those turns: every assistant ``tool_use`` must be answered by a
``tool_result`` with its id in the immediately following user turn, tool results first in that
turn; a request with ``tool_use`` or ``tool_result`` blocks defines ``tools``; no
``tool_result`` without a matching ``tool_use`` in the previous assistant message; ``tool_use`` ids
unique; no empty or blank text blocks and no empty messages (but a final assistant prefill);
thinking blocks carry a signature; no unknown keys in blocks; tool names unique and well formed;
at most 4 ``cache_control`` markers across tools, system and messages; the prompt fits the
context window.
Each refusal is kept in ``.rejections``; every request (parsed JSON and lower-cased headers) in
``.requests``, faults included — ``len(api.requests)`` is the number of attempts the client made.
Each keeps its body as the bytes received (``.body``); ``.message_bodies`` lists those of the
``POST /v1/messages`` requests, for tests of what went over the wire byte for byte (key order,
whitespace, cache markers), which the parsed JSON cannot show.

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
timeout below it; ``"body"`` answers ``status`` (default 200) with exactly ``body`` — bytes or a
str sent as they are, anything else as its JSON — and ``content_type`` (default
``application/json``): a reply that is not the API's shape.

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
import json
import math
import signal
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ._messages_rules import CONTEXT_WINDOW, InvalidRequest, validate
from ._prompt_cache import PromptCache, canonical, estimate_tokens, tokens_of
from ._server import DROP, FakeServer, Fault, RecordedRequest, Reply

__all__ = [
    "CONTEXT_WINDOW",
    "FakeMessagesAPI",
    "InvalidRequest",
    "PromptCache",
    "canonical",
    "estimate_tokens",
    "main",
    "scripted_responder",
    "tokens_of",
]

Responder = Callable[[dict[str, Any]], dict[str, Any]]

# --- the server ---------------------------------------------------------------------------------


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_fake_{uuid.uuid4().hex[:20]}",
    }


class FakeMessagesAPI(FakeServer):
    """See the module docstring."""

    FAULT_KINDS = frozenset(
        {"429", "529", "500", "drop", "spend_limit", "too_long", "slow", "body"}
    )

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

    @property
    def message_bodies(self) -> list[bytes]:
        """The raw body of every ``POST /v1/messages`` received, exactly the bytes sent."""
        with self._lock:
            return [r.body for r in self.requests if r.path.startswith("/v1/messages")]

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
        if kind == "body":
            body = params.get("body", b"")
            if not isinstance(body, bytes):
                body = (body if isinstance(body, str) else json.dumps(body)).encode()
            headers = {"content-type": str(params.get("content_type", "application/json"))}
            return Reply(int(params.get("status", 200)), body, headers)
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
