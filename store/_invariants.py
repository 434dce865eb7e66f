"""The pairing invariant of SPEC §Threads, as a pure function over the thread's state.

The state is just the tool_use ids of the newest message still waiting for results (and whether
the thread is empty): every append is validated against it without reading earlier messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import InvariantError

if TYPE_CHECKING:  # blocks are told by their ``type``: this module sits low in the store
    from .models import NewMessage


def check_append(
    pending: Sequence[str], head_seq: int, messages: Sequence[NewMessage]
) -> tuple[str, ...]:
    """Validate ``messages`` appended after a head with ``pending`` unanswered tool_use ids.

    Returns the pending ids after the last message. Raises ``InvariantError`` naming the message
    number and what is wrong. Rules: the first message of a thread is the user's; a user message
    carries no tool_use or thinking blocks, an assistant message no tool_result blocks; after an
    assistant message with tool_use blocks comes a user message whose leading tool_result blocks
    answer every id exactly once; a tool_result never answers anything else.
    """
    state = tuple(pending)
    seq = head_seq
    for msg in messages:
        seq += 1
        where = f"message {seq} ({msg.role})"
        if not msg.content:
            raise InvariantError(f"{where}: content is empty")
        if seq == 1 and msg.role != "user":
            raise InvariantError(f"{where}: a thread starts with a user message")
        if msg.role == "user":
            bad = [b.type for b in msg.content if b.type in ("tool_use", "thinking")]
            if bad:
                raise InvariantError(f"{where}: a user message cannot hold {bad[0]} blocks")
            results: list[Any] = [b for b in msg.content if b.type == "tool_result"]
            n = len(results)
            if n and not all(b.type == "tool_result" for b in msg.content[:n]):
                raise InvariantError(f"{where}: tool_result blocks must come first in the message")
            got = Counter(r.tool_use_id for r in results)
            dupes = sorted(i for i, c in got.items() if c > 1)
            if dupes:
                raise InvariantError(f"{where}: tool_use {dupes[0]} is answered more than once")
            missing = [i for i in state if i not in got]
            extra = sorted(i for i in got if i not in state)
            if extra:
                raise InvariantError(
                    f"{where}: tool_result for {extra[0]} answers no tool_use of the previous"
                    " message"
                )
            if missing:
                raise InvariantError(
                    f"{where}: tool_use {', '.join(missing)} of message {seq - 1} left"
                    " unanswered; every tool_use needs its tool_result in the next message"
                )
            state = ()
        else:
            if state:
                raise InvariantError(
                    f"{where}: message {seq - 1} has unanswered tool_use"
                    f" {', '.join(state)}; only their tool_results may come next"
                )
            if any(b.type == "tool_result" for b in msg.content):
                raise InvariantError(
                    f"{where}: an assistant message cannot hold tool_result blocks"
                )
            ids = [b.id for b in msg.content if b.type == "tool_use"]
            if len(set(ids)) != len(ids):
                raise InvariantError(f"{where}: duplicate tool_use ids")
            state = tuple(ids)
    return state
