"""The lead's report as the end of ``run``, ``demo``, ``resume`` and ``fork`` prints it.

The report is Markdown the lead wrote. On a terminal it is rendered (``rich.markdown``): headings,
lists, tables, code. Anywhere else — a pipe, a file — it is printed as the exact text, so that
``threadloom run job.toml > report.md`` keeps the Markdown. ``--json`` carries it unrendered.

Either way it is model-written text: it is redacted (``store.redact``) and its control
characters are made visible (``_render.visible``) before anything draws it. On a terminal links
are shown as text and address, never as OSC 8 hyperlinks, so the only escape codes are styling
and a link cannot point somewhere its text does not say.
"""

from __future__ import annotations

from typing import Any, ClassVar

from store import redact

from ._render import Printer, visible


def write_report(p: Printer, report: str) -> None:
    """Write ``report`` (and a blank line after it) through ``p``: rendered on a terminal,
    the exact text elsewhere."""
    text = report.rstrip()
    if not text:
        return
    if not p.styled:
        p.write(text + "\n\n")
        return
    p.console.print()  # apart from the progress view above it on the same screen
    p.console.print(_markdown(visible(redact(text))), soft_wrap=False)
    p.console.print()


def _markdown(text: str) -> Any:
    from rich.console import JustifyMethod
    from rich.markdown import Heading, Markdown, MarkdownElement

    class _Heading(Heading):
        # rich centres a level-1 heading; a report reads top-down from the left margin
        LEVEL_ALIGN: ClassVar[dict[str, JustifyMethod]] = {f"h{n}": "left" for n in range(1, 7)}

    class _Report(Markdown):
        elements: ClassVar[dict[str, type[MarkdownElement]]] = {
            **Markdown.elements,
            "heading_open": _Heading,
        }

    return _Report(text, hyperlinks=False)
