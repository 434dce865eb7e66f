"""Reading another tool's JSON-lines log defensively: a line that is not a JSON object is
skipped and counted, never fatal (a session being written ends with a half line; old versions
wrote things nobody documents)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from store import NewMessage, TextBlock

PLACEHOLDER_JSON = 2000
"""Characters of an unmodeled block's JSON kept in its placeholder text (images and other
binary payloads are named with their size instead)."""


@dataclass
class JsonLines:
    objects: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    stat: list[int] | None = None
    """[size, mtime_ns] of the file, taken before reading it (a re-import skips a file whose
    stat has not changed since)."""

    @classmethod
    def of(cls, lines: Iterable[str]) -> JsonLines:
        out = cls()
        for raw in lines:
            line = raw.strip(" \t\r\n\ufeff")
            if not line:
                continue
            try:
                obj = json.loads(line)
                if "\\ud" in line.lower() or line.count("[") + line.count("{") > MAX_DEPTH:
                    obj = _storable(obj)
            except (ValueError, RecursionError):
                out.skipped += 1
                continue
            if isinstance(obj, dict):
                out.objects.append(obj)
            else:
                out.skipped += 1
        return out


MAX_DEPTH = 64
"""How deep a line's JSON may nest (threadloom's own transcripts allow as much): a deeper line
is skipped, as unreadable; the store could not keep it."""


def _storable(obj: Any, depth: int = 0) -> Any:
    """``obj`` with every lone surrogate (JSON can escape one; UTF-8 cannot hold it) replaced;
    ValueError when it nests deeper than ``MAX_DEPTH``."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if isinstance(obj, str):
        return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, list):
        return [_storable(v, depth + 1) for v in obj]
    if isinstance(obj, dict):
        return {_storable(k, depth + 1): _storable(v, depth + 1) for k, v in obj.items()}
    return obj


def read_lines(path: Path) -> JsonLines:
    """The JSON objects of ``path``, one a line (invalid UTF-8 replaced: a line that still
    parses is kept). A file that cannot be read at all gives nothing, counted as one skip."""
    try:
        stat = stat_of(path)
        with path.open("r", encoding="utf-8", errors="replace", newline="") as f:
            data = JsonLines.of(_lines(f))
    except OSError:
        return JsonLines(skipped=1)
    data.stat = stat
    return data


def stat_of(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _lines(f: Iterable[str]) -> Iterable[str]:
    # JSON Lines ends a line at "\n" only; a text file iterates on "\n" with newline=""
    yield from f


def head_objects(path: Path, n: int = 5) -> list[dict[str, Any]]:
    """The first ``n`` JSON objects of a file (for telling its format)."""
    out: list[dict[str, Any]] = []
    try:
        with path.open("r", encoding="utf-8", errors="replace", newline="") as f:
            for i, raw in enumerate(f):
                if i >= 50 or len(out) >= n:
                    break
                try:
                    obj = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError:
        pass
    return out


def iso_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 timestamp, or None."""
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def first_text(messages: Sequence[NewMessage], limit: int = 80) -> str:
    """The first words of the first user text (a title when the source has none)."""
    for m in messages:
        if m.role == "user" and m.text.strip():
            line = " ".join(m.text.split())
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def placeholder(obj: Any) -> TextBlock:
    """A block threadloom does not model, kept as text: its JSON, or for a payload too large
    to be worth it (an image, a document) its type and size."""
    kind = obj.get("type") if isinstance(obj, dict) else type(obj).__name__
    data = json.dumps(obj, ensure_ascii=False)
    if len(data) > PLACEHOLDER_JSON:
        return TextBlock(text=f"[{kind} block not imported: {len(data)} characters of JSON]")
    return TextBlock(text=f"[{kind} block] {data}")
