"""Counting a request's tokens before it is sent (SPEC "Jobs larger than one context").

A thread hands off before a request would exceed its ceiling, so the count must never be low.
The provider's own count of the previous request (its usage: input, cache read and cache
creation) is exact; what was appended since is estimated here, from the UTF-8 size of the
blocks as they are sent, at 3 bytes a token — fewer than any tokenizer we send to spends on
English, code or JSON, so an estimate errs high. A request with no earlier count (a run's first)
is estimated whole the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from store import NewMessage

from ._protocol import ModelRequest, ToolSpec

BYTES_PER_TOKEN = 3

CONTEXT_WINDOWS = {"anthropic:claude-": 200_000}
"""Context windows known by a model spec's prefix (tokens); other models' are unknown."""


def estimate_tokens(text: str) -> int:
    """An upper estimate of ``text``'s tokens."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def messages_tokens(messages: Iterable[NewMessage]) -> int:
    """The estimate of ``messages`` as a request carries them."""
    return estimate_tokens(
        _dumps(
            [
                {"role": m.role, "content": [b.model_dump(mode="json") for b in m.content]}
                for m in messages
            ]
        )
    )


def prefix_tokens(system: str, tools: Iterable[ToolSpec]) -> int:
    """The estimate of a request's stable prefix: its system prompt and tool specs."""
    specs = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]
    return estimate_tokens(system) + estimate_tokens(_dumps(specs))


def request_tokens(request: ModelRequest) -> int:
    """The estimate of a whole request."""
    return prefix_tokens(request.system, request.tools) + messages_tokens(request.messages)


def context_window(spec: str) -> int | None:
    """The context window of the model ``spec`` names, when it is known."""
    return next((n for prefix, n in CONTEXT_WINDOWS.items() if spec.startswith(prefix)), None)
