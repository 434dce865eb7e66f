"""The lead's report, checked where it cites a thread (SPEC "Checked results", the lead's own
claims): a citation that does not resolve is marked ``[not found]`` (as a reader's answer is,
``lead_tools.check_citations``), and a citation of a command's run used for the opposite claim
— "the tests pass (T-…#9)" where message 9 is a run that exited 1, or a failure claimed from a
run that exited 0 — is marked ``[does not support this: the cited run exited N]`` right after
it. The claim is the sentence around the citation (``_commands.claimed_outcome``); a citation
of anything but one command's run, or in a sentence that claims neither, is left as it is.
The report is marked where it is shown (``run``, ``resume``, MCP); the stored message is never
changed.
"""

from __future__ import annotations

import re

from store import Store, StoreError, ThreadRef, ToolResultBlock, ToolUseBlock

from ._commands import claimed_outcome
from .lead_tools import _CITATION, NOT_FOUND_MARK, check_citations

_BOUNDARY = re.compile(r"[.!?;\n](?=\s|$)|\n")
MAX_CITATIONS = 200


async def check_report(store: Store, text: str) -> str:
    """``text`` with its citations checked and marked (see the module docstring)."""
    marked, kept, _ = await check_citations(store, text)
    if not kept:
        return marked
    shows: dict[str, int | None] = {}
    for cite in kept[:MAX_CITATIONS]:
        shows[cite] = await _exit_of(store, cite)
    out: list[str] = []
    last = 0
    for m in _CITATION.finditer(marked):
        cite = m.group(0)
        code = shows.get(cite)
        if code is None or marked.startswith(NOT_FOUND_MARK, m.end()):
            continue
        said = claimed_outcome(_CITATION.sub(" ", _sentence(marked, m.start(), m.end())))
        if said == "unknown" or (said == "pass") == (code == 0):
            continue
        out.append(marked[last : m.end()])
        out.append(f" [does not support this: the cited run exited {code}]")
        last = m.end()
    out.append(marked[last:])
    return "".join(out)


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence (or clause, or line) holding ``text[start:end]``."""
    before = [b.end() for b in _BOUNDARY.finditer(text, 0, start)]
    after = _BOUNDARY.search(text, end)
    return text[before[-1] if before else 0 : after.start() if after else len(text)]


async def _exit_of(store: Store, cite: str) -> int | None:
    """The exit status of the one ``bash`` run the cited message shows (its result, or the
    call whose result follows it), or None when it shows no single run."""
    try:
        ref = ThreadRef.parse(cite)
        if ref.start is None or (ref.end is not None and ref.end != ref.start) or ref.open_end:
            return None
        resolved = await store.resolve(cite)
        msg = await store.message(resolved.thread.id, ref.start)
        if msg.role == "assistant":
            uses = [b for b in msg.content if isinstance(b, ToolUseBlock) and b.name == "bash"]
            if len(uses) != 1:
                return None
            answer = await store.message(resolved.thread.id, ref.start + 1)
            results = [
                b
                for b in answer.content
                if isinstance(b, ToolResultBlock) and b.tool_use_id == uses[0].id
            ]
        else:
            results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
    except (StoreError, ValueError):
        return None
    codes = {b.effects.exit_code for b in results if b.effects is not None}
    return codes.pop() if len(codes) == 1 and len(results) == 1 else None
