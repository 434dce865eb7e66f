"""Estimated cost of a model response, in USD.

Prices are list prices per million tokens for the standard tier. Cache writes are the 5-minute
TTL's 1.25x the input price, cache reads 0.1x. Long-context surcharges (Sonnet beyond 200k input
tokens) are not modelled: this is an estimate for ``threadloom stats``, not a bill. Unknown
models — local models behind ``openai:``, the scripted model, models newer than this table — cost
0.0 rather than a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from store import Usage

CACHE_WRITE_MULTIPLIER = 1.25
CACHE_READ_MULTIPLIER = 0.1


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float

    @property
    def cache_write(self) -> float:
        return self.input * CACHE_WRITE_MULTIPLIER

    @property
    def cache_read(self) -> float:
        return self.input * CACHE_READ_MULTIPLIER


PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4-0": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4-0": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-3-haiku": Price(0.25, 1.25),
}

# A model id is a table key, optionally followed by a snapshot date or "-latest"
# ("claude-sonnet-4-5-20250929"). Anything else — "claude-opus-4-6" — is unknown, so a newer
# model is never silently priced as an older one that merely shares a prefix.
_SUFFIX = re.compile(r"^(?:-\d{8}|-latest)?$")


def price_for(model: str) -> Price | None:
    """The price of ``model`` (a model id or an ``anthropic:`` spec), or None if unknown."""
    name = model.removeprefix("anthropic:").strip()
    for key in sorted(PRICES, key=len, reverse=True):
        if name.startswith(key) and _SUFFIX.match(name[len(key) :]):
            return PRICES[key]
    return None


def cost_usd(model: str, usage: Usage) -> float:
    """Estimated USD cost of ``usage`` on ``model``; 0.0 for unknown or local models."""
    price = price_for(model)
    if price is None:
        return 0.0
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    )
    return total / 1_000_000
