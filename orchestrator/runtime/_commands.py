"""Shell command lines as the result check compares them (``check``): split into sub-commands,
normalised, and each sub-command's pass or fail read from its call's exit status.

Normalising (both the command a worker claims and the ones its ``bash`` calls ran): shell
tokens (quoting undone), whitespace collapsed, redirections dropped (``2>&1``, ``> out.txt``),
a program named by its path named by its name (``.venv/bin/pytest`` is ``pytest``), and
``python -m MODULE`` / ``python3 -m MODULE`` read as ``MODULE`` (the same tests run either way).
A ``cd DIR`` sub-command is dropped: ``cd pkg && pytest -q`` claims the run of ``pytest -q``.

Nothing here runs a shell: lines are only tokenised (``shlex``), and a line that does not
tokenise (an unclosed quote) falls back to splitting on whitespace.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["pass", "fail", "unknown"]

_OPERATORS = frozenset({"&&", "||", ";", "|", "|&", "&", "\n"})
_REDIRECTS = frozenset({">", ">>", "<", ">&", "<&", "&>", "&>>", ">|", "<<", "<<<", "<>"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
MAX_COMMAND_CHARS = 10_000
"""A command line longer than this is not compared (a hostile claim costs nothing)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One sub-command of a line: its normal form, and the operators before and after it
    (``""`` at the line's ends)."""

    text: str
    before: str
    after: str


def segments(line: str) -> list[Segment]:
    """The line's sub-commands in order, ``cd`` ones left out (their operators kept around the
    neighbours), each normalised. ``[]`` for an empty or overlong line."""
    if not line or len(line) > MAX_COMMAND_CHARS:
        return []
    parts: list[list[str]] = [[]]
    ops: list[str] = []
    for token in _tokens(line):
        if token in _OPERATORS:
            ops.append(token)
            parts.append([])
        else:
            parts[-1].append(token)
    out: list[Segment] = []
    pending = ""
    for i, words in enumerate(parts):
        after = ops[i] if i < len(ops) else ""
        text = _normal(words)
        if not text or text.split(" ", 1)[0] == "cd":
            pending = pending or (ops[i - 1] if i > 0 else "")
            continue
        before = ops[i - 1] if i > 0 else ""
        out.append(Segment(text, pending if pending and not out else before, after))
        pending = ""
    return out


def normal(line: str) -> str:
    """The normal form of a whole line (its sub-commands joined by their operators)."""
    segs = segments(line)
    return " ".join(s.text + (f" {s.after}" if s.after and i < len(segs) - 1 else "")
                    for i, s in enumerate(segs))  # fmt: skip


def _tokens(line: str) -> list[str]:
    tokens: list[str] = []
    for n, physical in enumerate(line.replace("\\\n", " ").split("\n")):
        if n:
            tokens.append("\n")
        lexer = shlex.shlex(physical, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            tokens += list(lexer)
        except ValueError:  # an unclosed quote: words as they stand
            tokens += physical.split()
    return [t for t in tokens if t != ""]


def _normal(words: list[str]) -> str:
    kept: list[str] = []
    skip_target = False
    for w in words:
        if skip_target:
            skip_target = False
        elif w in _REDIRECTS:
            if kept and kept[-1].isdigit():
                kept.pop()  # the descriptor of ``2>&1``
            skip_target = True
        else:
            kept.append(w)
    while kept and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", kept[0]):  # VAR=value cmd
        kept.pop(0)
    if not kept:
        return ""
    kept[0] = kept[0].rsplit("/", 1)[-1] or kept[0]
    if _PYTHON.match(kept[0]) and len(kept) >= 3 and kept[1] == "-m":
        kept = kept[2:]
    elif _PYTHON.match(kept[0]):
        kept[0] = "python"
    return " ".join(kept)


def block_status(
    run: list[Segment], start: int, end: int, exit_code: int | None
) -> Literal["passed", "failed", "unknown"]:
    """Whether sub-commands ``run[start:end]`` (a claimed command) passed, from the exit
    status of the whole line (None: it did not exit on its own): passed when it exited 0 and
    everything from the block to the end ran under ``&&``; failed when it did not exit 0 and
    the block ends the line, so the line's status is the block's own (a pipeline's is its last
    command's; a block after ``&&`` that never ran did not pass either); unknown otherwise (a
    ``;``, ``||``, ``|`` or ``&`` after the block leaves its own status unsaid)."""
    tail = run[start:]
    chained = all(s.after in ("&&", "") for s in tail[:-1])
    inner = all(s.after in ("&&", "|") for s in run[start : end - 1])
    ends = end == len(run)
    if exit_code == 0:
        return "passed" if chained and inner and run[start].before != "||" else "unknown"
    if ends and inner:
        return "failed"
    return "unknown"


_FAIL = re.compile(
    r"\b(fail(s|ed|ing|ure|ures)?|errors?|errored|broken|crash(es|ed)?|traceback|red|"
    r"non-?zero|exit(ed)?( code| status)?:? ?[1-9]\d*|did ?n[o']t pass|does ?n[o']t pass|"
    r"not pass(ing)?)\b",
    re.IGNORECASE,
)
_PASS = re.compile(
    r"\b(pass(es|ed|ing)?|ok|success(ful(ly)?)?|succeed(s|ed)?|green|clean|works|working|"
    r"exit(ed)?( code| status)?:? ?0|all (tests|checks)|no (issues|problems|findings)|fixed)\b",
    re.IGNORECASE,
)
_NOT_FAIL = re.compile(
    r"\b(0|no|zero|none|without)\s+(tests?\s+)?(fail(s|ed|ing|ures?)?|errors?|regressions?)\b"
    r"|\bno longer fail(s|ing)?\b|\b(errors?|failures?): 0\b",
    re.IGNORECASE,
)
_COUNTED_FAIL = re.compile(r"\b[1-9]\d*\s+(tests?\s+)?(failed|failures?|errors?)\b", re.IGNORECASE)


def claimed_outcome(outcome: str) -> Outcome:
    """What an outcome says of its command: ``pass``, ``fail`` or ``unknown`` (it says
    neither, or both without a failure count: "3 passed, 1 failed" is a fail)."""
    text = _NOT_FAIL.sub(" passed ", outcome[:2000])
    fail = bool(_FAIL.search(text))
    ok = bool(_PASS.search(text))
    if fail and ok:
        return "fail" if _COUNTED_FAIL.search(text) else "unknown"
    if fail:
        return "fail"
    return "pass" if ok else "unknown"
