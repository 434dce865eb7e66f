"""Live progress of a running job: a live view on a terminal, plain log lines otherwise.

It consumes the ``LoopEvent``s every thread of the job emits (the display is never needed for
correctness: a failure to draw never stops the job). On a terminal (stderr), a ``rich`` live view
shows one line per thread — a spinner while it runs, its full ref, its task, the tool it runs now
with a one-line preview of what that tool does (``bash: python -m pytest -q``), turns, tokens,
running cost and elapsed time — then a summary line (counts by status, total tokens, cost,
elapsed). The view redraws on its own a few times a second, so elapsed time and the spinner move
during a long tool call when no event arrives.

Layout rules, because people copy refs out of this view and read it at any width:

- a ref is never cut, wrapped or shrunk: the columns are laid out here, not by ``rich``, and the
  ref's width is taken first;
- each thread is exactly one line: the task title and the tool preview share what is left and are
  cut with "…"; on a narrow terminal the kind and status columns go (the spinner or mark still
  says the status), then turns, cost and tokens (the summary line keeps the totals), so that
  the title and the preview keep room to say something; a ref is never what gives way;
- everything shown from the record goes through ``workers.redact`` and ``_render.visible``.

Off a terminal each start and end is one plain line on stderr, as a log reads.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from store import Status, format_ref
from workers import LoopEvent, redact

from ..humanize import compact
from ._render import STATUS_STYLES, cell_width, fit, one_line, usd, visible

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
MARKS = {"done": "✓", "failed": "✗", "interrupted": "!", "cancelled": "!"}
ASCII_SPINNER = "|/-\\"
ASCII_MARKS = {"done": "+", "failed": "x", "interrupted": "!", "cancelled": "!"}

# the input keys a tool's preview shows, in order (anything else: its first string values)
_PREVIEW_KEYS: dict[str, tuple[str, ...]] = {
    "bash": ("command",),
    "read_file": ("path",),
    "write_file": ("path",),
    "edit_file": ("path",),
    "list_files": ("path", "pattern"),
    "grep": ("pattern", "path", "glob"),
    "submit_result": ("status", "summary"),
    "read_thread": ("ref", "mode", "pattern"),
    "ask_thread": ("ref", "question"),
    "search_threads": ("query",),
    "resume_thread": ("ref", "message"),
    "fork_thread": ("ref", "at", "message"),
}


def tool_preview(name: str, tool_input: Mapping[str, Any] | None, width: int = 300) -> str:
    """What a tool call runs, on one line: ``bash: python -m pytest -q``, ``read_file:
    calc/parser.py``, ``dispatch: 3 tasks: tokenizer, parser, evaluator``. Redacted, control
    characters made visible, whitespace collapsed, cut to ``width`` columns."""
    args = dict(tool_input or {})
    if name == "dispatch" and isinstance(args.get("tasks"), list):
        tasks = args["tasks"]
        names = [
            str(t.get("id") or t.get("title") or "?") if isinstance(t, Mapping) else "?"
            for t in tasks
        ]
        what = f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}: " + ", ".join(names)
    else:
        keys = _PREVIEW_KEYS.get(name) or tuple(args)
        values = [args[k] for k in keys if k in args and args[k] not in (None, "")]
        what = " ".join(v if isinstance(v, str) else _compact_json(v) for v in values[:3])
    text = f"{name}: {what}" if what else name
    return fit(one_line(visible(redact(text)), width * 2), width)


def _compact_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(value)


def duration(seconds: float) -> str:
    """12s, 1m05s, 2h03m: what a ticking clock shows."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass
class _Call:
    name: str
    preview: str
    started: float


@dataclass
class _Row:
    ref: str
    kind: str
    title: str
    started: float
    status: str = "running"
    turns: int = 0
    tokens: int = 0
    cost: float = 0.0
    ended: float | None = None
    detail: str = ""
    successor: str = ""
    """The ref of the thread this one handed off to (SPEC "Jobs larger than one context")."""
    calls: dict[str, _Call] = field(default_factory=dict)
    # what earlier runs of this thread in this process used (a worker the lead resumed)
    base: tuple[int, int, float] = (0, 0, 0.0)

    def elapsed(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.started

    def count(self, event: LoopEvent) -> None:
        """The run's totals as ``event`` gives them, after what earlier runs used."""
        base_turns, base_tokens, base_cost = self.base
        self.turns = base_turns + event.turn
        self.tokens = base_tokens + event.usage.total_tokens
        self.cost = base_cost + event.cost_usd


@dataclass(frozen=True)
class _Col:
    key: str
    header: str
    right: bool = False


_COLUMNS = (
    _Col("mark", ""),
    _Col("ref", "thread"),
    _Col("kind", "kind"),
    _Col("title", "task"),
    _Col("status", "status"),
    _Col("now", "now"),
    _Col("turns", "turns", right=True),
    _Col("tokens", "tokens", right=True),
    _Col("cost", "cost", right=True),
    _Col("elapsed", "time", right=True),
)
# dropped first when the terminal is narrow; ref, mark, title, now and elapsed always stay
_DROP_ORDER = ("kind", "status", "turns", "cost", "tokens")
# the room the title and the preview share before a column is dropped: below it, "Fix the
# tok…" and "bash: pyth…" say nothing, and the totals are on the summary line anyway
_FLEX_ROOM = 30


class Progress:
    """Use as a context manager around a run; pass ``progress.on_event`` as the event sink.

    ``console`` (a ``rich`` Console) draws the live view there; otherwise ``live`` says whether
    to (default: when ``stream`` is a terminal). ``clock`` is the monotonic clock elapsed times
    are read from (tests pass one they control); ``auto_refresh=False`` draws only on
    ``refresh()``."""

    def __init__(
        self,
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
        console: Any = None,
        clock: Callable[[], float] = time.monotonic,
        auto_refresh: bool = True,
        refresh_per_second: float = 4,
    ) -> None:
        self.stream = stream or (console.file if console is not None else sys.stderr)
        self.live = (console is not None or _isatty(self.stream)) if live is None else live
        self.rows: dict[str, _Row] = {}
        self._console = console
        self._clock = clock
        self._auto_refresh = auto_refresh
        self._refresh_per_second = refresh_per_second
        self._lock = threading.Lock()
        self._began: float | None = None
        self._finished: float | None = None
        self._live: Any = None
        self._unicode = True

    def __enter__(self) -> Progress:
        self._began = self._clock()
        if self.live:
            from rich.console import Console
            from rich.live import Live

            if self._console is None:
                self._console = Console(
                    file=self.stream, highlight=False, markup=False, emoji=False
                )
            self._unicode = (self._console.encoding or "").lower().startswith("utf")
            self._live = Live(
                get_renderable=self._view,
                console=self._console,
                auto_refresh=self._auto_refresh,
                refresh_per_second=self._refresh_per_second,
                transient=False,
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finished = self._clock()
        if self._live is not None:
            live, self._live = self._live, None
            try:
                live.stop()  # draws the final frame
            except Exception:  # the display never takes the run down
                pass

    def refresh(self) -> None:
        """Redraw now (the live view also redraws on its own unless ``auto_refresh=False``)."""
        if self._live is not None:
            self._live.refresh()

    def on_event(self, event: LoopEvent) -> None:
        with self._lock:
            line = self._apply(event)
        if line:
            self._line(line)

    def _apply(self, event: LoopEvent) -> str | None:
        now = self._clock()
        row = self.rows.get(event.thread_id)
        line = None
        if row is None:
            row = self.rows[event.thread_id] = _Row(
                format_ref(event.thread_id), event.thread_kind, event.title, started=now
            )
            if event.kind in ("started", "queued") and row.kind != "lead":
                line = f"{event.kind:<8} {row.ref}  {row.kind:<6} {event.title or row.title}"
        elif event.kind == "started" and row.status == "queued":
            # its clock starts when it runs, not while it waited for a slot
            row.started = now
            line = f"started  {row.ref}  {row.kind:<6} {event.title or row.title}"
        elif event.kind == "started" and row.ended is not None:
            # run again in this process (the lead resumed it): keep what the earlier runs used
            row.base = (row.turns, row.tokens, row.cost)
            row.started, row.ended, row.detail = now, None, ""
        if event.title:
            row.title = event.title
        if event.kind == "queued":
            row.status = "queued"
            return line
        if event.kind == "started":
            row.status, row.ended = "running", None
        if event.kind == "handoff":
            # its context is full: it ended done and its successor (``detail``) takes over,
            # said here once (its running totals stay those of its last turn); the
            # successor's own row starts with its "started"
            row.status, row.ended, row.successor = str(Status.DONE), now, event.detail
            row.calls.clear()
            if event.turn or event.usage.total_tokens:
                row.count(event)
            return (
                f"handoff  {row.ref}  {row.kind:<6} {row.title}  handed off → {row.successor}"
                f" (context full)  turns={row.turns} tokens={row.tokens:,}"
                f" {row.elapsed(now):.1f}s"
            )
        row.count(event)
        if event.kind == "tool":
            name = event.tool or event.detail
            row.calls[event.tool_id or name] = _Call(
                name, tool_preview(name, event.tool_input), now
            )
        elif event.kind == "tool_done":
            row.calls.pop(event.tool_id or event.tool or event.detail, None)
        elif event.kind == "finished" and row.successor:
            row.status = str(event.status or Status.DONE)  # said by its handoff line already
        elif event.kind == "finished":
            row.status = str(event.status or Status.DONE)
            row.ended = now
            row.calls.clear()
            row.detail = event.detail
            # why it failed is said once, at the end (the run's error line, or the worker's
            # line of the report), not here too
            line = (
                f"{row.status:<8} {row.ref}  {row.kind:<6} {row.title}  turns={row.turns}"
                f" tokens={row.tokens:,} {row.elapsed(now):.1f}s"
            )
        return line

    def _line(self, text: str) -> None:
        if self._live is None and not self.live:
            try:
                self.stream.write(visible(redact(text)) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    # ------------------------------------------------------------------ the live view

    def _view(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        try:
            with self._lock:
                lines = self.lines(self._console.width, self._console.height)
        except Exception as exc:  # never let a drawing bug end the refresh thread
            lines = [[(f"(progress display failed: {type(exc).__name__})", "dim")]]
        texts = []
        for parts in lines:
            text = Text(no_wrap=True, overflow="ellipsis", end="\n")
            for chunk, style in parts:
                text.append(chunk, style=style or "")
            texts.append(text)
        return Group(*texts)

    def lines(self, width: int, height: int | None = None) -> list[list[tuple[str, str | None]]]:
        """The view as styled lines, each at most ``width`` columns: a header, one line per
        thread, the summary. Called with the lock held."""
        now = self._finished if self._finished is not None else self._clock()
        rows = list(self.rows.values())
        shown, hidden = _fit_height(rows, height)
        cells = [self._cells(row, now) for row in shown]
        cols = list(_COLUMNS)
        gap = 2 if width >= 120 else 1
        if width < 120:
            cols = [c for c in cols if c.key not in ("kind", "status")]

        def fixed_widths(cols: list[_Col]) -> dict[str, int]:
            return {
                c.key: max([cell_width(c.header)] + [cell_width(r[c.key][0]) for r in cells])
                for c in cols
                if c.key not in ("title", "now")
            }

        widths = fixed_widths(cols)
        for key in _DROP_ORDER:
            flex = width - sum(widths.values()) - gap * (len(cols) - 1)
            if flex >= _FLEX_ROOM or not any(c.key == key for c in cols):
                continue
            cols = [c for c in cols if c.key != key]
            widths = fixed_widths(cols)
        flex = max(width - sum(widths.values()) - gap * (len(cols) - 1), 0)
        need_t = max([4] + [cell_width(r["title"][0]) for r in cells])
        need_n = max([3] + [cell_width(r["now"][0]) for r in cells])
        if need_t + need_n <= flex:
            widths["title"], widths["now"] = need_t, flex - need_t
        else:
            t = max(min(need_t, flex * 2 // 5), min(need_t, flex - need_n))
            widths["title"], widths["now"] = t, max(flex - t, 0)

        header = {c.key: (c.header, "bold") for c in cols}
        out = [_join(cols, header, widths, gap)]
        out += [_join(cols, r, widths, gap) for r in cells]
        out.append([(fit(self._summary(rows, now, hidden), width), "bold")])
        return out

    def _cells(self, row: _Row, now: float) -> dict[str, tuple[str, str | None]]:
        running = row.status == "running" and row.ended is None
        queued = row.status == "queued"
        style = STATUS_STYLES.get(row.status, "")
        if running:
            frames = SPINNER if self._unicode else ASCII_SPINNER
            mark = frames[int(now * 8) % len(frames)]
        elif row.successor:
            mark = "↳" if self._unicode else ">"
        else:
            mark = (MARKS if self._unicode else ASCII_MARKS).get(row.status, "·")
        dim = None if running else "dim"
        if running and row.calls:
            call = next(iter(row.calls.values()))
            more = f"  (+{len(row.calls) - 1})" if len(row.calls) > 1 else ""
            activity: tuple[str, str | None] = (call.preview + more, None)
        elif running:
            activity = ("thinking…" if self._unicode else "thinking...", "dim")
        elif queued:
            activity = ("queued: waits for a free slot (max_parallel)", "dim")
        elif row.successor:
            arrow = "→" if self._unicode else "->"
            activity = (f"handed off {arrow} {row.successor} (context full)", "cyan")
        elif row.status != "done" and row.detail and self._finished is None:
            # while the job runs; the end says why once, below the view
            activity = (one_line(visible(redact(row.detail)), 300), style)
        else:
            activity = ("", None)
        return {
            "mark": (mark, style),
            "ref": (row.ref, "bold" if running else None),
            "kind": (row.kind, dim),
            "title": (one_line(visible(redact(row.title)), 300), dim),
            "status": (row.status, style),
            "now": activity,
            "turns": (str(row.turns), dim),
            "tokens": (compact(row.tokens), dim),
            "cost": (usd(row.cost), dim),
            "elapsed": ("" if queued else duration(row.elapsed(now)), None if running else "dim"),
        }

    def _summary(self, rows: list[_Row], now: float, hidden: int) -> str:
        """``lead running · workers: 2 running, 1 queued, 3 done | 40k tokens $0.02 1m05s``:
        the lead's state on its own (it is no worker), the other threads counted by status —
        queued ones too, a thread that handed off not: its successor counts for it — then the
        tokens, cost and time of the whole run."""
        others = [r for r in rows if r.kind != "lead" and not r.successor]
        counts: dict[str, int] = {"running": 0, "queued": 0, "done": 0, "failed": 0}
        for row in others:
            counts[row.status] = counts.get(row.status, 0) + 1
        parts = [f"{n} {status}" for status, n in counts.items() if n or status == "running"]
        label = "workers" if all(r.kind == "worker" for r in others) else "threads"
        text = f"{label}: " + ", ".join(parts)
        leads = [r for r in rows if r.kind == "lead"]
        if leads:
            text = f"lead {leads[-1].status} · " + text
        tokens = sum(r.tokens for r in rows)
        cost = sum(r.cost for r in rows)
        began = self._began if self._began is not None else now
        text += f" | {compact(tokens)} tokens {usd(cost)}"
        text += f" {duration(now - began)}"
        if hidden:
            text += f"  ({hidden} finished not shown)"
        return text


def _fit_height(rows: list[_Row], height: int | None) -> tuple[list[_Row], int]:
    """The rows that fit under a header and above the summary: running ones first kept, the
    oldest finished ones left out."""
    room = max((height or 0) - 3, 1) if height else len(rows)
    if len(rows) <= room:
        return rows, 0
    finished = [r for r in rows if r.ended is not None]
    drop = set(map(id, finished[: len(rows) - room]))
    kept = [r for r in rows if id(r) not in drop][:room]
    return kept, len(rows) - len(kept)


def _join(
    cols: list[_Col],
    cells: Mapping[str, tuple[str, str | None]],
    widths: Mapping[str, int],
    gap: int,
) -> list[tuple[str, str | None]]:
    parts: list[tuple[str, str | None]] = []
    for i, col in enumerate(cols):
        text, style = cells[col.key]
        w = widths[col.key]
        # the ref's width was taken from the refs themselves: it is never cut
        text = text if col.key == "ref" else fit(text, w)
        pad = " " * max(w - cell_width(text), 0)
        if i:
            parts.append((" " * gap, None))
        if col.right:
            parts += [(pad, None), (text, style)]
        else:
            parts += [(text, style), (pad, None)]
    while parts and not parts[-1][0].strip():
        parts.pop()
    if parts:
        last, style = parts[-1]
        parts[-1] = (last.rstrip(), style)
    return parts


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
