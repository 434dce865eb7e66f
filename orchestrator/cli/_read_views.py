"""What ``ls``, ``show``, ``tree`` and ``search`` print, built from the data either read path
produced: the store's models (the full path, ``_cmd_read``) or the plain objects of the
read-only fast path (``_fast`` over ``store._rawread``), which have the same attribute names.

One builder per command, so both paths print the same bytes by construction. No click, no
rich, no pydantic at import: the fast path's start-up time is the point.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..views import fork_json, message_json, result_json, thread_json, usage_json
from ._render import Column, Printer, age, compact, one_line, status_cell
from ._thread_text import render_header, render_messages, render_result

if TYPE_CHECKING:
    from ..views import AnyMessage, AnyThread, AnyUsage
    from ._thread_text import Mode, WholeOutputs

SNIPPET_WIDTH = 160
_MATCH = re.compile(r"\[([^\[\]]*)\]")


@dataclass(frozen=True, slots=True)
class View:
    """A command's output: ``data`` its ``--json`` document, ``text`` its text (through a
    ``Printer``); ``redact``/``verbatim`` as in ``cli.Output``."""

    data: Any
    text: Callable[[Printer], None]
    redact: bool = True
    verbatim: bool = False


def note(text: str) -> None:
    """A line on stderr beside the output ("no threads", "(the 50 newest; …)")."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------- ls


def ls_view(rows: Sequence[AnyThread], *, limit: int, more: bool) -> View:
    def text(p: Printer) -> None:
        if not rows:
            note("no threads")
            return
        p.table(
            [
                Column("REF"),
                Column("KIND"),
                Column("STATUS"),
                Column("MSGS", "right"),
                Column("AGE", "right"),
                Column("TITLE", wrap=True),
            ],
            [
                [
                    t.ref,
                    str(t.kind),
                    status_cell(str(t.status)),
                    str(t.head_seq),
                    age(t.created_at),
                    one_line(t.title, 200),
                ]
                for t in rows
            ],
        )
        if more:
            note(f"(the {limit} newest; --limit 0 lists all)")

    return View([thread_json(t) for t in rows], text)


# ----------------------------------------------------------------- show


def show_view(
    info: AnyThread,
    msgs: Sequence[AnyMessage],
    *,
    start: int | None,
    end: int | None,
    before: AnyMessage | None,
    usage: AnyUsage,
    cost: float,
    mode: Mode,
    redact: bool,
    whole: WholeOutputs | None = None,
) -> View:
    """``start``/``end``: the resolved range (None: the whole thread); ``whole``: the outputs
    stored apart, spooled for ``raw`` (the full path's only: the fast path leaves ``--raw``)."""
    shown = None if start is None else (start, end or info.head_seq)
    data: dict[str, Any] = {
        **thread_json(info),
        "result": result_json(info.result),
        "usage": usage_json(usage),
        "cost_usd": cost,
        "range": None if shown is None else {"start": shown[0], "end": shown[1]},
        "task": info.task,
        "error": info.error,
        "messages": [message_json(m, info.id) for m in msgs],
    }

    def text(p: Printer) -> None:
        render_header(p, info, shown=shown, usage=usage, cost=cost)
        if info.result is not None:
            render_result(p, info.result)
        render_messages(p, info, msgs, mode, before=before, whole=whole)

    return View(data, text, redact=redact, verbatim=mode == "raw")


# ----------------------------------------------------------------- tree


def tree_view(
    focus: AnyThread,
    threads: Sequence[AnyThread],
    totals: dict[str, Any],
    *,
    empty: AnyUsage,
) -> View:
    """``threads``: the job's, oldest first; ``totals``: usage total per thread id;
    ``empty``: the usage of a thread with none recorded."""
    by_id = {t.id: t for t in threads}
    children: dict[str, list[str]] = {t.id: [] for t in threads}
    forks: dict[str, list[str]] = {t.id: [] for t in threads}
    root = by_id.get(focus.job_id, threads[0] if threads else focus)
    for t in threads:
        if t.id == root.id:
            continue
        if t.forked_from and t.forked_from.thread_id in by_id:
            forks[t.forked_from.thread_id].append(t.id)
        elif t.parent_id and t.parent_id in by_id:
            children[t.parent_id].append(t.id)
        else:
            children[root.id].append(t.id)

    def usage_of(tid: str) -> AnyUsage:
        return totals[tid].usage if tid in totals else empty

    def node(tid: str) -> dict[str, Any]:
        t = by_id[tid]
        return {
            "ref": t.ref,
            "kind": str(t.kind),
            "status": str(t.status),
            "title": t.title,
            "usage": usage_json(usage_of(tid)),
            "tokens": usage_of(tid).total_tokens,
            "cost_usd": totals[tid].cost_usd if tid in totals else 0.0,
            "parent": None if t.parent_id is None else f"T-{t.parent_id}",
            "forked_from": fork_json(t),
            "children": [node(c) for c in children[tid]],
            "forks": [node(f) for f in forks[tid]],
        }

    data = node(root.id)
    data["focus"] = focus.ref

    def text(p: Printer) -> None:
        def walk(tid: str, prefix: str, connector: str, fork: bool) -> None:
            t = by_id[tid]
            parts: list[tuple[str, str | None]] = [(prefix + connector, "dim")]
            if fork and t.forked_from:
                parts.append((f"⑂ fork of #{t.forked_from.at}  ", "magenta"))
            parts += [
                (t.ref, "bold"),
                (f"  {t.kind}  ", None),
                status_cell(str(t.status)),
                (f"  {one_line(t.title, 60)}" if t.title else "", None),
                (f"  · {compact(usage_of(tid).total_tokens)} tok", "dim"),
            ]
            if tid == focus.id and tid != root.id:
                parts.append(("  ◀", "yellow"))
            p.parts(parts)
            kids = [(c, False) for c in children[tid]] + [(f, True) for f in forks[tid]]
            below = prefix + ("" if not connector else "│  " if connector == "├─ " else "   ")
            for i, (kid, is_fork) in enumerate(kids):
                walk(kid, below, "└─ " if i == len(kids) - 1 else "├─ ", is_fork)

        walk(root.id, "", "", False)

    return View(data, text)


# ----------------------------------------------------------------- search


def search_view(query: str, hits: Sequence[Any]) -> View:
    """``hits``: ``SearchHit`` or ``RawHit`` (ref, thread_id, seq, role, snippet)."""
    data = [
        {
            "ref": h.ref,
            "thread": f"T-{h.thread_id}",
            "seq": h.seq,
            "role": h.role,
            "snippet": h.snippet,
        }
        for h in hits
    ]

    def text(p: Printer) -> None:
        if not hits:
            note(f"no matches for {query!r}")
        width = max((len(h.ref) for h in hits), default=0)
        for h in hits:
            parts: list[tuple[str, str | None]] = [
                (h.ref.ljust(width), "bold"),
                (f"  {h.role:<9}  ", "dim"),
            ]
            snippet, pos = one_line(h.snippet, SNIPPET_WIDTH), 0
            for m in _MATCH.finditer(snippet):
                parts.append((snippet[pos : m.start()], None))
                parts.append((m.group(0) if not p.styled else m.group(1), "bold yellow"))
                pos = m.end()
            parts.append((snippet[pos:], None))
            p.parts(parts)

    return View(data, text)
