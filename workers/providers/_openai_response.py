"""A 200 answer of ``/chat/completions`` into a ``ModelResponse``, as real servers send it.

Shape: the body must be a JSON object with a non-empty ``choices`` list whose first entry has a
``message`` object; ``content`` a string, null, or a list of text parts (joined); ``tool_calls``
null or a list of ``{"id"?, "function": {"name", "arguments"}}`` (the legacy single
``function_call`` is read too). Anything else is ``BadModelResponse`` naming the provider and the
field that was wrong (``choices[0].message.content is an object, not a string``); a 200 that
carries an ``error`` instead of choices is that error (``ContextTooLong`` when it reads so).

What servers get wrong, and what becomes of it:

- tool-call ids missing, empty, not ``[A-Za-z0-9_-]{1,64}``, repeated within the reply or
  already used earlier in the thread (servers that number calls ``0, 1, …`` per reply) get a fresh
  ``call_<24 hex>`` id. The stored transcript holds the new id, so the ``tool_result`` answering
  it, and the request rebuilt from the transcript next time, carry the same one;
- arguments that are not a JSON object become ``{"_raw_arguments": "<raw>"}``: the tool refuses
  them with an error result that quotes them, so the model can correct itself;
- ``finish_reason``: ``length`` (and ``max_tokens``) is ``max_tokens`` whatever else the reply
  holds; ``content_filter`` (or a ``refusal``) is ``refusal``; otherwise a reply with tool calls
  is ``tool_use`` (some servers say ``stop``) and one without is ``end_turn`` (``tool_calls``
  with no calls, null, missing and unknown strings included);
- tool calls written as text (``_openai_text_calls``), when switched on, no structured call came
  and the reply was not cut: the reply keeps its text block *and* gets a ``tool_use`` block per
  recognised call (fresh id), so the transcript shows both what was written and what was run;
  a ``constrained`` reply (the request carried the tool-call schema) is read the same way, but
  its JSON was only the call's envelope: a recognised call replaces the text, so the transcript
  holds what a native call gives (a reply that is not such a call keeps its text);
- usage: ``prompt_tokens`` includes cached tokens (OpenAI's meaning), so
  ``prompt_tokens_details.cached_tokens`` — or ``cache_read_input_tokens`` /
  ``prompt_cache_hit_tokens`` / llama.cpp's ``timings.cache_n`` — are reported as cache reads
  and taken out of input, and ``cache_creation_input_tokens`` as cache writes; with Anthropic-style
  ``input_tokens`` they are already apart. No usage at all (missing, null, no counts) is estimated
  at 4 characters a token from the request and the reply, so budgets still count.
- reasoning a server parsed out of the reply (``reasoning_content``, or ``reasoning``) is kept
  as a thinking block without a signature, first: stored, so nothing is hidden, and never sent
  back (neither this provider nor the Anthropic one sends an unsigned thinking block);
- an empty reply (no text, no calls) is a valid response with one empty text block.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable
from typing import Any

import structlog

from store import ContentBlock, TextBlock, ThinkingBlock, ToolUseBlock, Usage
from workers._protocol import ModelRequest, ModelResponse, StopReason
from workers.errors import BadModelResponse, ContextTooLong

from ._openai_errors import CONTEXT_OVERFLOW, error_text, overflow_message
from ._openai_text_calls import recognise

log = structlog.get_logger("threadloom.providers")

RAW_ARGUMENTS_KEY = "_raw_arguments"
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FINISH: dict[str, StopReason] = {
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "content_filter": "refusal",
}


def fresh_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_response(
    body: bytes,
    *,
    content_type: str,
    where: str,
    status: int,
    attempt: int,
    request: ModelRequest,
    model: str,
    max_tokens: int,
    text_tool_calls: bool,
    constrained: bool = False,
    prompt_chars: Callable[[], int],
) -> ModelResponse:
    """The ``ModelResponse`` of a 2xx answer (see the module docstring); ``where`` names the
    provider in errors; ``prompt_chars`` measures the request, for usage estimates only."""

    def bad(why: str) -> BadModelResponse:
        return BadModelResponse(f"{where}: {why}", attempts=attempt, status_code=status)

    try:
        parsed: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        start = body[:120].decode("utf-8", "replace")
        kind = content_type.split(";")[0].strip() or "no content-type"
        raise bad(f"the response body is not JSON ({kind}): {start!r}") from exc
    if not isinstance(parsed, dict):
        raise bad(f"the response body is {_a(parsed)}, not an object")
    if "choices" not in parsed and "error" in parsed:
        text = error_text(body)
        if CONTEXT_OVERFLOW.search(text):
            overflow = overflow_message(where, status, text, max_tokens=max_tokens)
            raise ContextTooLong(overflow, attempts=attempt, status_code=status)
        raise bad(f"the server answered HTTP {status} with an error: {text}")
    choices = parsed.get("choices")
    if not isinstance(choices, list):
        raise bad('the response has no "choices" list' + _got(choices, "choices"))
    if not choices:
        raise bad('the response\'s "choices" is empty')
    choice = choices[0]
    if not isinstance(choice, dict):
        raise bad(f"choices[0] is {_a(choice)}, not an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise bad("choices[0] has no message object" + _got(message, "choices[0].message"))

    text = _content(message.get("content"), bad)
    refusal = message.get("refusal")
    if not text and isinstance(refusal, str) and refusal:
        text = refusal
    calls = _tool_calls(message, bad)
    finish = choice.get("finish_reason")
    stop = _FINISH.get(finish) if isinstance(finish, str) else None
    if stop is None and isinstance(refusal, str) and refusal and not calls:
        stop = "refusal"

    content: list[ContentBlock] = []
    reasoning = _reasoning(message)
    if reasoning:
        content.append(ThinkingBlock(thinking=reasoning))
    if text:
        content.append(TextBlock(text=text))
    used = {b.id for m in request.messages for b in m.content if isinstance(b, ToolUseBlock)}
    for name, arguments, call_id in calls:
        content.append(ToolUseBlock(id=_unique(call_id, used), name=name, input=arguments))
    if (text_tool_calls or constrained) and not calls and stop is None and request.tools and text:
        written = recognise(text, request.tools)
        if written and constrained:
            content = [b for b in content if not isinstance(b, TextBlock)]
        for name, arguments in written:
            content.append(ToolUseBlock(id=_unique(None, used), name=name, input=arguments))
        if written:
            event = "constrained_tool_call" if constrained else "text_tool_calls_recognised"
            log.info(
                f"model.{event}",
                provider="openai",
                model=model,
                tools=[name for name, _ in written],
            )
    if stop is None:
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
    if not content:
        content.append(TextBlock(text=""))

    reported = parsed.get("model")
    return ModelResponse(
        content=content,
        stop_reason=stop,
        usage=_usage(parsed, content, prompt_chars),
        model=reported if isinstance(reported, str) and reported else model,
    )


def _a(value: Any) -> str:
    """The JSON type of ``value`` with its article: ``an array``, ``a string``…"""
    name = _json_type(value)
    return ("an " if name[0] in "aeiou" else "a ") + name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _got(value: Any, field: str) -> str:
    return f" ({field} is {_a(value)})" if value is not None else ""


def _content(raw: Any, bad: Callable[[str], BadModelResponse]) -> str:
    if raw is None or isinstance(raw, str):
        return raw or ""
    if isinstance(raw, list):  # content parts, as a few servers send them
        texts = []
        for i, part in enumerate(raw):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif not isinstance(part, dict):
                raise bad(f"choices[0].message.content[{i}] is {_a(part)}, not a content part")
        return "".join(texts)
    raise bad(f"choices[0].message.content is {_a(raw)}, not a string")


def _reasoning(message: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):  # llama.cpp/vLLM/DeepSeek; Ollama/OpenRouter
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _tool_calls(
    message: dict[str, Any], bad: Callable[[str], BadModelResponse]
) -> list[tuple[str, dict[str, Any], Any]]:
    raw = message.get("tool_calls")
    if raw is None and isinstance(message.get("function_call"), dict):
        raw = [{"function": message["function_call"]}]  # the legacy single function call
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad(f"choices[0].message.tool_calls is {_a(raw)}, not a list")
    calls = []
    for i, call in enumerate(raw):
        where = f"choices[0].message.tool_calls[{i}]"
        if not isinstance(call, dict):
            raise bad(f"{where} is {_a(call)}, not an object")
        function = call.get("function")
        if not isinstance(function, dict):
            raise bad(f"{where} has no function object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{where}.function has no name")
        calls.append((name, _arguments(function.get("arguments")), call.get("id")))
    return calls


def _unique(call_id: Any, used: set[str]) -> str:
    unique = call_id if isinstance(call_id, str) and _ID.fullmatch(call_id) else ""
    if not unique or unique in used:
        unique = fresh_call_id()
    used.add(unique)
    return unique


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # a few servers send the object itself
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}  # no arguments given: the tool says which it requires
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {RAW_ARGUMENTS_KEY: raw}
        if parsed is None:
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {RAW_ARGUMENTS_KEY: raw if isinstance(raw, str) else json.dumps(raw)}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage(
    body: dict[str, Any], content: list[ContentBlock], prompt_chars: Callable[[], int]
) -> Usage:
    raw = body.get("usage")
    raw = raw if isinstance(raw, dict) else {}
    openai_style = "prompt_tokens" in raw
    prompt = _count(raw.get("prompt_tokens") if openai_style else raw.get("input_tokens"))
    output = _count(raw.get("completion_tokens", raw.get("output_tokens")))
    if not prompt and not output:
        return _estimate(content, prompt_chars)
    details = raw.get("prompt_tokens_details")
    timings = body.get("timings")
    cached = (
        (_count(details.get("cached_tokens")) if isinstance(details, dict) else 0)
        or _count(raw.get("cache_read_input_tokens"))
        or _count(raw.get("prompt_cache_hit_tokens"))
        or (_count(timings.get("cache_n")) if isinstance(timings, dict) else 0)
    )
    created = _count(raw.get("cache_creation_input_tokens"))
    if openai_style:
        cached = min(cached, prompt)
        created = min(created, prompt - cached)
        prompt -= cached + created
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=created,
    )


def _estimate(content: list[ContentBlock], prompt_chars: Callable[[], int]) -> Usage:
    reply = sum(
        len(b.text)
        if isinstance(b, TextBlock)
        else len(b.thinking)
        if isinstance(b, ThinkingBlock)
        else len(json.dumps(b.input)) + len(b.name)
        for b in content
        if isinstance(b, TextBlock | ThinkingBlock | ToolUseBlock)
    )
    log.debug("model.usage_estimated", provider="openai")
    return Usage(
        input_tokens=max(1, math.ceil(prompt_chars() / 4)),
        output_tokens=max(1, math.ceil(reply / 4)) if reply else 0,
    )
