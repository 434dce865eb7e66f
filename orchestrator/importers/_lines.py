"""Reading another tool's files defensively, below one directory only.

Every file an import reads goes through a ``Confine``: the directory named (for one file, the
directory its session lives in). A path whose real path (every symlink resolved) is outside it
is refused, as is anything but a regular file (a FIFO, a device, a socket: opened with
``O_NONBLOCK|O_NOFOLLOW``, checked with ``fstat`` on the opened descriptor); each refusal is one
warning line naming the path (``Confine.refused``) and the import goes on without it. Reads are
bounded: ``MAX_FILE`` bytes a session file, ``MAX_LINE`` a line (a longer line is skipped and
counted), ``MAX_OUTPUT`` a saved tool output, ``MAX_META`` a metadata file.

A line that is not a JSON object is skipped and counted, never fatal (a session being written
ends with a half line; old versions wrote things nobody documents)."""

from __future__ import annotations

import errno
import json
import os
import stat as st
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from store import NewMessage, TextBlock

MAX_FILE = 512 << 20
"""Bytes of one session file at most: a larger one is skipped whole, with a warning (memory
during an import goes with the largest session file read, never with the number of files)."""
MAX_LINE = 64 << 20
"""Bytes of one line at most: a longer line is skipped (counted, with a warning)."""
MAX_OUTPUT = 64 << 20
"""Bytes of one saved tool output (``<session>/tool-results/``) at most."""
MAX_META = 1 << 20
"""Bytes of one metadata file (``agent-<id>.meta.json``) at most."""

_KINDS = {
    st.S_IFIFO: "a FIFO",
    st.S_IFCHR: "a character device",
    st.S_IFBLK: "a block device",
    st.S_IFSOCK: "a socket",
    st.S_IFDIR: "a directory",
}


_Opened = tuple[BinaryIO, os.stat_result]


class Confine:
    """What one import may read: regular files whose real path is below ``root`` (None: no
    directory at all, as for stdin: nothing on disk is read). ``refused`` collects one line a
    path refused, ``PATH: why``, each once."""

    def __init__(self, root: Path | None, refused: list[str] | None = None) -> None:
        self.root = None if root is None else os.path.realpath(root)
        self.refused: list[str] = [] if refused is None else refused
        self._said = set(self.refused)

    def within(self, root: Path) -> Confine:
        """The same import confined to ``root`` instead (its refusals in the same list)."""
        return Confine(root, self.refused)

    def refuse(self, path: Path | str, why: str) -> None:
        line = f"{path}: {why}"
        if line not in self._said and line not in self.refused:
            self._said.add(line)
            self.refused.append(line)

    def real(self, path: Path | str) -> str | None:
        """``path``'s real path when it exists below the root; None when it does not exist or
        is refused (outside the root, a symlink loop)."""
        if self.root is None:
            return None
        try:
            real = os.path.realpath(path, strict=True)
        except OSError as err:
            if err.errno == errno.ELOOP:
                self.refuse(path, "a symlink loop: not read")
            return None
        if not self._below(real):
            self.refuse(path, f"resolves to {real}, outside {self.root}: not read")
            return None
        return real

    def _below(self, real: str) -> bool:
        assert self.root is not None
        return real == self.root or real.startswith(self.root.rstrip("/") + "/")

    def regular(self, path: Path | str) -> str | None:
        """``real(path)``, when that is a regular file (anything else is refused)."""
        real = self.real(path)
        if real is None:
            return None
        try:
            mode = os.stat(real).st_mode
        except OSError:
            return None
        if not st.S_ISREG(mode):
            self.refuse(path, f"{_KINDS.get(st.S_IFMT(mode), 'not a regular file')}: not read")
            return None
        return real

    def is_dir(self, path: Path | str) -> bool:
        real = self.real(path)
        return real is not None and os.path.isdir(real)

    @contextmanager
    def open(self, path: Path | str, limit: int) -> Iterator[_Opened | None]:
        """The open file and its ``fstat``, or None (refused, missing, unreadable, over
        ``limit`` bytes). Opened without following a last symlink and without blocking (a
        FIFO swapped in after the check neither hangs nor is read)."""
        real = self.real(path)
        if real is None:
            yield None
            return
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            if err.errno == errno.ELOOP:
                self.refuse(path, "became a symlink while being read: not read")
            yield None
            return
        f = os.fdopen(fd, "rb")
        with f:
            info = os.fstat(fd)
            if not st.S_ISREG(info.st_mode):
                kind = _KINDS.get(st.S_IFMT(info.st_mode), "not a regular file")
                self.refuse(path, f"{kind}: not read")
                yield None
                return
            try:  # a folder on the way swapped for a symlink after the check: what was opened
                opened = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # no /proc: the check before opening stands
                opened = real
            if not self._below(opened):
                self.refuse(path, f"opened {opened}, outside {self.root}: not read")
                yield None
                return
            if info.st_size > limit:
                self.refuse(path, f"{info.st_size} bytes, over the {limit} read at most: skipped")
                yield None
                return
            os.set_blocking(fd, True)
            yield f, info

    def read_bytes(self, path: Path | str, limit: int) -> bytes | None:
        with self.open(path, limit) as got:
            if got is None:
                return None
            data = got[0].read(limit + 1)
        if len(data) > limit:  # grew while being read
            self.refuse(path, f"over the {limit} bytes read at most: skipped")
            return None
        return data

    def files(self, folder: Path, suffix: str) -> list[Path]:
        """The regular files named ``*suffix`` directly in ``folder`` (by the name they have
        there), sorted; nothing when ``folder`` is not a directory below the root."""
        if not self.is_dir(folder):
            return []
        try:
            names = sorted(e.name for e in os.scandir(folder) if e.name.endswith(suffix))
        except OSError:
            return []
        return [folder / n for n in names if self.regular(folder / n) is not None]

    def walk(self, top: Path, suffix: str) -> list[Path]:
        """Every regular file named ``*suffix`` below ``top`` (named by the path it has below
        ``top``), sorted, each real file once: a directory reached twice (a symlink or bind
        mount loop) is walked once, a symlink out of the root is refused."""
        out: dict[str, Path] = {}
        seen: set[tuple[int, int]] = set()
        stack = [top]
        while stack:
            folder = stack.pop()
            real = self.real(folder)
            if real is None:
                continue
            try:
                info = os.stat(real)
                if not st.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                entries = sorted(os.scandir(real), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                path = folder / e.name
                link = e.is_symlink()
                if link:  # resolved (and refused when out or a loop) if it can matter
                    is_dir = os.path.isdir(path)
                    if not (is_dir or e.name.endswith(suffix)) or self.real(path) is None:
                        continue
                else:
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                if is_dir:
                    stack.append(path)
                    continue
                if not e.name.endswith(suffix):
                    continue
                file = self.regular(path)
                if file is not None and (file not in out or not link):
                    out[file] = path
        return sorted(out.values())


_CONFINE: ContextVar[Confine | None] = ContextVar("threadloom_import_confine", default=None)


def confine() -> Confine:
    """The ``Confine`` of the import under way (``confined``); outside one, nothing is read."""
    return _CONFINE.get() or Confine(None)


@contextmanager
def confined(c: Confine) -> Iterator[Confine]:
    """Reads below ``c.root`` only, for the parsing done inside."""
    token = _CONFINE.set(c)
    try:
        yield c
    finally:
        _CONFINE.reset(token)


def read_text(path: Path, limit: int) -> str | None:
    """A whole file as text (invalid UTF-8 replaced), or None (missing, refused, too big)."""
    data = confine().read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def read_json(path: Path, limit: int = MAX_META) -> Any:
    """A small JSON file's value, or None (missing, refused, too big, not JSON)."""
    text = read_text(path, limit)
    try:
        return None if text is None else json.loads(text)
    except (ValueError, RecursionError):
        return None


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


def read_lines(path: Path, *, within: Confine | None = None) -> JsonLines:
    """The JSON objects of ``path``, one a line (invalid UTF-8 replaced: a line that still
    parses is kept), read through ``within`` (default: the import's ``confine()``). A file
    that cannot be read at all gives nothing, counted as one skip."""
    c = confine() if within is None else within
    with c.open(path, MAX_FILE) as got:
        if got is None:
            return JsonLines(skipped=1)
        f, info = got
        long: list[int] = []
        try:
            data = JsonLines.of(_decoded(_bounded_lines(f, MAX_FILE, long)))
        except OSError:
            return JsonLines(skipped=1)
    for n in long:
        c.refuse(path, f"line {n} is over {MAX_LINE} bytes: skipped")
    data.skipped += len(long)
    data.stat = [info.st_size, info.st_mtime_ns]
    return data


def stat_of(path: Path) -> list[int] | None:
    try:
        st_ = path.stat()
    except OSError:
        return None
    return [st_.st_size, st_.st_mtime_ns]


def _bounded_lines(f: BinaryIO, limit: int, long: list[int]) -> Iterator[bytes]:
    """The lines of ``f`` (JSON Lines ends a line at ``\\n`` only), at most ``limit`` bytes read
    in all; a line over ``MAX_LINE`` is left out, its number added to ``long``."""
    parts: list[bytes] = []
    size = 0
    skipping = False
    n = 0
    left = limit
    while left > 0:
        chunk = f.read(min(1 << 20, left))
        if not chunk:
            break
        left -= len(chunk)
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            n += 1
            if skipping:
                skipping = False
            elif size + nl - start > MAX_LINE:
                long.append(n)
            else:
                parts.append(chunk[start:nl])
                yield b"".join(parts)
            parts, size, start = [], 0, nl + 1
        if not skipping:
            parts.append(chunk[start:])
            size += len(chunk) - start
            if size > MAX_LINE:
                long.append(n + 1)
                parts, size, skipping = [], 0, True
    if parts and not skipping:
        yield b"".join(parts)


def raw_lines(path: Path) -> Iterator[bytes]:
    """The lines of ``path`` as bytes, read through the import's ``confine()`` with its bounds
    (a line over ``MAX_LINE`` left out)."""
    with confine().open(path, MAX_FILE) as got:
        if got is not None:
            try:
                yield from _bounded_lines(got[0], MAX_FILE, [])
            except OSError:
                return


def _decoded(lines: Iterable[bytes]) -> Iterator[str]:
    for line in lines:
        yield line.decode("utf-8", "replace")


def head_objects(path: Path, n: int = 5, *, within: Confine | None = None) -> list[dict[str, Any]]:
    """The first ``n`` JSON objects among a file's first 50 lines (for telling its format)."""
    out: list[dict[str, Any]] = []
    c = confine() if within is None else within
    with c.open(path, MAX_FILE) as got:
        if got is None:
            return out
        try:
            for i, raw in enumerate(_bounded_lines(got[0], MAX_FILE, [])):
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
