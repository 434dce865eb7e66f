"""Text output of the command line: a printer that styles on a terminal and writes plain text
anywhere else, aligned tables, and the small formatters every command shares.

On a terminal, ``rich`` styles the output (``NO_COLOR`` is honoured) and a table's title-like
column is cut to fit the window. Anywhere else — a pipe, a file, a test — output is plain text:
no escape codes, columns two spaces apart, nothing cut, no trailing spaces. ``rich`` is imported
only for a terminal.

Either way, text from the record (a tool's output, a title, an error) cannot drive the terminal
or hide from the reader: control, bidi and invisible characters are drawn, not sent
(``visible``, which is ``orchestrator.drawing.drawn``, the rule the web pages use too) — ESC as
``^[`` (as ``cat -v`` does), a carriage return not ending a line as ``^M``, C1 controls as
``\x9b``, bidi overrides as ``\u202e``, a zero-width space as ``\u200b``. Only a ``verbatim``
printer writes them as stored: ``show --raw`` when its output is not a terminal.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, cast

from ..drawing import DRAWN, drawn
from ..humanize import count

Style = str | None


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    align: str = "left"  # "left" | "right"
    wrap: bool = False  # on a terminal: the one column that shrinks (and is cut with "…")
    ref: bool = False  # holds whole refs: their short forms where the terminal has no room


Cell = str | tuple[str, Style]

visible = drawn
"""``drawing.drawn``: the one rule every door draws text by (the web pages and the HTML export
call the same function)."""


class Printer:
    """Writes command output to ``stream`` (stdout by default), control characters made
    ``visible`` unless ``verbatim``."""

    def __init__(
        self, stream: TextIO | None = None, *, color: bool | None = None, verbatim: bool = False
    ) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.styled = _isatty(self.stream) if color is None else color
        self.verbatim = verbatim
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(
                file=self.stream,
                highlight=False,
                markup=False,
                emoji=False,
                soft_wrap=True,
                force_terminal=self.styled,
            )
        return self._console

    @property
    def columns(self) -> int:
        """The terminal's width in columns."""
        import shutil  # only on a terminal: shutil pulls in bz2 and lzma (~3 ms)

        return shutil.get_terminal_size().columns

    def line(self, text: str = "", style: Style = None) -> None:
        self.parts([(text, style)])

    def parts(self, parts: Sequence[tuple[str, Style]]) -> None:
        """One line made of differently styled parts."""
        if not self.verbatim:
            parts = [(visible(t), s) for t, s in parts]
        if not self.styled:
            self.stream.write("".join(t for t, _ in parts) + "\n")
            return
        from rich.text import Text

        text = Text()
        for t, s in parts:
            text.append(t, style=s or "")
        self.console.print(text)

    def write(self, text: str) -> None:
        """Text written as given (no styling, no newline added; controls made visible unless
        ``verbatim``)."""
        if not self.verbatim:
            text = visible(text)
        if self.styled:
            self.console.file.write(text)
        else:
            self.stream.write(text)

    def table(
        self,
        columns: Sequence[Column],
        rows: Sequence[Sequence[Cell]],
        *,
        short: Mapping[str, str] | None = None,
    ) -> None:
        """Columns aligned, two spaces apart. On a terminal the ``wrap`` column is cut (with
        "…") so that rows fit the window; when they still do not, the ``ref`` columns give
        each ref's shortest unique form from ``short`` (``T-…x2p4``) instead of cutting it.
        Elsewhere nothing is cut or shortened."""
        cells = [[(c, None) if isinstance(c, str) else c for c in row] for row in rows]
        if not self.verbatim:  # before measuring: "^[" is two columns wide
            cells = [[(visible(t), s) for t, s in row] for row in cells]
        header = [c.header for c in columns]

        def fitted() -> list[int]:
            widths = [
                max([cell_width(header[i])] + [cell_width(r[i][0]) for r in cells])
                for i in range(len(columns))
            ]
            if self.styled:
                excess = sum(widths) + 2 * (len(widths) - 1) - self.columns
                for i, col in enumerate(columns):
                    if col.wrap and excess > 0:
                        widths[i] = max(widths[i] - excess, min(widths[i], 12))
            return widths

        widths = fitted()
        if self.styled and short and sum(widths) + 2 * (len(widths) - 1) > self.columns:
            cells = [
                [
                    (short.get(t, t), s) if col.ref else (t, s)
                    for col, (t, s) in zip(columns, r, strict=True)
                ]
                for r in cells
            ]
            widths = fitted()
        head_style = "bold" if self.styled else None
        for row in [[(h, head_style) for h in header], *cells]:
            parts: list[tuple[str, Style]] = []
            for i, (col, (text, style)) in enumerate(zip(columns, row, strict=True)):
                text = fit(text, widths[i])
                pad = " " * (widths[i] - cell_width(text))
                if i:
                    parts.append(("  ", None))
                if col.align == "right":
                    parts += [(pad, None), (text, style)]
                elif i == len(columns) - 1:
                    parts.append((text, style))
                else:
                    parts += [(text, style), (pad, None)]
            while parts and not parts[-1][0].strip():
                parts.pop()
            self.parts(parts)


def _cell_text(cell: Cell) -> str:
    return cell[0] if isinstance(cell, tuple) else cell


def fit(text: str, width: int) -> str:
    """``text`` cut with "…" to at most ``width`` terminal columns."""
    if cell_width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = cell_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def cell_width(text: str) -> int:
    """Terminal columns taken by ``text`` (wide East Asian characters count two)."""
    if text.isascii():
        return len(text)
    return sum(
        0
        if unicodedata.combining(ch)
        else 2
        if unicodedata.east_asian_width(ch) in ("W", "F")
        else 1
        for ch in text
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# ----------------------------------------------------------------- formatters

STATUS_STYLES: dict[str, str] = {
    "done": "green",
    "failed": "red",
    "interrupted": "yellow",
    "cancelled": "yellow",
    "running": "cyan",
    "queued": "blue",
    "idle": "dim",
}


def status_cell(status: str) -> tuple[str, Style]:
    return (status, STATUS_STYLES.get(status))


def one_line(text: str, width: int = 80) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``width`` characters with "…"."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[: max(width - 1, 0)] + "…"


def first_line(text: str, width: int = 80) -> str:
    for line in text.splitlines():
        if line.strip():
            return one_line(line, width)
    return ""


def usd(value: float) -> str:
    if value == 0:
        return "$0"
    if value < 1:
        return f"${value:.4f}"
    return f"${value:,.2f}"


def plural(n: int, word: str) -> str:
    return f"{count(n)} {word}" if n == 1 else f"{count(n)} {word}s"


def percent(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.0f}%"


def json_value(value: Any, width: int) -> str:
    """A tool input value shortened for a one-line call: ``"src/x.py"``, ``12``, ``{…}``."""
    if isinstance(value, str):
        return json.dumps(one_line(value, width), ensure_ascii=False)
    return one_line(json.dumps(value, ensure_ascii=False), width)


_JSON_UNSAFE = re.compile("[\u2028\u2029]|" + DRAWN.pattern)
"""What ``dumps`` escapes beyond JSON's own: every character ``drawing.drawn`` draws (JSON
already escapes C0), and the line separators."""


def dumps(doc: Any) -> str:
    """The one JSON document a ``--json`` command prints. Non-ASCII text is kept, but every
    character the other doors draw (DEL, C1 controls, bidi controls, zero-width and tag
    characters) and the line separators are ``\\u`` escapes too (JSON already escapes C0):
    the document is safe to print on a terminal and decodes to the same values. On a stdout
    that cannot hold every character (``PYTHONIOENCODING=ascii``, a Latin-1 terminal) all of
    it is ASCII, with ``\\u`` escapes."""
    text = json.dumps(doc, ensure_ascii=not holds_unicode(sys.stdout), indent=2)
    return _JSON_UNSAFE.sub(_json_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    # a character beyond the BMP (a tag character) is its UTF-16 surrogate pair, as JSON spells it
    units = match.group().encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{units[i] << 8 | units[i + 1]:04x}" for i in range(0, len(units), 2))


def holds_unicode(stream: Any) -> bool:
    """Whether ``stream``'s encoding can write every character (a UTF one)."""
    import codecs

    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name.startswith("utf")
    except LookupError:
        return False


def safe_streams() -> None:
    """stdout and stderr in an encoding that cannot hold every character escape what they
    cannot write (``\\u2026``) instead of failing the command with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not holds_unicode(stream):
            reconfigure(errors="backslashreplace")


def write_error(code: int, message: str, *, json_mode: bool, prog: str = "threadloom") -> None:
    """One error, as SPEC says: a line on stderr, plus ``{"error": {"code", "message"}}`` on
    stdout with ``--json``. ``message`` is already one visible, redacted line."""
    try:
        if json_mode:
            sys.stdout.write(dumps({"error": {"code": code, "message": message}}) + "\n")
            sys.stdout.flush()
        sys.stderr.write(f"{prog}: error: {message}\n")
        sys.stderr.flush()
    except BrokenPipeError:
        silence_stdout()


def silence_stdout() -> None:
    """After a reader closed our stdout (``threadloom ls | head``): no second error at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def write_redacted(
    write: Callable[[Printer], None], stdout: Any, *, verbatim: bool = False
) -> None:
    """Render through a stream that looks like ``stdout`` (same tty-ness, so the same width and
    colours) and writes it redacted as one text (``store.RedactingWriter``: a secret may span
    several of the printer's writes, or a stored output's chunks), in bounded memory."""
    import io

    from workers import RedactingWriter

    sink = RedactingWriter(stdout.write)

    class _Redacting(io.TextIOBase):
        def write(self, text: str) -> int:
            sink.write(text)
            return len(text)

        def isatty(self) -> bool:
            return _isatty(stdout)

        @property
        def encoding(self) -> str:  # type: ignore[override]
            return getattr(stdout, "encoding", None) or "utf-8"

    write(Printer(cast("TextIO", _Redacting()), verbatim=verbatim))
    sink.close()
