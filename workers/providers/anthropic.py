"""``AnthropicModel``: the Anthropic Messages API through the official SDK.

This is the only module that imports ``anthropic``, and it translates every SDK exception here
(``raise … from exc``); ``workers.providers`` imports it lazily.

Request: ``system`` as one text block, ``tools`` as name/description/input_schema, our stored
content blocks converted to API params. Blank text blocks are dropped (the API rejects them), as
are thinking blocks without a signature (the API requires one; they come from other providers); a
message left with nothing is sent as the text ``(empty)``.

Prompt caching: ``cache_control: {"type": "ephemeral"}`` on the last tool, the system block, the
last block of the message that ended the previous request (the one just before the newest
assistant message) and the last block of the newest message — at most 4, the API's limit. The
previous request's breakpoint is repeated byte for byte so its prefix is read from the cache even
when a turn appends more blocks than the API's 20-block lookback. The markers are added to freshly
dumped dicts, never to our stored (frozen) message objects.

Response: ``text``, ``thinking`` (with its signature) and ``tool_use`` become our blocks;
``redacted_thinking`` and server-tool blocks are skipped (our block format cannot carry their
opaque payload, and we never enable the features that produce them). An empty reply becomes one
empty text block. ``model_context_window_exceeded`` maps to ``max_tokens``. The SDK builds its
response objects without validating them, so the body is read raw and what we translate is
checked here: a 200 whose body is not JSON, not an object, an error object, or whose content,
blocks (a type no SDK version lists, a field missing or of the wrong type), usage, stop reason
or model have the wrong shape is ``BadModelResponse`` (exit 4) naming the provider and the fault,
never an ``AttributeError`` from deep inside the loop. It is not retried: a server that answers
in another protocol answers so again.

Retries are ours (the SDK's ``max_retries=0``): 408/429/5xx (not 501)/529, connection errors and
timeouts are retried with exponential backoff and jitter, honouring ``retry-after-ms`` /
``retry-after``; a 402, or a 429/400 whose message speaks of a spend, usage or credit limit, is
``SpendLimitReached`` at once; ``prompt is too long`` and 413 are ``ContextTooLong``, never retried;
other 4xx are ``ProviderRejected``; a retryable failure on the last attempt is
``ProviderUnavailable(attempts=n)``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import sys
import typing
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import structlog

from store import (
    ContentBlock,
    NewMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from workers._protocol import ModelRequest, ModelResponse, StopReason, ToolSpec
from workers._redact import MASK, redact
from workers._secrets import env_var
from workers.errors import (
    BadModelResponse,
    ModelError,
    ModelSpecError,
    ProviderUnavailable,
)

from ._preflight import unreachable
from ._pricing import cost_usd
from ._retry import RetryPolicy, final_error, parse_retry_after

if TYPE_CHECKING:
    import anthropic

# where the SDK sends requests without ``base_url`` nor ``ANTHROPIC_BASE_URL``
DEFAULT_BASE_URL = "https://api.anthropic.com"


def _sdk_module() -> ModuleType:
    """The SDK, imported on first use: a second or more (several on a loaded machine), which a
    job's preflight, and a job that fails it, never pay."""
    import anthropic

    return anthropic


async def _loaded_sdk() -> ModuleType:
    """The SDK, its first import run off the event loop (other threads go on meanwhile)."""
    module = sys.modules.get("anthropic")
    return module if module is not None else await asyncio.to_thread(_sdk_module)


log = structlog.get_logger(__name__)

MAX_CACHE_BREAKPOINTS = 4
EMPTY_MESSAGE_TEXT = "(empty)"

_SPEND_LIMIT = re.compile(
    r"\b(spend|spending|usage|credit|billing)\b[^.]{0,40}\blimit|credit balance", re.IGNORECASE
)
_TOO_LONG = re.compile(
    r"prompt is too long|input length and `?max_tokens`? exceed|context (window|length|limit)",
    re.IGNORECASE,
)
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
    "stop_sequence": "stop_sequence",
    "model_context_window_exceeded": "max_tokens",
}


class AnthropicModel:
    """A ``Model`` over ``anthropic.AsyncAnthropic``.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` (then ``ANTHROPIC_AUTH_TOKEN``); without one the
    constructor raises ``ModelSpecError`` (a configuration error, exit 2). ``base_url`` defaults to
    ``ANTHROPIC_BASE_URL`` (read by the SDK), then the public API. ``timeout`` is per attempt, in
    seconds. ``max_tokens``, when given, overrides ``request.max_tokens``.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        timeout: float = 600.0,
        max_tokens: int | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        retry_after_cap: float = 60.0,
    ) -> None:
        self._model = model
        # the keys the command took out of the environment at start (workers._secrets)
        self._api_key = api_key or env_var("ANTHROPIC_API_KEY") or None
        self._auth_token = None if self._api_key else env_var("ANTHROPIC_AUTH_TOKEN")
        if not self._api_key and not self._auth_token:
            raise ModelSpecError(
                f"anthropic:{model} needs an API key: set ANTHROPIC_API_KEY (or pass api_key=...)"
            )
        self._base_url = base_url
        self._timeout = timeout
        self._max_tokens = max_tokens
        self._policy = RetryPolicy(
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            retry_after_cap=retry_after_cap,
        )
        self._client: anthropic.AsyncAnthropic | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"AnthropicModel({self._model!r})"

    @property
    def spec(self) -> str:
        return f"anthropic:{self._model}"

    def cost_usd(self, usage: Usage) -> float:
        return cost_usd(self._model, usage)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _sdk(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            self._client = _sdk_module().AsyncAnthropic(
                api_key=self._api_key,
                auth_token=self._auth_token if not self._api_key else None,
                base_url=self._base_url,
                max_retries=0,
                timeout=self._timeout,
            )
        return self._client

    @property
    def base_url(self) -> str:
        """Where requests go: ``base_url``, else ``ANTHROPIC_BASE_URL``, else the public API,
        as the SDK resolves it, without importing it (a test holds the two equal)."""
        return self._base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL

    async def preflight(self) -> None:
        """``ProviderUnavailable`` at once when the API's host cannot be connected to at all
        (``_preflight``: one TCP connection, with the TLS handshake for ``https``, and no
        request, so it costs no tokens and no quota): asked once before a job stores anything,
        so a dead ``ANTHROPIC_BASE_URL`` is one line, not every thread's retries. Whatever
        answers the connection counts as alive: a wrong key or path is the first request's to
        report, with its own message."""
        url = self.base_url
        reason = await unreachable(url)
        if reason is not None:
            raise ProviderUnavailable(
                self._mask(f"{self.spec}: {url} cannot be reached: {reason}"), attempts=0
            )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        params = build_params(
            request, model=self._model, max_tokens=self._max_tokens or request.max_tokens
        )
        anthropic = await _loaded_sdk()
        client = self._sdk()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            status: int | None = None
            try:
                # the raw response: the SDK builds its models without validating them, so we
                # read the body ourselves and check the shape we translate (``_to_response``)
                raw = await client.messages.with_raw_response.create(
                    **params, timeout=self._timeout
                )
            except anthropic.APIStatusError as exc:
                status = exc.status_code
                self._raise_if_final(exc, attempt)
                retry_after = parse_retry_after(exc.response.headers)
                failure: Exception = exc
                reason = self._mask(f"HTTP {status} {_error_type(exc)}: {_error_message(exc)}")
            except anthropic.APIConnectionError as exc:  # APITimeoutError included
                failure = exc
                timed_out = isinstance(exc, anthropic.APITimeoutError)
                reason = "timed out" if timed_out else self._mask(str(exc))
            except anthropic.AnthropicError as exc:
                raise ModelError(
                    self._mask(f"anthropic {self._model}: {type(exc).__name__}: {exc}"),
                    attempts=attempt,
                ) from exc
            else:
                return self._translate(raw.http_response, attempt)

            await self._policy.back_off(
                attempt,
                what=f"anthropic {self._model}",
                reason=reason,
                status=status,
                retry_after=retry_after,
                failure=failure,
                provider="anthropic",
                model=self._model,
            )

    def _mask(self, text: str) -> str:
        """``text`` (an error a server sent back) without our own key, which a 401 may echo."""
        for secret in (self._api_key, self._auth_token):
            if secret:
                text = text.replace(secret, MASK)
        return redact(text)

    def _translate(self, http: Any, attempt: int) -> ModelResponse:
        """The successful HTTP response ``http`` (the SDK's httpx response, typed loosely so that
        httpx stays the OpenAI provider's import) as our ``ModelResponse``; a body that is not a
        Messages API message (not JSON, not an object, an error object, content or usage of the
        wrong shape) is ``BadModelResponse`` naming the provider and what was wrong."""
        status = int(http.status_code)
        body: bytes = http.content
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            kind = str(http.headers.get("content-type") or "no content type").split(";")[0]
            raise self._bad(
                status, attempt, f"the body is not JSON ({kind}): {_snippet(body)}"
            ) from exc
        try:
            return _to_response(data, self._model)
        except _ShapeError as exc:
            raise self._bad(
                status, attempt, f"the body is not a Messages API response: {exc}"
            ) from exc

    def _bad(self, status: int, attempt: int, why: str) -> BadModelResponse:
        text = self._mask(f"anthropic {self._model}: HTTP {status}, but {why}")
        return BadModelResponse(text, attempts=attempt, status_code=status)

    def _raise_if_final(self, exc: anthropic.APIStatusError, attempt: int) -> None:
        """Raise our error for a status that must not be retried; return if it may be."""
        status = exc.status_code
        text = _error_message(exc)
        what = self._mask(f"anthropic {self._model}: HTTP {status} {_error_type(exc)}: {text}")
        error = final_error(
            status, too_long=bool(_TOO_LONG.search(text)), spend_limit=_is_spend_limit(text)
        )
        if error is not None:
            raise error(what, attempts=attempt, status_code=status) from exc


# --- request ------------------------------------------------------------------------------------


def build_params(request: ModelRequest, *, model: str, max_tokens: int) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``request``: fresh dicts, with cache
    breakpoints. Pure, so a rebuilt request is byte-identical."""
    params: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    breakpoints: list[dict[str, Any]] = []
    if request.tools:
        tools = [_tool_param(t) for t in request.tools]
        breakpoints.append(tools[-1])
        params["tools"] = tools
    if request.system:
        system = [{"type": "text", "text": request.system}]
        breakpoints.append(system[-1])
        params["system"] = system
    messages = [_message_param(m) for m in request.messages]
    params["messages"] = messages
    for index in _message_breakpoints(request.messages):
        block = _cacheable_block(messages[index])
        if block is not None:
            breakpoints.append(block)
    for block in breakpoints[:MAX_CACHE_BREAKPOINTS]:
        block["cache_control"] = {"type": "ephemeral"}
    return params


def _message_breakpoints(messages: Sequence[NewMessage]) -> list[int]:
    """Indexes of the message that ended the previous request (the one just before the newest
    assistant message) and of the newest message."""
    if not messages:
        return []
    last = len(messages) - 1
    newest_assistant = next((i for i in range(last, 0, -1) if messages[i].role == "assistant"), 0)
    previous = newest_assistant - 1
    return [previous, last] if 0 <= previous < last else [last]


def _cacheable_block(message: dict[str, Any]) -> dict[str, Any] | None:
    for block in reversed(message["content"]):
        if block["type"] not in ("thinking", "redacted_thinking"):
            return cast(dict[str, Any], block)
    return None


def _tool_param(tool: ToolSpec) -> dict[str, Any]:
    param: dict[str, Any] = {"name": tool.name, "input_schema": _copy(tool.input_schema)}
    if tool.description:
        param["description"] = tool.description
    return param


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _message_param(message: NewMessage) -> dict[str, Any]:
    content = [p for p in (_block_param(b) for b in message.content) if p is not None]
    if not content:
        content = [{"type": "text", "text": EMPTY_MESSAGE_TEXT}]
    return {"role": message.role, "content": content}


def _block_param(block: ContentBlock) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, ThinkingBlock):
        if not block.signature:
            return None
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": _copy(block.input)}
    if isinstance(block, ToolResultBlock):
        param: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
        if isinstance(block.content, str):
            param["content"] = block.content
        else:
            parts = [{"type": "text", "text": b.text} for b in block.content if b.text]
            param["content"] = parts or ""
        if block.is_error:
            param["is_error"] = True
        return param
    raise TypeError(f"unknown content block {type(block).__name__}")  # pragma: no cover


# --- response -----------------------------------------------------------------------------------


class _ShapeError(ValueError):
    """What is wrong with a response body, in a few words (``_to_response``)."""


# skipped whatever this SDK's version lists (the docstring's redacted thinking and server tools)
_SKIPPED_BLOCKS = frozenset(
    {"redacted_thinking", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result"}
)


@functools.cache
def _known_blocks() -> frozenset[str]:
    return _sdk_block_types() | _SKIPPED_BLOCKS


def _sdk_block_types() -> frozenset[str]:
    """Every content-block type this SDK knows (``anthropic.types.ContentBlock``): the ones we
    do not translate are skipped; a type nobody knows means the server does not speak the API."""
    found: set[str] = set()
    for union in typing.get_args(_sdk_module().types.ContentBlock):
        for member in typing.get_args(union) or (union,):
            field = getattr(member, "model_fields", {}).get("type")
            if field is not None:
                found.update(a for a in typing.get_args(field.annotation) if isinstance(a, str))
    return frozenset(found)


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"


def _string(block: dict[str, Any], key: str, where: str, *, empty_ok: bool = True) -> str:
    value = block.get(key)
    if not isinstance(value, str) or (not empty_ok and not value):
        got = "missing" if key not in block else _json_kind(value)
        raise _ShapeError(f"{where}.{key} is {got}, not a{'' if empty_ok else ' non-empty'} string")
    return value


def _block(raw: object, i: int) -> ContentBlock | None:
    where = f"content[{i}]"
    if not isinstance(raw, dict):
        raise _ShapeError(f"{where} is {_json_kind(raw)}, not a content block")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise _ShapeError(f"{where} has no type")
    if kind == "text":
        return TextBlock(text=_string(raw, "text", where))
    if kind == "thinking":
        return ThinkingBlock(
            thinking=_string(raw, "thinking", where), signature=_string(raw, "signature", where)
        )
    if kind == "tool_use":
        if "input" not in raw:
            raise _ShapeError(f"{where}.input is missing")
        tool_input = raw["input"]
        return ToolUseBlock(
            id=_string(raw, "id", where, empty_ok=False),
            name=_string(raw, "name", where, empty_ok=False),
            # not an object: kept for the loop to refuse as tool input, so the model hears why
            input=tool_input if isinstance(tool_input, dict) else {"_raw": tool_input},
        )
    if kind in _known_blocks():
        log.debug("model.block_skipped", provider="anthropic", type=kind)
        return None
    raise _ShapeError(f"{where} has the unknown type {kind[:40]!r}")


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    if value is None:  # counts the API omits (cache fields without caching) are zero
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _ShapeError(f"usage.{key} is {_json_kind(value)}, not a token count")
    return value


def _to_response(data: object, model: str) -> ModelResponse:
    """A Messages API response body (parsed JSON) as our ``ModelResponse``. Only what we use is
    checked — content blocks, stop reason, usage, model — so a gateway's extra fields pass;
    anything else raises ``_ShapeError``."""
    if not isinstance(data, dict):
        raise _ShapeError(f"it is {_json_kind(data)}, not an object")
    if data.get("type") == "error":  # some gateways answer errors with a 200
        error = data.get("error")
        detail = error if isinstance(error, dict) else {}
        raise _ShapeError(
            f"it is an error: {detail.get('type', 'error')}: {detail.get('message', '')}"[:300]
        )
    if "type" in data and data["type"] != "message":
        raise _ShapeError(f"its type is {str(data['type'])[:40]!r}, not 'message'")
    if "role" in data and data["role"] != "assistant":
        raise _ShapeError(f"its role is {str(data['role'])[:40]!r}, not 'assistant'")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        got = "missing" if "content" not in data else _json_kind(blocks)
        raise _ShapeError(f"content is {got}, not a list of blocks")
    content = [b for b in (_block(raw, i) for i, raw in enumerate(blocks)) if b is not None]
    if not content:
        content.append(TextBlock(text=""))
    usage = data.get("usage")
    if not isinstance(usage, dict):
        got = "missing" if "usage" not in data else _json_kind(usage)
        raise _ShapeError(f"usage is {got}, not an object")
    reason = data.get("stop_reason")
    if reason is not None and not isinstance(reason, str):
        raise _ShapeError(f"stop_reason is {_json_kind(reason)}, not a string")
    answered_by = data.get("model")
    if answered_by is not None and not isinstance(answered_by, str):
        raise _ShapeError(f"model is {_json_kind(answered_by)}, not a string")
    stop = _STOP_REASONS.get(reason or "end_turn")
    if stop is None:  # a stop reason newer than this code: judge by the content
        log.warning("model.unknown_stop_reason", provider="anthropic", value=reason)
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
    return ModelResponse(
        content=content,
        stop_reason=stop,
        usage=Usage(
            input_tokens=_count(usage, "input_tokens"),
            output_tokens=_count(usage, "output_tokens"),
            cache_read_input_tokens=_count(usage, "cache_read_input_tokens"),
            cache_creation_input_tokens=_count(usage, "cache_creation_input_tokens"),
        ),
        model=answered_by or model,
    )


def _snippet(body: bytes) -> str:
    """The start of a body, on one line: enough to recognise an HTML page or a proxy's text."""
    text = " ".join(body[:400].decode("utf-8", "replace").split())
    return repr(text[:160] + ("…" if len(text) > 160 else "")) if text else "(empty)"


# --- errors -------------------------------------------------------------------------------------


def _error_field(exc: anthropic.APIStatusError, key: str) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get(key), str):
            return cast(str, error[key])
    return None


def _error_message(exc: anthropic.APIStatusError) -> str:
    message = _error_field(exc, "message")
    if message is not None:
        return message
    return exc.body if isinstance(exc.body, str) and exc.body else exc.message


def _is_spend_limit(text: str) -> bool:
    # Rate-limit messages mention "usage" too ("see the response headers for current usage"),
    # and a rate limit must be retried, not end the job: they always say "rate limit".
    return bool(_SPEND_LIMIT.search(text)) and "rate limit" not in text.lower()


def _error_type(exc: anthropic.APIStatusError) -> str:
    return _error_field(exc, "type") or "error"
