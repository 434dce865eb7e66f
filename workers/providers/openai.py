"""``OpenAIChatModel``: any OpenAI-compatible chat-completions endpoint with tool calling
(Ollama, vLLM, llama.cpp's ``llama-server``, LM Studio, OpenAI itself), spoken to with httpx.

This is the only module that does HTTP with ``httpx``; what the answers mean lives beside it:
``_openai_response`` (a 200 into a ``ModelResponse``: shapes, ids, finish reasons, usage),
``_openai_text_calls`` (tool calls a small model wrote as text) and ``_openai_errors`` (error
bodies, context overflow).

URL rule: the request goes to ``{base_url}/chat/completions``. A base URL with no path
(``http://localhost:11434``) gets ``/v1`` added; one with any path (``…/v1``, ``…/v1beta/openai``,
``…/api``) is used as given; one already ending in ``/chat/completions`` is used as is.

Request: the system prompt is a ``system`` message; an assistant turn is one assistant message with
its text as ``content`` and its ``tool_use`` blocks as ``tool_calls`` (arguments JSON-encoded);
each ``tool_result`` of a user turn is one ``role: "tool"`` message (``tool_call_id``; an error
result's text is prefixed ``Error: `` as the format has no error flag), followed by one user
message with the turn's text, if any; thinking blocks are dropped. ``max_tokens`` is the
constructor's, else the smaller of the request's and ``DEFAULT_MAX_TOKENS``.

Response: see ``_openai_response``. In short: content becomes a text block, tool calls tool-use
blocks with ids made unique in the thread, arguments that are not a JSON object
``{"_raw_arguments": "<raw>"}``; a tool call written as text in ``content`` (``text_tool_calls``,
on by default) is recognised for the request's tools when its arguments validate, and the reply
keeps its text beside the recognised call; a body that is not the API's shape is
``BadModelResponse`` naming the provider and the field.

Constrained tool calls (``tool_calls``, a job's ``[job] tool_calls``): a turn that must be a
tool call (``ModelRequest.tool_required``: a worker's) can carry ``response_format: {"type":
"json_schema", …}`` whose schema is ``anyOf`` over ``{"name": <const tool>, "arguments": <that
tool's input schema>}`` for the request's own tools (llama.cpp turns it into a grammar; vLLM,
Ollama and OpenAI take the same). ``"native"`` (the default) never sends it; ``"constrained"``
sends it on every such turn; ``"auto"`` asks the endpoint once (a one-token request carrying a
schema: a 2xx says it is accepted, a 4xx that it is not) and sends it only on a turn after the
thread already holds an assistant turn with no tool call — native ``tool_calls`` stay first
choice while the model emits them. Whether a turn is constrained depends only on the mode, the
endpoint's answer and the stored transcript, so a resumed or forked thread's request is rebuilt
byte for byte. The tools stay in the request either way (the prefix a server caches is the same).
A worker that has made no tool call yet is not offered ``submit_result`` in the
schema (the tools sent are unchanged): constrained, a small model otherwise "submits" a result it
never ran (issue 26's 0.5B run), so its first call must be one that looks at something.
The constrained reply's JSON is read as the call it names: the transcript holds the same
``tool_use`` block (and no text) as for a native call.

Time: ``timeout`` is a deadline for the whole of one attempt (connect, the server's queue and
prompt reading, generation, the body), not httpx's per-read timeout, which a server dribbling bytes
never trips. An attempt past its deadline is cancelled and its connection closed (as is one
cancelled from outside: a worker's ``timeout_s``, Ctrl-C), so a server that watches for it stops
generating (current llama-server, vLLM and Ollama cancel a request whose client has gone).

Retries as for Anthropic: 408/429/5xx (not 501) and connection errors, with exponential backoff
and jitter, honouring ``Retry-After``; an attempt that ran out its deadline is retried once only
(a busy single-slot server may have queued it; a model too slow for the deadline will be too slow
again). A 429 ``insufficient_quota`` (or a message about a spend/usage/credit limit) is
``SpendLimitReached`` at once; a 413, or a 400/422/500 whose text says the request does not fit
the context (llama.cpp ``exceed_context_size_error``, vLLM/OpenAI ``maximum context length``,
``context_length_exceeded``, Ollama ``input length exceeds the context length``) is
``ContextTooLong``, whose message says what to change; other 4xx are ``ProviderRejected``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Sequence
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import httpx
import structlog

from store import NewMessage, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from workers._protocol import ModelRequest, ModelResponse, ToolSpec
from workers._redact import MASK, redact
from workers._results import SUBMIT_RESULT
from workers._secrets import env_var
from workers.errors import ContextTooLong, ModelSpecError, ProviderUnavailable

from ._openai_errors import SPEND_LIMIT, error_text, is_context_overflow, overflow_message
from ._openai_response import parse_response
from ._preflight import unreachable
from ._pricing import cost_usd
from ._retry import RetryPolicy, final_error, parse_retry_after

log = structlog.get_logger(__name__)

DEFAULT_MAX_TOKENS = 4096
"""Output tokens asked for when the constructor is given none (and the request asks for more).
Enough for a tool call that writes a file of several hundred lines, and half what a small model
stuck repeating itself burns with the loop's 8,192 — and vLLM refuses any request whose prompt
plus ``max_tokens`` exceeds ``--max-model-len``, so asking for less fits more servers."""

DEFAULT_TIMEOUT_S = 300.0
"""Seconds one attempt may take, end to end. A 1-2B model on a few CPU cores (~20 tokens/s) reads
a long prompt and writes ``DEFAULT_MAX_TOKENS`` within it; past it a server is stuck or far too
slow, and a worker (``timeout_s`` 900 by default) still has time for the one retry. Bigger models on
CPU, or a single server slot shared by parallel workers (requests queue), need a larger
``request_timeout_s``."""


ToolCallMode = Literal["native", "constrained", "auto"]
TOOL_CALL_MODES: tuple[str, ...] = get_args(ToolCallMode)


def chat_completions_url(base_url: str) -> str:
    """``{base_url}/chat/completions`` by the rule in the module docstring."""
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if not urlsplit(url).path:
        url += "/v1"
    return url + "/chat/completions"


class _DeadlinePassed(Exception):
    """One attempt ran out its whole ``timeout``."""


class OpenAIChatModel:
    """A ``Model`` over an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key`` defaults to ``OPENAI_API_KEY``; without one no ``Authorization`` header is sent
    (local servers need none). ``timeout`` is the deadline of one attempt, in seconds (default
    ``DEFAULT_TIMEOUT_S``; the module docstring says why it is a deadline). ``max_tokens``, when
    given, is the ``max_tokens`` of every request; else the request's, at most
    ``DEFAULT_MAX_TOKENS``. ``text_tool_calls`` recognises tool calls written as text in the reply
    (``_openai_text_calls``). ``tool_calls`` is ``native``, ``constrained`` or ``auto`` (the
    module docstring). ``transport`` is for tests.
    """

    result_nudges = 1  # small local models end turns without submit_result: nudge once

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        max_retries: int = 4,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_tokens: int | None = None,
        text_tool_calls: bool = True,
        tool_calls: str = "native",
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        retry_after_cap: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # bad input, not a bug: ModelSpecError is exit 2 and a ValueError
        if not timeout > 0:
            raise ModelSpecError(f"openai:{model}@{base_url}: timeout must be > 0 s, got {timeout}")
        if max_tokens is not None and max_tokens < 1:
            raise ModelSpecError(
                f"openai:{model}@{base_url}: max_tokens must be >= 1, got {max_tokens}"
            )
        if tool_calls not in TOOL_CALL_MODES:
            raise ModelSpecError(
                f"openai:{model}@{base_url}: tool_calls must be one of "
                f"{', '.join(TOOL_CALL_MODES)}, got {tool_calls!r}"
            )
        self._model = model
        self._tool_calls = tool_calls
        self._schema_support: bool | None = None  # the endpoint's answer to the probe ("auto")
        self._probe_lock = asyncio.Lock()
        self._base_url = base_url
        self._url = chat_completions_url(base_url)
        self._api_key = api_key or env_var("OPENAI_API_KEY") or None  # see workers._secrets
        self._timeout = timeout
        self._max_tokens = max_tokens
        self._text_tool_calls = text_tool_calls
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
                # the deadline is ours (asyncio.timeout); httpx's own are only a backstop
                timeout=httpx.Timeout(self._timeout + 5.0),
                headers=headers,
                transport=self._transport,
            )
        return self._client

    async def preflight(self) -> None:
        """``ProviderUnavailable`` at once when the endpoint cannot be connected to at all
        (``_preflight``): asked once before a job stores anything, so a dead endpoint is one
        line, not every thread's retries. Not asked through a test's ``transport``."""
        if self._transport is not None:
            return
        reason = await unreachable(self._url)
        if reason is not None:
            raise ProviderUnavailable(
                f"{self._mask(self.spec)}: {self._mask(self._url)} cannot be reached: {reason}",
                attempts=0,
            )

    def max_tokens_for(self, request: ModelRequest) -> int:
        """The ``max_tokens`` sent for ``request`` (see the class docstring)."""
        if self._max_tokens is not None:
            return self._max_tokens
        return min(request.max_tokens, DEFAULT_MAX_TOKENS)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        max_tokens = self.max_tokens_for(request)
        constrained = await self.constrains(request)
        body = build_body(request, model=self._model, max_tokens=max_tokens, constrain=constrained)
        where = self._mask(self.spec)
        client = self._http()
        attempt = 0
        deadlines = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            status: int | None = None
            try:
                response = await self._attempt(client, body)
            except _DeadlinePassed as exc:
                deadlines += 1
                failure: Exception = exc
                reason = (
                    f"no complete answer within the {self._timeout:g} s request timeout "
                    f"(raise request_timeout_s, or lower max_output_tokens, now {max_tokens})"
                )
                if deadlines > 1:  # retried once already (module docstring)
                    raise ProviderUnavailable(
                        f"{where}: {reason}, twice", attempts=attempt
                    ) from exc
            except httpx.TransportError as exc:  # connect/read/write errors, httpx's timeouts
                failure = exc
                timed_out = isinstance(exc, httpx.TimeoutException)
                reason = "timed out" if timed_out else self._mask(repr(exc))
            else:
                status = response.status_code
                if response.is_success:
                    return parse_response(
                        response.content,
                        content_type=response.headers.get("content-type", ""),
                        where=where,
                        status=status,
                        attempt=attempt,
                        request=request,
                        model=self._model,
                        max_tokens=max_tokens,
                        text_tool_calls=self._text_tool_calls,
                        constrained=constrained,
                        prompt_chars=lambda: len(json.dumps(body, ensure_ascii=False)),
                    )
                text = self._mask(error_text(response.content, reason=response.reason_phrase))
                self._raise_if_final(status, text, where, attempt, max_tokens)
                retry_after = parse_retry_after(response.headers)
                failure = ProviderUnavailable(text, status_code=status)
                reason = f"HTTP {status}: {text}"
            await self._policy.back_off(
                attempt,
                what=where,
                reason=reason,
                status=status,
                retry_after=retry_after,
                failure=failure,
                provider="openai",
                model=self._model,
            )

    @property
    def tool_calls(self) -> str:
        return self._tool_calls

    async def constrains(self, request: ModelRequest) -> bool:
        """Whether ``request`` goes with the tool-call schema (the module docstring)."""
        if not request.tool_required or not request.tools or self._tool_calls == "native":
            return False
        if self._tool_calls == "constrained":
            return True
        missed = any(
            m.role == "assistant" and not any(isinstance(b, ToolUseBlock) for b in m.content)
            for m in request.messages
        )
        return missed and await self._accepts_schema()

    async def _accepts_schema(self) -> bool:
        """The endpoint's answer, asked once: does it take ``response_format`` with a JSON
        schema? A 2xx is yes and a 4xx no (both kept); no answer (the network, a 5xx) is no for
        now and asked again next time."""
        async with self._probe_lock:
            if self._schema_support is not None:
                return self._schema_support
            body = {
                "model": self._model,
                "messages": [{"role": "user", "content": "Answer with a JSON object."}],
                "max_tokens": 1,
                "response_format": _response_format({"type": "object"}),
            }
            try:
                response = await self._attempt(self._http(), body)
            except (_DeadlinePassed, httpx.TransportError) as exc:
                log.warning("model.schema_probe_failed", model=self._model, error=repr(exc))
                return False
            if response.is_success or 400 <= response.status_code < 500:
                self._schema_support = response.is_success
                log.info("model.schema_probe", model=self._model, accepted=self._schema_support)
            return response.is_success

    async def _attempt(self, client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
        """One POST, read whole within the deadline. On the deadline the request task is
        cancelled, and httpx closes a connection whose response was not read to its end: the
        server sees the client go."""
        try:
            async with asyncio.timeout(self._timeout):
                return await client.post(self._url, json=body)
        except TimeoutError as exc:
            log.warning(
                "model.deadline_passed",
                provider="openai",
                model=self._model,
                timeout_s=self._timeout,
            )
            raise _DeadlinePassed() from exc

    def _mask(self, text: str) -> str:
        """``text`` (an error a server sent back) without our own key, which a 401 may echo."""
        if self._api_key:
            text = text.replace(self._api_key, MASK)
        return redact(text)

    def _raise_if_final(
        self, status: int, text: str, where: str, attempt: int, max_tokens: int
    ) -> None:
        if is_context_overflow(status, text):
            message = overflow_message(where, status, text, max_tokens=max_tokens)
            raise ContextTooLong(message, attempts=attempt, status_code=status)
        error = final_error(status, too_long=False, spend_limit=bool(SPEND_LIMIT.search(text)))
        if error is not None:
            raise error(f"{where}: HTTP {status}: {text}", attempts=attempt, status_code=status)


# --- request ------------------------------------------------------------------------------------


def build_body(
    request: ModelRequest, *, model: str, max_tokens: int, constrain: bool = False
) -> dict[str, Any]:
    """The JSON body of ``POST /chat/completions`` for ``request``; ``constrain`` adds the
    ``response_format`` that allows only a call of one of its tools."""
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
        if constrain:
            offered = request.tools
            if not any(isinstance(b, ToolUseBlock) for m in request.messages for b in m.content):
                offered = [t for t in offered if t.name != SUBMIT_RESULT] or offered
            body["response_format"] = _response_format(tool_call_schema(offered))
    return body


def _response_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}


def tool_call_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """A JSON schema that only a call of one of ``tools`` satisfies: ``anyOf`` over
    ``{"name": <const>, "arguments": <input schema>}``. Each tool's ``$defs`` move to the top,
    renamed ``<tool>.<name>`` (its ``#/$defs/…`` refs with them), so refs resolve from the root
    and two tools' definitions of the same name do not collide."""
    defs: dict[str, Any] = {}
    variants = []
    for tool in tools:
        arguments = copy.deepcopy(tool.input_schema)
        own = arguments.pop("$defs", None) if isinstance(arguments, dict) else None
        renamed = {f"#/$defs/{k}": f"#/$defs/{tool.name}.{k}" for k in own or {}}
        arguments = _rename_refs(arguments, renamed)
        for key, value in (own or {}).items():
            defs[f"{tool.name}.{key}"] = _rename_refs(value, renamed)
        variants.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = {"anyOf": variants}
    if defs:
        schema["$defs"] = defs
    return schema


def _rename_refs(node: Any, renamed: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {
            k: renamed.get(v, v) if k == "$ref" and isinstance(v, str) else _rename_refs(v, renamed)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rename_refs(v, renamed) for v in node]
    return node


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
