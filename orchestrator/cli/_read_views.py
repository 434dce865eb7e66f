"""What ``ls``, ``show``, ``tree`` and ``search`` print, built from what either read path
produced: ``orchestrator.api`` over the store (the full path, ``_cmd_read``) or the read-only
fast path (``_fast`` over ``store.rawread``), which reads the same models.
The ``--json`` documents are ``orchestrator.views``' shapes; the text of ``ls`` and ``tree`` is
rendered from those documents too, the text of ``show`` and ``search`` from the objects.

One builder per command, so both paths print the same bytes by construction. No click, no
rich, no pydantic at import: the fast path's start-up time is the point.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..humanize import age, compact
from ..views import VERDICT_MARKS, hit_json, marked, snippet_parts
from ._render import Column, Printer, one_line, status_cell
from ._thread_text import render_header, render_messages, render_result

if TYPE_CHECKING:
    from ..views import ThreadView
    from ._thread_text import Mode, WholeOutputs

SNIPPET_WIDTH = 160


@dataclass(frozen=True, slots=True)
class View:
    """A command's output: ``data`` its ``--json`` document, ``text`` its text (through a
    ``Printer``); ``redact``/``verbatim`` as in ``cli.Output``."""

    data: Any
    text: Callable[[Printer], None]
    redact: bool = True
    verbatim: bool = False


def on_terminal() -> bool:
    """Whether stdout is a terminal: only there may a table lack room for whole refs (and the
    shortest unique forms are worth a read of every id)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def note(text: str) -> None:
    """A line on stderr beside the output ("no threads", "(the 50 newest; …)")."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------- ls


def ls_view(
    rows: Sequence[dict[str, Any]],
    *,
    limit: int,
    more: bool,
    database: str,
    short: Mapping[str, str] | None = None,
) -> View:
    """``rows``: SPEC ``ls`` rows (``views.thread_json``); ``database``: the file (or URL) they
    were read from, named when there are none; ``short``: each ref's shortest unique form, for
    a terminal too narrow for whole refs (``Printer.table``)."""

    def text(p: Printer) -> None:
        if not rows:
            note(f"no threads in {database}")
            return
        p.table(
            [
                Column("REF", ref=True),
                Column("KIND"),
                Column("STATUS"),
                Column("MSGS", "right"),
                Column("AGE", "right"),
                Column("TITLE", wrap=True),
            ],
            [
                [
                    t["ref"],
                    t["kind"],
                    status_cell(t["status"]),
                    str(t["messages"]),
                    age(datetime.fromisoformat(t["created_at"])),
                    one_line(t["title"], 200),
                ]
                for t in rows
            ],
            short=short,
        )
        if more:
            note(f"(the {limit} newest; --limit 0 lists all)")

    return View(list(rows), text)


# ----------------------------------------------------------------- show


def show_view(
    view: ThreadView,
    *,
    mode: Mode,
    redact: bool,
    whole: WholeOutputs | None = None,
    whole_json: bool = False,
) -> View:
    """``whole``: the outputs stored apart, spooled for ``raw`` (the full path's only: the fast
    path leaves ``--raw``); ``whole_json``: the ``--json`` document carries them whole too (read
    into it only when it is the output)."""
    info = view.info

    def text(p: Printer) -> None:
        render_header(p, info, shown=view.shown, usage=view.usage, cost=view.cost)
        if info.result is not None:
            render_result(p, info.result)
        render_messages(p, info, view.messages or (), mode, before=view.before, whole=whole)

    data = view.to_json(whole=whole.text if whole is not None and whole_json else None)
    # ``--raw`` writes the bytes as stored only where they cannot drive a terminal (a pipe, a
    # file; ``--json`` escapes them anyway): on a terminal it draws them like every output
    return View(data, text, redact=redact, verbatim=mode == "raw" and not on_terminal())


# ----------------------------------------------------------------- tree


def tree_view(data: dict[str, Any]) -> View:
    """``data``: SPEC ``tree`` (``views.tree_json``), the lead's node with ``focus``. A handoff
    shows as such: the thread that handed off ends its row with "↳ continued by T-…", and its
    successor, marked "↳", follows it — a worker's among its siblings, a later lead at the top
    level with the workers it spawned."""
    focus = data["focus"]

    def text(p: Printer) -> None:
        def walk(node: dict[str, Any], prefix: str, connector: str, fork: bool) -> None:
            parts: list[tuple[str, str | None]] = [(prefix + connector, "dim")]
            if node.get("continues"):
                parts.append(("↳ ", "cyan"))
            if fork and node["forked_from"]:
                parts.append((f"⑂ fork of #{node['forked_from']['at']}  ", "magenta"))
            parts += [
                (node["ref"], "bold"),
                (f"  {node['kind']}  ", None),
                status_cell(node["status"]),
                (f"  {one_line(node['title'], 60)}" if node["title"] else "", None),
                (f"  · {compact(node['tokens'])} tok", "dim"),
                *_check_cell(node.get("check")),
            ]
            if node.get("continued_by"):
                parts.append((f"  ↳ continued by {node['continued_by']}", "cyan"))
            if node["ref"] == focus and (node is not data or data.get("successors")):
                parts.append(("  ◀", "yellow"))
            p.parts(parts)
            kids = [(c, False) for c in node["children"]] + [(f, True) for f in node["forks"]]
            below = prefix + ("" if not connector else "│  " if connector == "├─ " else "   ")
            for i, (kid, is_fork) in enumerate(kids):
                walk(kid, below, "└─ " if i == len(kids) - 1 else "├─ ", is_fork)

        for lead in (data, *data.get("successors", ())):
            walk(lead, "", "", False)

    return View(data, text)


def _check_cell(check: dict[str, Any] | None) -> list[tuple[str, str | None]]:
    """A worker's result check in the tree: ``✓ 4/4 verified``, ``? 3/4 verified``, ``✗ …``."""
    if not check:
        return []
    style = {"verified": "green", "unverified": "yellow"}.get(check["verdict"], "red")
    mark = VERDICT_MARKS.get(check["verdict"], "?")
    text = f"  {mark} {check['verified']}/{check['claims']} verified"
    if check["contradicted"]:
        text += f", {check['contradicted']} contradicted"
    return [(text, style)]


# ----------------------------------------------------------------- search


def search_view(query: str, hits: Sequence[Any]) -> View:
    r"""``hits``: ``SearchHit``\ s (ref, thread_id, seq, role, snippet, marks).
    A match is styled on a terminal and marked ⟦so⟧ when piped (``views.marked``)."""
    data = [hit_json(h) for h in hits]

    def text(p: Printer) -> None:
        if not hits:
            note(f"no matches for {query!r}")
        width = max((len(h.ref) for h in hits), default=0)
        for h in hits:
            parts: list[tuple[str, str | None]] = [
                (h.ref.ljust(width), "bold"),
                (f"  {h.role:<9}  ", "dim"),
            ]
            for part, hit in snippet_parts(h.snippet, h.marks, SNIPPET_WIDTH):
                if p.styled:  # on a terminal the style tells a match; piped, the marks do
                    parts.append((part, "bold yellow" if hit else None))
                else:
                    parts.append((marked(part, hit), None))
            p.parts(parts)

    return View(data, text)
