"""Nudges: what the loop says to a model that ended its turn without the result it owes.

Small local models sometimes reply empty, or end a worker's turn with plain text and never call
``submit_result``. A provider that knows its models do this declares ``result_nudges`` (see
``workers._protocol.result_nudges``; the OpenAI-compatible provider: 1, Anthropic and scripted:
0). The loop then answers such a turn with a stored user message — nothing is hidden from a
reader of the transcript — a bounded number of times per run; after that the worker ends
``partial`` as SPEC says. A lead's plain text is its report and is never nudged; a reader's plain
text is its answer, so only an empty reader reply is.
"""

from __future__ import annotations

from store import Kind, TextBlock

from ._protocol import ModelResponse

NUDGE_NO_RESULT = (
    "[threadloom] You ended your turn without calling submit_result, so your task has no result"
    " yet. Call submit_result now with your distilled result (status, summary, findings with"
    " evidence refs). If the task is not finished, continue with a tool call instead."
    " Do not end your turn with plain text."
)
NUDGE_EMPTY = (
    "[threadloom] Your reply was empty: no text and no tool call. Continue with a tool call, or"
    " call submit_result now with your distilled result if the task is finished."
)
NUDGE_EMPTY_READER = (
    "[threadloom] Your reply was empty. Answer the question now, as plain text, citing the"
    " messages (T-…#n) that show it."
)
EMPTY_REPLY_SUMMARY = (
    "(the model returned an empty reply — no text, no tool call — and never called submit_result)"
)


def nudge_text(
    kind: Kind | str,
    *,
    empty: bool,
    sent: int,
    allowed: int,
    has_result: bool,
    can_submit: bool,
) -> str | None:
    """The nudge for a turn that ended without tool calls, or None when none is due: ``sent``
    nudges so far this run of ``allowed``; a worker only while it has no result and has the
    ``submit_result`` tool."""
    if sent >= allowed:
        return None
    if kind == Kind.WORKER:
        if has_result or not can_submit:
            return None
        return NUDGE_EMPTY if empty else NUDGE_NO_RESULT
    if kind == Kind.READER and empty:
        return NUDGE_EMPTY_READER
    return None


def reply_text(response: ModelResponse) -> str:
    """The text a reply really holds ("" for an empty or whitespace-only reply)."""
    return "\n".join(b.text for b in response.content if isinstance(b, TextBlock)).strip()
