"""The small protocol between the loop and a model provider.

A provider turns one ``ModelRequest`` (system prompt, tool specs, the visible history in our
content-block format) into one ``ModelResponse``. Providers are stateless across calls: the whole
request is rebuilt from the stored transcript every time, which is what keeps the prompt prefix
byte-identical across resume and fork.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from store import ContentBlock, NewMessage, Usage

StopReason = Literal["end_turn", "tool_use", "max_tokens", "pause_turn", "refusal", "stop_sequence"]

ORCHESTRATOR_TOOL_ID_PREFIX = "toolu_tl_"
"""Tool-use ids of assistant turns written by the orchestrator itself (the first ``dispatch`` of a
job's ``[[task]]`` entries) start with this; the scripted model does not count such turns."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model sees of a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    tools: Sequence[ToolSpec]
    messages: Sequence[NewMessage]
    max_tokens: int = 8192
    thread_ref: str = ""
    """``T-<id>`` of the thread being answered (the scripted model's ``{{thread}}``)."""
    resolve_task_ref: Callable[[str], Awaitable[str | None]] | None = field(
        default=None, compare=False
    )
    """Maps a task id of the same job to its worker's ref (the scripted model's ``{{ref:ID}}``)."""
    tool_required: bool = False
    """Whether this turn must be a tool call (a worker's: it ends with ``submit_result``). A
    provider that can constrain its output to the request's tools may do so (the
    OpenAI-compatible one with ``tool_calls = "constrained"``); others ignore it. Derived from the
    thread's kind alone, so a resumed or forked thread's request is built the same."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    content: list[ContentBlock]
    stop_reason: StopReason
    usage: Usage
    model: str


@runtime_checkable
class Model(Protocol):
    """A model provider. ``spec`` is the spec string it was made from (``anthropic:…``).

    Optional attribute, not part of the structural protocol so that every existing provider and
    test double stays a ``Model`` unchanged: ``result_nudges: int`` (default 0, read through
    ``result_nudges(model)``) — how many times per run the loop answers a worker turn that ends
    without ``submit_result`` (plain text, or an empty reply) with a stored nudge before the
    worker ends ``partial``. Providers whose models reliably call tools (Anthropic, scripted)
    leave it 0, which is SPEC's behaviour; the OpenAI-compatible provider, often a small local
    model, sets 1.

    Optional too: ``async preflight()`` — raise a ``ModelError`` when the model's endpoint
    cannot be reached at all (read through ``preflight(models)``; the OpenAI-compatible and the
    Anthropic providers have one). A job asks it of each model before it stores anything.
    """

    @property
    def spec(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    def cost_usd(self, usage: Usage) -> float: ...

    async def aclose(self) -> None: ...


def result_nudges(model: object) -> int:
    """``model.result_nudges`` if it is a positive int, else 0 (see ``Model``)."""
    n = getattr(model, "result_nudges", 0)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


async def preflight(models: Iterable[Model]) -> None:
    """``await model.preflight()`` for each model that has one (see ``Model``), once per spec:
    one endpoint, one connection."""
    asked: set[str] = set()
    for model in models:
        check = getattr(model, "preflight", None)
        if callable(check) and model.spec not in asked:
            asked.add(model.spec)
            await check()
