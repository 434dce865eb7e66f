"""Numbers and times for people: ``12,345``, ``1.2k``, ``5m`` ago, ``2026-12-03 14:00:00 UTC``.

A leaf (standard library only) shared by every front door that writes for a reader — the
terminal (``cli``) and the web viewer (``web``) — so a thread reads the same in both.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["age", "compact", "count", "timestamp"]


def count(n: int) -> str:
    return f"{n:,}"


def compact(n: int) -> str:
    """1234 → 1.2k, 3456789 → 3.5M."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k".replace(".0k", "k")
    return f"{n / 1_000_000:.1f}M".replace(".0M", "M")


def _aware(when: datetime | str) -> datetime:
    """``when`` as an aware time (``str``: ISO 8601, as the JSON shapes carry it; naive: UTC)."""
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def age(when: datetime | str, now: datetime | None = None) -> str:
    """How long ago, in the largest whole unit: 42s, 5m, 3h, 2d, 7w."""
    seconds = max(int(((now or datetime.now(UTC)) - _aware(when)).total_seconds()), 0)
    for size, unit in ((7 * 86400, "w"), (86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size * (2 if unit == "w" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def timestamp(when: datetime | str) -> str:
    return _aware(when).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
