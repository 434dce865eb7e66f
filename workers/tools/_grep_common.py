"""What both ``grep`` engines share: the result they build and how a match line is shown.

Both engines must give identical results on the same tree, so everything that shapes the output
(the order, the cap, the binary-file rule, how a line is cut and shown) lives here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_MATCHES = 500
MAX_LINE_CHARS = 1000


@dataclass
class GrepResult:
    """Matches in tree order (by path, then line number), capped; ``total`` counts them all.

    Files are added whole, in order: a file found to be binary (a NUL byte anywhere) is dropped
    with all of its matches, as ripgrep skips binary files.
    """

    cap: int = MAX_MATCHES
    shown: list[tuple[bytes, int, str]] = field(default_factory=list)
    total: int = 0

    @property
    def room(self) -> int:
        return self.cap - len(self.shown)

    def add_file(self, path: bytes, matches: list[tuple[int, str]], count: int) -> None:
        self.shown.extend((path, line, text) for line, text in matches[: self.room])
        self.total += count


def show_line(raw: bytes) -> str:
    """A matched line as shown: line terminator removed, decoded, cut when very long."""
    text = raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8", "replace")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + f" … [line truncated: {len(text)} characters]"
    return text
