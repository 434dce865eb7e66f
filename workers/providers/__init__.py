"""Model providers: the Anthropic Messages API, OpenAI-compatible endpoints, the offline scripted
model and a function-backed test double, behind the ``Model`` protocol of ``workers._protocol``.

``make_model("anthropic:claude-sonnet-4-5")`` builds one from a spec string (SPEC §Model specs).
Importing this package does not import the ``anthropic`` SDK (about a second): ``AnthropicModel``
is loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._pricing import PRICES, Price, cost_usd, price_for
from ._retry import RetryPolicy
from ._spec import ModelSpec, make_model, parse_model_spec
from .function import FunctionModel, text_response, tool_response
from .openai import OpenAIChatModel
from .scripted import NO_TURN_LEFT, ScriptedModel

if TYPE_CHECKING:
    from .anthropic import AnthropicModel

__all__ = [
    "NO_TURN_LEFT",
    "PRICES",
    "AnthropicModel",
    "FunctionModel",
    "ModelSpec",
    "OpenAIChatModel",
    "Price",
    "RetryPolicy",
    "ScriptedModel",
    "cost_usd",
    "make_model",
    "parse_model_spec",
    "price_for",
    "text_response",
    "tool_response",
]


def __getattr__(name: str) -> Any:
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
