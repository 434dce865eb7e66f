"""``FunctionModel``: a model that is a Python function, the test double for Python tests.

    def reply(request: ModelRequest) -> ModelResponse:
        if not request.messages[-1].tool_results():
            return tool_response(("read_file", {"path": "a.py"}))
        return text_response("done")

    model = FunctionModel(reply)

``fn`` may be sync or async (return a ``ModelResponse`` or an awaitable of one). Every request it
was given is kept in ``model.requests``, so a test can assert what the loop sent.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from store import ContentBlock, TextBlock, ToolUseBlock, Usage
from workers._protocol import ModelRequest, ModelResponse, StopReason
from workers.errors import BadModelResponse

ModelFunction = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
ToolCall = tuple[str, Mapping[str, Any]] | ToolUseBlock

DEFAULT_MODEL_NAME = "function"


class FunctionModel:
    """A ``Model`` that calls ``fn(request)``. Cost is always 0."""

    def __init__(self, fn: ModelFunction, *, name: str | None = None) -> None:
        self._fn = fn
        self._name = name or getattr(fn, "__name__", None) or "fn"
        self.requests: list[ModelRequest] = []
        self.closed = False

    @property
    def spec(self) -> str:
        return f"function:{self._name}"

    def cost_usd(self, usage: Usage) -> float:
        return 0.0

    async def aclose(self) -> None:
        self.closed = True

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, ModelResponse):
            raise BadModelResponse(
                f"{self.spec} returned {type(result).__name__}, not a ModelResponse"
            )
        return result


def text_response(
    text: str,
    *,
    usage: Usage | None = None,
    stop_reason: StopReason = "end_turn",
    model: str = DEFAULT_MODEL_NAME,
) -> ModelResponse:
    """A reply of one text block."""
    return ModelResponse(
        content=[TextBlock(text=text)],
        stop_reason=stop_reason,
        usage=usage or Usage(),
        model=model,
    )


def tool_response(
    *calls: ToolCall,
    text: str | None = None,
    usage: Usage | None = None,
    model: str = DEFAULT_MODEL_NAME,
) -> ModelResponse:
    """A reply with optional text followed by tool calls, each ``(name, input)`` or a ready
    ``ToolUseBlock``; tuples get a fresh ``toolu_f_…`` id. ``stop_reason`` is ``tool_use``."""
    if not calls:
        raise ValueError("tool_response needs at least one tool call")
    content: list[ContentBlock] = []
    if text:
        content.append(TextBlock(text=text))
    for call in calls:
        if isinstance(call, ToolUseBlock):
            content.append(call)
        else:
            name, tool_input = call
            content.append(
                ToolUseBlock(
                    id=f"toolu_f_{uuid.uuid4().hex[:24]}", name=name, input=dict(tool_input)
                )
            )
    return ModelResponse(
        content=content, stop_reason="tool_use", usage=usage or Usage(), model=model
    )
