"""Live progress of a running job: a table on a terminal, plain log lines otherwise.

It consumes the ``LoopEvent``s every thread of the job emits (the display is never needed for
correctness: a failure to draw never stops the job). On a terminal (stderr), a ``rich`` live
table shows one row per thread — ref, kind, task, status, turns, tokens, elapsed — refreshed a few
times a second; elsewhere each start and end is one line on stderr.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from store import Status, format_ref, redact
from workers import LoopEvent

from ._render import visible


@dataclass
class _Row:
    ref: str
    kind: str
    title: str
    status: str = "running"
    turns: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    detail: str = ""

    @property
    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class Progress:
    """Use as a context manager around a run; pass ``progress.on_event`` as the event sink."""

    def __init__(self, *, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = _isatty(self.stream) if live is None else live
        self.rows: dict[str, _Row] = {}
        self._live: Any = None

    def __enter__(self) -> Progress:
        if self.live:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream)
            self._live = Live(self._table(), console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(None, None, None)
            self._live = None

    def on_event(self, event: LoopEvent) -> None:
        row = self.rows.get(event.thread_id)
        if row is None:
            row = self.rows[event.thread_id] = _Row(
                format_ref(event.thread_id), event.thread_kind, event.title
            )
            if event.kind == "started" and row.kind != "lead":
                self._line(f"started  {row.ref}  {row.kind:<6} {row.title}")
        if event.kind == "started":
            row.status, row.ended = "running", None
        row.turns = event.turn
        row.tokens = event.usage.total_tokens
        if event.kind == "tool":
            row.detail = event.detail
        if event.kind == "finished":
            row.status = str(event.status or Status.DONE)
            row.ended = time.monotonic()
            extra = f"  ({event.detail})" if event.detail else ""
            self._line(
                f"{row.status:<8} {row.ref}  {row.kind:<6} {row.title}  turns={row.turns}"
                f" tokens={row.tokens:,} {row.elapsed:.1f}s{extra}"
            )
        if self._live is not None:
            self._live.update(self._table())

    def _line(self, text: str) -> None:
        if self._live is None:
            try:
                self.stream.write(visible(redact(text)) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("thread", "kind", "task", "status", "turns", "tokens", "elapsed", "now"):
            table.add_column(
                col, justify="right" if col in ("turns", "tokens", "elapsed") else "left"
            )
        styles = {"running": "cyan", "done": "green", "failed": "red", "interrupted": "yellow"}
        for row in self.rows.values():
            table.add_row(
                row.ref,
                row.kind,
                redact(row.title[:40]),
                f"[{styles.get(row.status, 'white')}]{row.status}[/]",
                str(row.turns),
                f"{row.tokens:,}",
                f"{row.elapsed:.0f}s",
                row.detail if row.status == "running" else "",
            )
        return table


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
