"""Glob patterns with ripgrep's semantics, so the pure-Python ``grep`` agrees with ``rg --glob``.

The syntax is the ``globset`` crate's (which ripgrep uses): ``*`` and ``?`` stay within one path
component, ``**`` spans components when it is a whole component (``**/x``, ``x/**``, ``x/**/y``;
elsewhere it is just ``*``), ``[abc]``/``[!a-c]`` classes, ``{a,b}`` alternatives (not nested),
``\\`` escapes the next character. Matching is on the path's bytes, as ripgrep does.

Two flavours are built on it:

- ``PathGlob`` (``list_files``' ``pattern``): the whole path, relative to the listed directory,
  must match (``*.py`` is the top level only; ``**/*.py`` is every depth).
- ``OverrideGlob`` (``grep``'s ``glob``): ripgrep's ``--glob`` — gitignore rules on top: a pattern
  without ``/`` matches a name at any depth, one with ``/`` is anchored at the workspace root,
  a trailing ``/`` matches directories only, a leading ``!`` excludes instead of includes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ._errors import GlobError

_Token = tuple[str, str]  # (kind, regex fragment); kinds: lit, star, any, class, alt, rec*


def _tokens(glob: str, *, in_alt: bool = False) -> list[_Token]:
    """Tokenise like globset's parser; ``**`` rules follow its ``parse_star``."""
    tokens: list[_Token] = []
    i = 0
    n = len(glob)
    while i < n:
        c = glob[i]
        if c == "\\":
            if i + 1 >= n:
                raise GlobError(f"invalid glob {glob!r}: dangling '\\'")
            tokens.append(("lit", _escape(glob[i + 1])))
            i += 2
        elif c == "?":
            tokens.append(("any", "[^/]"))
            i += 1
        elif c == "*":
            i = _star(glob, i, tokens, in_alt=in_alt)
        elif c == "[":
            fragment, i = _char_class(glob, i)
            tokens.append(("class", fragment))
        elif c == "{":
            if in_alt:
                raise GlobError(f"invalid glob {glob!r}: nested alternate groups are not allowed")
            close = glob.find("}", i)
            if close < 0:
                raise GlobError(f"invalid glob {glob!r}: unclosed alternate group; missing '}}'")
            body = glob[i + 1 : close]
            if "{" in body:
                raise GlobError(f"invalid glob {glob!r}: nested alternate groups are not allowed")
            options = [_render(_tokens(part, in_alt=True)) for part in _split_alternatives(body)]
            options = [o for o in options if o]
            tokens.append(("alt", "(?:" + "|".join(options) + ")" if options else ""))
            i = close + 1
        else:
            tokens.append(("lit", _escape(c)))
            i += 1
    return tokens


def _split_alternatives(body: str) -> list[str]:
    parts, start, i = [], 0, 0
    while i < len(body):
        if body[i] == "\\":
            i += 2
            continue
        if body[i] == "[":
            close = body.find("]", i + 2)
            i = close + 1 if close >= 0 else len(body)
            continue
        if body[i] == ",":
            parts.append(body[start:i])
            start = i + 1
        i += 1
    parts.append(body[start:])
    return parts


def _star(glob: str, i: int, tokens: list[_Token], *, in_alt: bool) -> int:
    star = ("star", "[^/]*")
    if i + 1 >= len(glob) or glob[i + 1] != "*":
        tokens.append(star)
        return i + 1
    after = i + 2
    at_end = after >= len(glob)
    before_sep = not at_end and glob[after] == "/"
    if in_alt or not (at_end or before_sep):
        tokens.extend([star, star])
        return after
    if not tokens:
        tokens.append(("rprefix", "(?:/?|.*/)"))
        return after + 1 if before_sep else after
    if glob[i - 1] != "/":
        tokens.extend([star, star])
        return after
    previous = tokens.pop()  # the literal "/" (or a recursive token that absorbs this one)
    if previous[0] in ("rprefix", "rsuffix"):
        tokens.append(previous)
    elif at_end:
        tokens.append(("rsuffix", "/.*"))
    else:
        tokens.append(("rzero", "(?:/|/.*/)"))
    return after + 1 if before_sep else after


def _char_class(glob: str, start: int) -> tuple[str, int]:
    i = start + 1
    negated = i < len(glob) and glob[i] in "!^"
    if negated:
        i += 1
    items: list[str] = []
    first = True
    while True:
        if i >= len(glob):
            raise GlobError(f"invalid glob {glob!r}: unclosed character class; missing ']'")
        c = glob[i]
        if c == "]" and not first:
            i += 1
            break
        if c != "-" and i + 2 < len(glob) and glob[i + 1] == "-" and glob[i + 2] != "]":
            low, high = c, glob[i + 2]
            if low > high:
                raise GlobError(f"invalid glob {glob!r}: invalid range; {low!r} > {high!r}")
            items.append(f"{_class_char(glob, low)}-{_class_char(glob, high)}")
            i += 3
        else:
            items.append(_class_char(glob, c))
            i += 1
        first = False
    return "[" + ("^" if negated else "") + "".join(items) + "]", i


def _class_char(glob: str, c: str) -> str:
    if not c.isascii():
        raise GlobError(f"invalid glob {glob!r}: non-ASCII characters in [...] are not supported")
    return re.escape(c)


def _escape(c: str) -> str:
    # Matching is on bytes: a non-ASCII literal is its UTF-8 bytes, each escaped.
    return "".join(re.escape(chr(b)) for b in c.encode("utf-8", "surrogateescape"))


def _render(tokens: list[_Token]) -> str:
    if len(tokens) == 1 and tokens[0][0] == "rprefix":
        return ".*"
    return "".join(fragment for _, fragment in tokens)


def _compile(glob: str) -> re.Pattern[bytes]:
    source = "^" + _render(_tokens(glob)) + "$"
    return re.compile(source.encode("latin-1"), re.DOTALL)


@dataclass(frozen=True)
class PathGlob:
    """``list_files``' pattern: the whole relative path must match."""

    pattern: str
    regex: re.Pattern[bytes]

    @classmethod
    def parse(cls, pattern: str) -> PathGlob:
        if not pattern:
            raise GlobError("the pattern is empty")
        return cls(pattern, _compile(pattern))

    def matches(self, relpath: bytes) -> bool:
        return self.regex.match(relpath) is not None


Decision = Literal["include", "exclude", "none"]


@dataclass(frozen=True)
class OverrideGlob:
    """One ``rg --glob`` pattern, with gitignore's anchoring and ``!`` rules.

    ``decide(relpath, is_dir)`` says what ripgrep's override matcher would: ``include`` (matched a
    positive glob), ``exclude`` (matched a ``!`` glob, or a file that misses the positive glob),
    ``none`` (no opinion: a directory that misses a positive glob is still entered).
    """

    original: str
    negated: bool
    dir_only: bool
    regex: re.Pattern[bytes]

    @classmethod
    def parse(cls, glob: str) -> OverrideGlob:
        """Parse a glob as ripgrep would, except that it is an error (not silently ignored) when
        empty or starting with ``#`` (gitignore would read a comment)."""
        line = glob
        negated = False
        anchored = False
        if line.startswith(("\\!", "\\#")):
            line = line[1:]
            anchored = line.startswith("/")
        else:
            if line.startswith("#"):
                raise GlobError(f"invalid glob {glob!r}: a glob may not start with '#'")
            if line.startswith("!"):
                negated = True
                line = line[1:]
            if line.startswith("/"):
                line = line[1:]
                anchored = True
        dir_only = line.endswith("/")
        if dir_only:
            line = line[:-1]
            if line.endswith("\\"):
                line = line[:-1]
        if not line:
            raise GlobError(f"invalid glob {glob!r}: it matches nothing")
        if not anchored and "/" not in line and not line.startswith("**/"):
            line = "**/" + line
        if line.endswith("/**"):
            line += "/*"
        return cls(glob, negated, dir_only, _compile(line))

    def decide(self, relpath: bytes, is_dir: bool) -> Decision:
        if (not self.dir_only or is_dir) and self.regex.match(relpath):
            return "exclude" if self.negated else "include"
        if not self.negated and not is_dir:
            return "exclude"
        return "none"
