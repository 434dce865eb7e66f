"""Retry timing shared by the HTTP providers: exponential backoff with jitter, Retry-After.

Both providers run their own retry loop (the Anthropic SDK's is switched off) so every attempt is
observable, a spend-limit 429 can stop at once, and the two providers behave alike.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from workers.errors import (
    ContextTooLong,
    ModelError,
    ProviderRejected,
    ProviderUnavailable,
    SpendLimitReached,
)

log = structlog.get_logger("threadloom.providers")

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
"""Request timeout, rate limited, server errors and Anthropic's 529 ``overloaded_error``.
501 (not implemented) and other 4xx are permanent."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` retries after the first attempt, so at most ``max_retries + 1`` attempts.

    Backoff before retry n (1-based) is drawn uniformly from ``[d/2, d]`` with
    ``d = min(backoff_cap, backoff_base * 2**(n-1))``. A server's Retry-After wins over the
    backoff, capped at ``retry_after_cap`` seconds so a misbehaving server cannot park a job.
    """

    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_cap: float = 20.0
    retry_after_cap: float = 60.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.backoff_base < 0 or self.backoff_cap < 0 or self.retry_after_cap < 0:
            raise ValueError("backoff_base, backoff_cap and retry_after_cap must be >= 0")

    async def back_off(
        self,
        attempt: int,
        *,
        what: str,
        reason: str,
        status: int | None,
        retry_after: float | None,
        failure: BaseException | None,
        provider: str,
        model: str,
    ) -> None:
        """After failed attempt ``attempt``: give up with ``ProviderUnavailable`` when the
        retries are spent, else log and sleep the backoff (or the server's Retry-After)."""
        if attempt > self.max_retries:
            raise ProviderUnavailable(
                f"{what}: {reason} (gave up after {attempt} attempts)",
                attempts=attempt,
                status_code=status,
            ) from failure
        delay = self.delay(attempt, retry_after)
        log.warning(
            "model.retrying",
            provider=provider,
            model=model,
            attempt=attempt,
            status=status,
            reason=reason,
            delay_s=round(delay, 3),
        )
        await asyncio.sleep(delay)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.retry_after_cap)
        ceiling = min(self.backoff_cap, self.backoff_base * 2 ** max(retry - 1, 0))
        return random.uniform(ceiling / 2, ceiling)


def final_error(status: int, *, too_long: bool, spend_limit: bool) -> type[ModelError] | None:
    """The error an HTTP status ends with (None: retry it). ``too_long``/``spend_limit`` say
    whether the provider's error text reads that way (each provider words them its own way)."""
    if status == 413 or (status == 400 and too_long):
        return ContextTooLong
    if status == 402 or (status in (400, 403, 429) and spend_limit):
        return SpendLimitReached
    if status in RETRYABLE_STATUS or (status >= 500 and status != 501):
        return None
    return ProviderRejected


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (Anthropic's, more precise) or ``retry-after``
    (seconds, possibly fractional, or an HTTP date); None when absent or unparseable."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
