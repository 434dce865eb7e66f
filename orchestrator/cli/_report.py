"""The lead's report as the end of ``run``, ``demo``, ``resume`` and ``fork`` prints it.

The report is Markdown the lead wrote. On a terminal it is rendered (``rich.markdown``): headings,
lists, tables, code. Anywhere else — a pipe, a file — it is printed as the exact text, so that
``threadloom run job.toml > report.md`` keeps the Markdown. ``--json`` carries it unrendered.

Either way it is model-written text: it is redacted (``workers.redact``) and its control
characters are made visible (``_render.visible``) before anything draws it. On a terminal links
are shown as text and address, never as OSC 8 hyperlinks, so the only escape codes are styling
and a link cannot point somewhere its text does not say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from workers import redact

from ._render import Printer, visible


def write_report(p: Printer, report: str, *, short: Mapping[str, str] | None = None) -> None:
    """Write ``report`` (and a blank line after it) through ``p``: rendered on a terminal,
    the exact text elsewhere. ``short``: whole refs → their shortest unique forms
    (``T-…x2p4``), which a table too wide for the terminal shows instead of cutting every ref
    to the same ``T-01m93zesf03pszxv0d…``."""
    text = report.rstrip()
    if not text:
        return
    if not p.styled:
        p.write(text + "\n\n")
        return
    text = visible(redact(text))
    if short:
        text = _tables_fit(text, short, p.console.width)
    p.console.print()  # apart from the progress view above it on the same screen
    p.console.print(_markdown(text), soft_wrap=False)
    p.console.print()


_TABLE_ROW = re.compile(r"^\s*\|")
_WHOLE_REF = re.compile(r"\bT-[0-9a-hjkmnp-tv-z]{26}\b")


def _tables_fit(text: str, short: Mapping[str, str], width: int) -> str:
    """``text`` with the whole refs of each Markdown table that cannot show them whole at
    ``width`` replaced by their short forms: the table is rendered as the report will be, and
    a ref that does not come out whole is one the table had no room for."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _TABLE_ROW.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and _TABLE_ROW.match(lines[j]):
            j += 1
        block = "\n".join(lines[i:j])
        refs = {r for r in _WHOLE_REF.findall(block) if r in short}
        if refs and not all(r in _rendered(block, width) for r in refs):
            block = _WHOLE_REF.sub(lambda m: short.get(m.group(0), m.group(0)), block)
        out.append(block)
        i = j
    return "\n".join(out)


def _rendered(markdown: str, width: int) -> str:
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False).print(
        _markdown(markdown), soft_wrap=False
    )
    return buf.getvalue()


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
