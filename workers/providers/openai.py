"""``OpenAIChatModel``: any OpenAI-compatible chat-completions endpoint with tool calling
(Ollama, vLLM, llama.cpp server, LM Studio, OpenAI itself), spoken to with httpx.

This is the only module that does HTTP with ``httpx``.

URL rule: the request goes to ``{base_url}/chat/completions``. A base URL with no path
(``http://localhost:11434``) gets ``/v1`` added; one with any path (``…/v1``, ``…/v1beta/openai``,
``…/api``) is used as given; one already ending in ``/chat/completions`` is used as is.

Request: the system prompt is a ``system`` message; an assistant turn is one assistant message with
its text as ``content`` and its ``tool_use`` blocks as ``tool_calls`` (arguments JSON-encoded);
each ``tool_result`` of a user turn is one ``role: "tool"`` message (``tool_call_id``; an error
result's text is prefixed ``Error: `` as the format has no error flag), followed by one user
message with the turn's text, if any; thinking blocks are dropped.

Response: ``content`` becomes a text block, ``tool_calls`` tool-use blocks; arguments that are not
a JSON object become ``{"_raw_arguments": "<raw>"}`` so the loop can tell the model. Finish reasons
``stop``/``tool_calls``/``length``/``content_filter`` map to ``end_turn``/``tool_use``/
``max_tokens``/``refusal``; a reply with tool calls is ``tool_use`` whatever the server says (some
local servers answer ``stop``). ``prompt_tokens_details.cached_tokens`` is reported as cache reads
and taken out of ``input_tokens``. A body that is not JSON or has no choices is
``BadModelResponse``.

Retries as for Anthropic: 408/429/5xx (not 501), connection errors and timeouts, with exponential
backoff and jitter, honouring ``Retry-After``; a 429 ``insufficient_quota`` (or a message about a
spend/usage/credit limit) is ``SpendLimitReached`` at once; a 413 or a context-length 400 is
``ContextTooLong``; other 4xx are ``ProviderRejected``.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from store import (
    MASK,
    ContentBlock,
    NewMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    redact,
)
from workers._protocol import ModelRequest, ModelResponse, StopReason
from workers.errors import (
    BadModelResponse,
    ProviderUnavailable,
)

from ._pricing import cost_usd
from ._retry import RetryPolicy, final_error, parse_retry_after

log = structlog.get_logger(__name__)

RAW_ARGUMENTS_KEY = "_raw_arguments"

_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_SPEND_LIMIT = re.compile(
    r"insufficient_quota|exceeded your current quota|\b(spend|spending|usage|credit|billing)\b"
    r"[^.]{0,40}\blimit",
    re.IGNORECASE,
)
_TOO_LONG = re.compile(
    r"context_length_exceeded|maximum context length|context (window|length)|prompt is too long"
    r"|too many tokens",
    re.IGNORECASE,
)


def chat_completions_url(base_url: str) -> str:
    """``{base_url}/chat/completions`` by the rule in the module docstring."""
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if not urlsplit(url).path:
        url += "/v1"
    return url + "/chat/completions"


class OpenAIChatModel:
    """A ``Model`` over an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key`` defaults to ``OPENAI_API_KEY``; without one no ``Authorization`` header is sent
    (local servers need none). ``timeout`` is per attempt, in seconds. ``transport`` is for tests.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        max_retries: int = 4,
        timeout: float = 600.0,
        max_tokens: int | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        retry_after_cap: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._model = model
        self._base_url = base_url
        self._url = chat_completions_url(base_url)
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        self._timeout = timeout
        self._max_tokens = max_tokens
        self._transport = transport
        self._policy = RetryPolicy(
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            retry_after_cap=retry_after_cap,
        )
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatModel({self._model!r}, {self._base_url!r})"

    @property
    def spec(self) -> str:
        return f"openai:{self._model}@{self._base_url}"

    @property
    def url(self) -> str:
        return self._url

    def cost_usd(self, usage: Usage) -> float:
        return cost_usd(self._model, usage)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(
                timeout=self._timeout, headers=headers, transport=self._transport
            )
        return self._client

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = build_body(
            request, model=self._model, max_tokens=self._max_tokens or request.max_tokens
        )
        client = self._http()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            status: int | None = None
            try:
                response = await client.post(self._url, json=body)
            except httpx.TransportError as exc:  # connect/read/write errors and timeouts
                failure: Exception = exc
                timed_out = isinstance(exc, httpx.TimeoutException)
                reason = "timed out" if timed_out else self._mask(repr(exc))
            else:
                status = response.status_code
                if response.is_success:
                    return _to_response(response, self._model, attempt)
                self._raise_if_final(response, attempt)
                retry_after = parse_retry_after(response.headers)
                text = self._mask(_error_text(response))
                failure = ProviderUnavailable(text, status_code=status)
                reason = f"HTTP {status}: {text}"
            await self._policy.back_off(
                attempt,
                what=f"openai {self._model} at {self._url}",
                reason=reason,
                status=status,
                retry_after=retry_after,
                failure=failure,
                provider="openai",
                model=self._model,
            )

    def _mask(self, text: str) -> str:
        """``text`` (an error a server sent back) without our own key, which a 401 may echo."""
        if self._api_key:
            text = text.replace(self._api_key, MASK)
        return redact(text)

    def _raise_if_final(self, response: httpx.Response, attempt: int) -> None:
        status = response.status_code
        text = self._mask(_error_text(response))
        what = f"openai {self._model} at {self._url}: HTTP {status}: {text}"
        error = final_error(
            status,
            too_long=bool(_TOO_LONG.search(text)),
            spend_limit=bool(_SPEND_LIMIT.search(text)),
        )
        if error is not None:
            raise error(what, attempts=attempt, status_code=status)


# --- request ------------------------------------------------------------------------------------


def build_body(request: ModelRequest, *, model: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request``."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_messages(message))
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
    return body


def _messages(message: NewMessage) -> list[dict[str, Any]]:
    text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock) and b.text)
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)},
            }
            for b in message.content
            if isinstance(b, ToolUseBlock)
        ]
        if calls:
            out["tool_calls"] = calls
        elif out["content"] is None:
            out["content"] = ""
        return [out]
    results: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": b.tool_use_id,
            "content": ("Error: " + b.text) if b.is_error else b.text,
        }
        for b in message.content
        if isinstance(b, ToolResultBlock)
    ]
    if text or not results:
        results.append({"role": "user", "content": text})
    return results


# --- response -----------------------------------------------------------------------------------


def _to_response(response: httpx.Response, model: str, attempt: int) -> ModelResponse:
    def bad(why: str) -> BadModelResponse:
        return BadModelResponse(
            f"openai {model}: {why}", attempts=attempt, status_code=response.status_code
        )

    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad(f"response body is not JSON: {response.text[:200]!r}") from exc
    if not isinstance(body, dict):
        raise bad("response body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise bad("response choice has no message")

    content: list[ContentBlock] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append(TextBlock(text=text))
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise bad("tool_calls is not a list")
    for call in raw_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad(f"malformed tool call {call!r}")
        call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
        content.append(ToolUseBlock(id=call_id, name=function["name"], input=_arguments(function)))
    if not content:
        content.append(TextBlock(text=""))

    has_calls = any(isinstance(b, ToolUseBlock) for b in content)
    finish = choices[0].get("finish_reason")
    stop = _FINISH.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
    if has_calls and stop == "end_turn":
        stop = "tool_use"

    return ModelResponse(
        content=content,
        stop_reason=stop,
        usage=_usage(body.get("usage")),
        model=reported if isinstance(reported := body.get("model"), str) else model,
    )


def _arguments(function: dict[str, Any]) -> dict[str, Any]:
    raw = function.get("arguments")
    if isinstance(raw, dict):  # a few servers send the object itself
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {RAW_ARGUMENTS_KEY: raw}
        if isinstance(parsed, dict):
            return parsed
    return {RAW_ARGUMENTS_KEY: raw if isinstance(raw, str) else json.dumps(raw)}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt = _int(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    cached = min(cached, prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=_int(raw.get("completion_tokens")),
        cache_read_input_tokens=cached,
    )


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            parts = [str(error.get(k)) for k in ("message", "code", "type") if error.get(k)]
            if parts:
                return " / ".join(parts)
        if isinstance(error, str):
            return error
    return response.text[:500]
