"""Where a key sits in a job file's TOML text: ``tomllib`` keeps no positions, and a job
file's errors name their line (SPEC "Job files")."""

from __future__ import annotations

import re
from typing import Any


class TomlLines:
    """Finds the line of a key in TOML text (tomllib keeps no positions). Good enough for the
    files people write: ``[job]``, ``[job.worker]`` and ``[[task]]`` headers with keys below."""

    def __init__(self, text: str) -> None:
        # TOML ends lines at "\n" only; ``str.splitlines`` would also split at U+2028 & co.
        # inside strings and shift every line number after them
        self.lines = [line.rstrip("\r") for line in text.split("\n")]

    def header_line(self, header: str) -> int | None:
        """1-based line of the first ``header`` (e.g. ``[task]``), or None."""
        found = self._header_lines(header)
        return found[0] + 1 if found else None

    def _header_lines(self, header: str) -> list[int]:
        pat = re.compile(r"^\s*" + re.escape(header) + r"\s*(#.*)?$")
        return [i for i, line in enumerate(self.lines) if pat.match(line)]

    def _key_after(self, start: int, key: str) -> int | None:
        pat = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
        for i in range(start + 1, len(self.lines)):
            if self.lines[i].lstrip().startswith("["):
                return None
            if pat.match(self.lines[i]):
                return i
        return None

    def line(self, loc: tuple[Any, ...]) -> int:
        """1-based line of ``loc`` (e.g. ("job", "model"), ("task", 2, "id")); the nearest
        enclosing header when the key itself is not written in the file."""
        if not loc:
            return 1
        if loc[0] == "task":
            headers = self._header_lines("[[task]]")
            if len(loc) == 1:
                return headers[0] + 1 if headers else 1
            idx = loc[1] if isinstance(loc[1], int) else 0
            if idx >= len(headers):
                return 1
            start = headers[idx]
            if len(loc) > 2:
                found = self._key_after(start, str(loc[2]))
                return (found if found is not None else start) + 1
            return start + 1
        if loc[0] == "job":
            if len(loc) > 1 and loc[1] == "worker":
                headers = self._header_lines("[job.worker]")
                if headers:
                    if len(loc) > 2:
                        found = self._key_after(headers[0], str(loc[2]))
                        return (found if found is not None else headers[0]) + 1
                    return headers[0] + 1
            headers = self._header_lines("[job]")
            if not headers:
                return 1
            if len(loc) > 1:
                found = self._key_after(headers[0], str(loc[1]))
                return (found if found is not None else headers[0]) + 1
            return headers[0] + 1
        pat = re.compile(r"^\s*\[*\s*" + re.escape(str(loc[0])) + r"\b")
        for i, line in enumerate(self.lines):
            if pat.match(line):
                return i + 1
        return 1
