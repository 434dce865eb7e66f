"""What an OpenAI-compatible server's error answer says, in words a user can act on.

Each server words its errors its own way, and puts them in its own place:

- OpenAI, llama.cpp's ``llama-server``, LM Studio and newer vLLM: ``{"error": {"message",
  "type", "code", …}}`` (llama-server adds ``n_prompt_tokens`` and ``n_ctx`` to a context overflow,
  type ``exceed_context_size_error``);
- older vLLM: the same fields at the top level (``{"object": "error", "message", "type":
  "BadRequestError", "code": 400}``);
- Ollama: ``{"error": {"message", "type": "api_error"}}`` or ``{"error": "text"}``, where the
  text may itself be the runner's llama.cpp JSON error, and sometimes with status 500.

``error_text`` flattens any of these into one line; ``is_context_overflow`` tells a request that
does not fit the model's context window (never worth retrying, whatever the status) from other
failures; ``overflow_message`` says what to change: a bigger context on the server, or fewer
output tokens asked for, with the numbers when the server gave them.
"""

from __future__ import annotations

import json
import re
from typing import Any

CONTEXT_OVERFLOW = re.compile(
    r"exceed_context_size_error"  # llama.cpp
    r"|exceeds the available context size"  # llama.cpp
    r"|context_length_exceeded"  # OpenAI's code
    r"|maximum context length is"  # OpenAI, vLLM, DeepSeek
    r"|longer than the maximum model length"  # vLLM: "The decoder prompt (length N) is longer…"
    r"|input length exceeds (the )?(maximum )?context length"  # Ollama
    r"|exceeds the context (length|window|size)"
    r"|prompt is too long"
    r"|context (window|length) (exceeded|is full)",
    re.IGNORECASE,
)
SPEND_LIMIT = re.compile(
    r"insufficient_quota|exceeded your current quota|\b(spend|spending|usage|credit|billing)\b"
    r"[^.]{0,40}\blimit",
    re.IGNORECASE,
)
# statuses whose body is read for a context overflow: not 429 ("Request too large … tokens per
# min" is a rate limit) nor the auth/not-found family
_OVERFLOW_STATUSES = frozenset({400, 413, 422, 500})

_LLAMA = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")
_VLLM_REQUESTED = re.compile(
    r"maximum context length is (\d+) tokens\. However, you requested (\d+) tokens "
    r"\((\d+) in the messages, (\d+) in the completion\)"
)
_VLLM_HAS = re.compile(
    r"maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens"
    r"(?: plus (\d+) 'max_tokens')?"
)

SERVER_CONTEXT_HINT = (
    "llama-server -c/--ctx-size N, vLLM --max-model-len N, Ollama num_ctx or OLLAMA_CONTEXT_LENGTH"
)


def error_text(body: bytes, *, reason: str = "") -> str:
    """The server's error as one line: ``message / code / type`` when the body has them (in any
    of the places listed in the module docstring), else the start of the body."""
    try:
        parsed: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _one_line(body.decode("utf-8", "replace")[:500]) or reason
    found = _from_json(parsed, depth=0)
    return found if found else _one_line(body.decode("utf-8", "replace")[:500]) or reason


def _from_json(value: Any, *, depth: int) -> str:
    if not isinstance(value, dict) or depth > 2:
        return ""
    error = value.get("error")
    if isinstance(error, str):
        try:  # Ollama passes its runner's JSON error on as a string
            inner = _from_json(json.loads(error), depth=depth + 1)
        except (json.JSONDecodeError, ValueError):
            inner = ""
        return inner or _one_line(error[:500])
    source = error if isinstance(error, dict) else value
    parts = [str(source[k]) for k in ("message", "code", "type") if source.get(k)]
    if isinstance(error, dict) or value.get("object") == "error":
        for key in ("n_prompt_tokens", "n_ctx"):  # llama.cpp's numbers of an overflow
            if isinstance(source.get(key), int):
                parts.append(f"{key}={source[key]}")
    return _one_line(" / ".join(parts)[:500]) if parts and "message" in source else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def is_context_overflow(status: int, text: str) -> bool:
    """Whether an answer with HTTP ``status`` and error ``text`` says the request does not fit
    the model's context window (413 always does)."""
    return status == 413 or (status in _OVERFLOW_STATUSES and bool(CONTEXT_OVERFLOW.search(text)))


def overflow_message(where: str, status: int | None, text: str, *, max_tokens: int) -> str:
    """One line for ``ContextTooLong``: who refused, the server's own words, and what to change.

    When the server says the prompt alone overflows (llama.cpp counts only the prompt; vLLM
    says "N input tokens"), fewer output tokens cannot help and the hint says so; when prompt
    plus output overflow, it names the ``max_output_tokens`` that would fit."""
    http = f"HTTP {status}: " if status is not None else ""
    head = f"{where}: the request does not fit the model's context window ({http}{text})"
    prompt, context, asked = _numbers(text)
    bigger = f"give the server a bigger context ({SERVER_CONTEXT_HINT})"
    if prompt is not None and context is not None and prompt >= context:
        return (
            f"{head}. The prompt alone ({prompt} tokens) is over the {context}-token context: "
            f"{bigger}; fewer output tokens will not help"
        )
    if prompt is not None and context is not None:
        room = context - prompt
        return (
            f"{head}. {bigger}, or ask for fewer output tokens: [job] max_output_tokens "
            f"(now {asked or max_tokens}) at most {room} fits this prompt"
        )
    return (
        f"{head}. {bigger}, or ask for fewer output tokens ([job] max_output_tokens, "
        f"now {max_tokens})"
    )


def _numbers(text: str) -> tuple[int | None, int | None, int | None]:
    """(prompt tokens, context tokens, output tokens asked) as far as ``text`` tells them."""
    if m := _LLAMA.search(text):
        return int(m[1]), int(m[2]), None
    if m := _VLLM_REQUESTED.search(text):
        return int(m[3]), int(m[1]), int(m[4])
    if m := _VLLM_HAS.search(text):
        return int(m[2]), int(m[1]), int(m[3]) if m[3] else None
    prompt = re.search(r"n_prompt_tokens=(\d+)", text)
    context = re.search(r"n_ctx=(\d+)", text)
    if prompt and context:
        return int(prompt[1]), int(context[1]), None
    return None, None, None
