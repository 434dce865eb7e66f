"""``FakeChatAPI``: a loopback HTTP server speaking OpenAI-compatible chat completions.

The same idea as ``messages_api.FakeMessagesAPI``: a real server (``POST /v1/chat/completions``
on 127.0.0.1) in a background thread, usable as a context manager; ``.base_url`` is
``http://127.0.0.1:PORT/v1`` (``.root_url`` has no path).

Validation, as OpenAI-compatible servers do it, answered with a 400 ``invalid_request_error``
and kept in ``.rejections``: ``model`` and a non-empty ``messages`` list; known roles; every
assistant ``tool_calls`` entry answered by a ``role: "tool"`` message with its ``tool_call_id``
before the next non-tool message; no tool message that answers nothing; tool-call arguments are
strings; tools are ``{"type": "function", "function": {name, parameters}}`` with unique names.
With ``api_key=…`` the server also requires ``Authorization: Bearer <key>`` (401 otherwise).

Responses: ``.respond_with(fn)`` with ``fn(request_json) -> dict`` giving ``content`` (any
JSON: a str, None, or a wrong shape on purpose), ``tool_calls`` (``[{"name", "arguments": dict |
str, "id"?}]`` — a string is sent as is, so a test can send arguments that are not JSON; an
``"id"`` of None sends no id), ``finish_reason`` (default ``tool_calls`` when there are tool
calls, else ``stop``; an explicit None sends null), ``usage`` (overrides merged into the computed
usage, e.g. ``prompt_tokens_details``; None sends ``"usage": null``, ``"omit"`` sends no usage)
and ``model``; or a list of such replies. Default: the text ``ok``. Usage: ``prompt_tokens`` is
ceil(chars/4) of the canonical JSON of messages and tools, ``completion_tokens`` that of the reply.

Structured output, as llama.cpp's grammar (and vLLM, Ollama) give it: a request with
``response_format: {"type": "json_schema", "json_schema": {"schema": …}}`` is answered, when the
reply spec has a ``"json"`` value, with that value as the whole ``content`` (JSON text, no
``tool_calls``) — what a constrained model writes; without the ``response_format`` the ``"json"``
key is ignored and the spec's ``content``/``tool_calls`` are what the unconstrained model writes.
The ``"json"`` value must satisfy the schema sent (the grammar would allow nothing else): one that
does not is a 500 naming it, so a test sees a wrong schema. ``FakeChatAPI(json_schema=False)``
refuses any ``json_schema`` response format with a 400, as a server without it does. Every request
is recorded whole (``.requests``: the body's bytes, ``.chat_requests``: its JSON).

Faults (``.inject(kind, times=n, **params)``): ``"429"`` with ``Retry-After`` (param
``retry_after``, seconds, default ``0.01`` — fractional values are nonstandard but accepted by our
client); ``"500"``; ``"drop"`` (close without a response); ``"non_json"`` (a 200 whose body is
HTML); ``"no_choices"`` (a 200 with ``"choices": []``); ``"slow"`` (param ``delay_s``);
``"dribble"`` (the normal reply, its body sent a byte every ``interval_s``, default 0.05: a server
generating slowly, which no per-read timeout cuts; a client that hangs up is recorded in
``.disconnects``); ``"quota"`` (a 429 ``insufficient_quota``); ``"body"`` (``status``, default 200,
with exactly ``body`` — bytes or a str as they are, anything else as its JSON — and
``content_type``, default ``application/json``).

Context overflows, each server's exact answer: ``"too_long"`` (OpenAI: a 400
``context_length_exceeded``); ``"llama_ctx"`` (llama-server: a 400 ``exceed_context_size_error``
with ``n_prompt_tokens``/``n_ctx``, params ``prompt``, ``ctx``); ``"vllm_ctx"`` (vLLM's top-level
``BadRequestError`` "maximum context length is … However, you requested …", params ``ctx``,
``prompt``, ``completion``); ``"ollama_ctx"`` (Ollama: "the input length exceeds the context
length", param ``status``, default 400 — some versions answer 500).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from workers.providers._openai_text_calls import conforms

from ._server import DROP, FakeServer, Fault, RecordedRequest, Reply

Responder = Callable[[dict[str, Any]], dict[str, Any]]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class InvalidChatRequest(Exception):
    def __init__(
        self, message: str, *, status: int = 400, error_type: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type


def _tokens(value: Any) -> int:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return max(1, math.ceil(len(text) / 4))


def validate(request: Any) -> None:
    """Raise ``InvalidChatRequest`` as an OpenAI-compatible server would refuse ``request``."""
    if not isinstance(request, dict):
        raise InvalidChatRequest("We could not parse the JSON body of your request.")
    if not isinstance(request.get("model"), str) or not request["model"]:
        raise InvalidChatRequest("you must provide a model parameter")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidChatRequest("'messages' must contain at least one message")
    _validate_tools(request.get("tools"))
    pending: dict[str, int] = {}  # tool_call_id -> index of the assistant message
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidChatRequest(f"Invalid type for 'messages[{i}]': expected an object")
        role = message.get("role")
        if role not in _ROLES:
            raise InvalidChatRequest(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', "
                "'user', 'tool', and 'developer'."
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in pending:
                raise InvalidChatRequest(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            del pending[call_id]
            if not isinstance(message.get("content"), str | list):
                raise InvalidChatRequest(f"Invalid type for 'messages[{i}].content'")
            continue
        if pending:
            raise InvalidChatRequest(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}"
            )
        content = message.get("content")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if content is None and not calls:
                raise InvalidChatRequest(
                    f"Invalid value for 'messages[{i}].content': expected a string, got null."
                )
            for j, call in enumerate(calls):
                where = f"messages[{i}].tool_calls[{j}]"
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise InvalidChatRequest(f"Missing required parameter: '{where}.function'.")
                if not isinstance(function.get("arguments"), str):
                    raise InvalidChatRequest(
                        f"Invalid type for '{where}.function.arguments': expected a string."
                    )
                if call.get("type") != "function" or not isinstance(call.get("id"), str):
                    raise InvalidChatRequest(f"Missing required parameter: '{where}.id'.")
                pending[call["id"]] = i
        elif not isinstance(content, str | list):
            raise InvalidChatRequest(
                f"Invalid type for 'messages[{i}].content': expected one of a string or array "
                "of objects."
            )
    if pending:
        raise InvalidChatRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. The following tool_call_ids did not have response "
            f"messages: {', '.join(pending)}"
        )


def _validate_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise InvalidChatRequest("Invalid type for 'tools': expected an array.")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not function:
            raise InvalidChatRequest(f"Missing required parameter: 'tools[{i}].function'.")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidChatRequest(f"Missing required parameter: 'tools[{i}].function.name'.")
        if name in names:
            raise InvalidChatRequest(f"Duplicate tool name: '{name}'.")
        names.add(name)
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise InvalidChatRequest(f"Invalid type for 'tools[{i}].function.parameters'.")


def _json_schema(request: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a ``json_schema`` response format, if the request asks for one."""
    fmt = request.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    wrapper = fmt.get("json_schema")
    schema = wrapper.get("schema") if isinstance(wrapper, dict) else None
    return schema if isinstance(schema, dict) else {}


def _error(message: str, error_type: str = "invalid_request_error", code: Any = None) -> Any:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


class FakeChatAPI(FakeServer):
    """See the module docstring."""

    FAULT_KINDS = frozenset(
        {
            "429",
            "500",
            "drop",
            "non_json",
            "no_choices",
            "slow",
            "dribble",
            "too_long",
            "llama_ctx",
            "vllm_ctx",
            "ollama_ctx",
            "quota",
            "body",
        }
    )

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        json_schema: bool = True,
    ) -> None:
        super().__init__(host=host, port=port)
        self.api_key = api_key
        self.json_schema = json_schema
        self._responder: Responder | None = None
        self._queue: deque[dict[str, Any]] = deque()

    def __enter__(self) -> FakeChatAPI:
        self.start()
        return self

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.json for r in self.requests if r.path.endswith("/chat/completions")]

    def respond_with(self, responder: Responder | Iterable[dict[str, Any]] | None) -> None:
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

    def handle(self, recorded: RecordedRequest) -> Reply | object:
        path = recorded.path.split("?", 1)[0]
        if recorded.method != "POST" or path != "/v1/chat/completions":
            recorded.outcome = "not_found"
            return Reply.json(404, _error(f"Unknown request URL: POST {path}.", "not_found"))
        fault = self.take_fault()
        dribble_s = 0.0
        if fault is not None:
            recorded.outcome = f"fault:{fault.kind}"
            if fault.kind == "dribble":
                dribble_s = float(fault.params.get("interval_s", 0.05))
            else:
                reply = self._fault(fault)
                if reply is not None:
                    return reply
        if self.api_key is not None and recorded.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            self.reject(recorded, 401, "invalid_request_error", "Incorrect API key provided.")
            return Reply.json(401, _error("Incorrect API key provided.", code="invalid_api_key"))
        try:
            validate(recorded.json)
        except InvalidChatRequest as exc:
            self.reject(recorded, exc.status, exc.error_type, exc.message)
            return Reply.json(exc.status, _error(exc.message, exc.error_type))
        request: dict[str, Any] = recorded.json
        schema = _json_schema(request)
        if schema is not None and not self.json_schema:
            refusal = "response_format of type json_schema is not supported by this server"
            self.reject(recorded, 400, "invalid_request_error", refusal)
            return Reply.json(400, _error(refusal))
        with self._lock:
            responder = self._responder
            queued = self._queue.popleft() if self._queue else None
        spec = responder(request) if responder is not None else (queued or {"content": "ok"})

        if schema is not None and "json" in spec:
            if not conforms(spec["json"], schema):
                recorded.outcome = "bad_json_for_schema"
                return Reply.json(500, _error(f"fake: {spec['json']!r} is not of the schema sent"))
            spec = {**spec, "content": json.dumps(spec["json"], indent=2), "tool_calls": None}
        message: dict[str, Any] = {"role": "assistant", "content": spec.get("content")}
        calls = []
        for call in spec.get("tool_calls") or []:
            arguments = call.get("arguments", {})
            sent: dict[str, Any] = {
                "id": call.get("id", f"call_{uuid.uuid4().hex[:24]}"),
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
            if sent["id"] is None:
                del sent["id"]
            calls.append(sent)
        if calls:
            message["tool_calls"] = calls
        prompt = _tokens({"messages": request["messages"], "tools": request.get("tools")})
        completion = _tokens(message)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if isinstance(spec.get("usage"), dict):
            usage.update(spec["usage"])
        finish = spec.get("finish_reason", "tool_calls" if calls else "stop")
        if not recorded.outcome:
            recorded.outcome = "ok"
        body: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": spec.get("model") or request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": None if "usage" in spec and spec["usage"] is None else usage,
        }
        if spec.get("usage") == "omit":
            del body["usage"]
        reply = Reply.json(200, body)
        reply.dribble_s = dribble_s
        return reply

    def _fault(self, fault: Fault) -> Reply | object | None:
        kind, params = fault.kind, fault.params
        if kind == "429":
            return Reply.json(
                429,
                _error(
                    "Rate limit reached for requests. Please try again shortly.",
                    "requests",
                    "rate_limit_exceeded",
                ),
                {"retry-after": str(params.get("retry_after", "0.01"))},
            )
        if kind == "too_long":
            return Reply.json(
                400,
                _error(
                    "This model's maximum context length is 8192 tokens. However, your messages "
                    "resulted in 9120 tokens. Please reduce the length of the messages.",
                    code="context_length_exceeded",
                ),
            )
        if kind == "llama_ctx":  # llama-server's exact answer (issue 15)
            prompt, ctx = int(params.get("prompt", 2015)), int(params.get("ctx", 512))
            return Reply.json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": f"request ({prompt} tokens) exceeds the available context "
                        f"size ({ctx} tokens), try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": prompt,
                        "n_ctx": ctx,
                    }
                },
            )
        if kind == "vllm_ctx":  # vLLM's, at the top level as its older versions answer
            ctx = int(params.get("ctx", 4096))
            prompt, completion = (
                int(params.get("prompt", 1000)),
                int(params.get("completion", 4000)),
            )
            return Reply.json(
                400,
                {
                    "object": "error",
                    "message": f"This model's maximum context length is {ctx} tokens. However, "
                    f"you requested {prompt + completion} tokens ({prompt} in the messages, "
                    f"{completion} in the completion). Please reduce the length of the messages "
                    "or completion.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
            )
        if kind == "ollama_ctx":
            return Reply.json(
                int(params.get("status", 400)),
                _error("the input length exceeds the context length", "api_error"),
            )
        if kind == "body":
            raw = params.get("body", b"")
            if not isinstance(raw, bytes):
                raw = (raw if isinstance(raw, str) else json.dumps(raw)).encode()
            content_type = str(params.get("content_type", "application/json"))
            return Reply(int(params.get("status", 200)), raw, {"content-type": content_type})
        if kind == "quota":
            return Reply.json(
                429,
                _error(
                    "You exceeded your current quota, please check your plan and billing details.",
                    "insufficient_quota",
                    "insufficient_quota",
                ),
            )
        if kind == "500":
            return Reply.json(
                500, _error("The server had an error processing your request.", "server_error")
            )
        if kind == "drop":
            return DROP
        if kind == "non_json":
            body = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
            return Reply(200, body, {"content-type": "text/html"})
        if kind == "no_choices":
            return Reply.json(
                200, {"id": "chatcmpl-empty", "object": "chat.completion", "choices": []}
            )
        if kind == "slow":
            self.sleep(float(params.get("delay_s", 1.0)))
            return None
        raise AssertionError(kind)  # pragma: no cover
