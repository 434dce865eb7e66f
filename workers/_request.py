"""Building the model request from the stored transcript.

The request is a pure function of what is stored (system prompt, tool specs in the thread's
order, the visible history) so a resumed or forked thread sends a byte-identical prefix and the
provider's prompt cache keeps hitting. Tool outputs are stored whole; the model sees each one
capped, head and tail kept, with a marker naming the omitted size and the ref of the whole output.
An output stored apart (``ToolResultBlock.stored``: too large to keep inline) is seen exactly as
it would be inline: its preview holds enough of its head and tail for the cap, and the marker
gives the whole output's size. The request never carries ``stored`` (each tool result is rebuilt
as a plain block).

A running thread builds its requests incrementally (``RequestBuilder``): the stored prefix never
changes (nothing is ever summarized in place), so each stored message is turned into its view
once, when it is read or appended, and a turn's request costs the same at message 20 and at
message 20,000. ``build_request`` is the same builder used once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from itertools import islice
from typing import overload

from store import ContentBlock, Message, NewMessage, ToolResultBlock, format_ref

from ._foreign import ForeignHistory
from ._protocol import ModelRequest, ToolSpec

DEFAULT_OUTPUT_CAP = 30_000


def cap_text(text: str, cap: int, ref: str) -> str:
    """``text`` if it fits in ``cap`` characters, else its head and tail around a marker."""
    if len(text) <= cap:
        return text
    return _capped(text, text, len(text), cap, ref)


def _capped(head_text: str, tail_text: str, total: int, cap: int, ref: str) -> str:
    """The capped view of an output of ``total`` characters that starts with ``head_text`` and
    ends with ``tail_text`` (the same string for an inline output)."""
    head = min((cap * 2) // 3, len(head_text))
    tail = min(cap - (cap * 2) // 3, len(tail_text))
    omitted = total - head - tail
    marker = (
        f"\n\n[… {omitted:,} characters omitted ({total:,} in all); the whole output is"
        f" stored at {ref} — read it with read_thread or `threadloom show {ref} --raw` …]\n\n"
    )
    return head_text[:head] + marker + (tail_text[len(tail_text) - tail :] if tail else "")


def capped_view(block: ToolResultBlock, cap: int, ref: str) -> str:
    """What the model sees of one tool output: whole when it fits ``cap``, else head and tail
    around a marker giving the whole output's size (also for an output stored apart)."""
    stored = block.stored
    if stored is None:
        return cap_text(block.text, cap, ref)
    preview = block.text
    head_text = preview[: stored.head]
    tail_text = preview[len(preview) - stored.tail :] if stored.tail else ""
    return _capped(head_text, tail_text, stored.chars, cap, ref)


def model_view(msg: Message, cap: int) -> NewMessage:
    """What the model sees of one stored message. Each tool output is labelled with the ref of
    the message that stores it (so a worker can cite it as evidence), and outputs over ``cap``
    are shortened. Both depend only on what is stored, so the view is the same on every call.
    Built from validated parts, so nothing is validated again (``trusted``)."""
    content = msg.content
    if msg.role != "user" or ToolResultBlock not in map(type, content):
        return NewMessage.trusted({"role": msg.role, "content": content})
    ref = format_ref(msg.thread_id, msg.seq)
    blocks: list[ContentBlock] = []
    for b in content:
        if isinstance(b, ToolResultBlock):
            values = {
                "type": "tool_result",
                "tool_use_id": b.tool_use_id,
                "content": f"[{ref}]\n{capped_view(b, cap, ref)}",
                "is_error": b.is_error,
            }
            b = ToolResultBlock.trusted(values)
        blocks.append(b)
    return NewMessage.trusted({"role": msg.role, "content": blocks})


class Prefix(Sequence[NewMessage]):
    """The first ``n`` views of a builder's list, frozen at that length: what one request
    carries. The list only ever grows at its end (``RequestBuilder.reset`` starts a new one),
    so the first ``n`` never change; copying them for every request made a turn at message
    20,000 cost more than one at message 20 (``tests/benchmarks/bench_peer.py``)."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[NewMessage], n: int) -> None:
        self._items = items
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> NewMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[NewMessage]: ...
    def __getitem__(self, index: int | slice) -> NewMessage | list[NewMessage]:
        if isinstance(index, slice):
            items = self._items
            return [items[i] for i in range(*index.indices(self._n))]
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError("request message index out of range")
        return self._items[i]

    def __iter__(self) -> Iterator[NewMessage]:
        return islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=False))

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return f"Prefix({list(self)!r})"


class RequestBuilder:
    """The requests of one running thread: the view of each stored message is made once
    (``extend`` with what was read or appended, in order) and every request reuses them."""

    def __init__(
        self,
        *,
        system: str,
        tools: Sequence[ToolSpec],
        thread_ref: str,
        max_tokens: int,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        resolve_task_ref: Callable[[str], Awaitable[str | None]] | None = None,
        foreign: bool = False,
        tool_required: bool = False,
    ) -> None:
        """``foreign``: the thread's history was written by another agent (an imported
        thread): its calls of tools the thread does not have are seen as ``_foreign`` shows
        them — under the name of the tool that means the same, else as text."""
        self.system = system
        self.tool_required = tool_required
        self.tools = list(tools)
        self.thread_ref = thread_ref
        self.max_tokens = max_tokens
        self.output_cap = output_cap
        self.resolve_task_ref = resolve_task_ref
        self.foreign = foreign
        self._foreign = self._new_foreign()
        self._views: list[NewMessage] = []

    def _new_foreign(self) -> ForeignHistory | None:
        if not self.foreign:
            return None
        cap = self.output_cap
        return ForeignHistory(
            [t.name for t in self.tools], shorten=lambda text, ref: cap_text(text, cap, ref)
        )

    def reset(self, history: Sequence[Message]) -> None:
        """Start again from ``history`` (the thread's whole visible history, as read)."""
        self._views = []
        self._foreign = self._new_foreign()
        self.extend(history)

    def extend(self, stored: Sequence[Message]) -> None:
        """Messages just stored after the ones already seen."""
        cap = self.output_cap
        foreign = self._foreign
        if foreign is None:
            self._views.extend(model_view(m, cap) for m in stored)
            return
        for m in stored:
            self._views.append(foreign.view(model_view(m, cap), format_ref(m.thread_id, m.seq)))

    def request(self) -> ModelRequest:
        """The request for the history seen so far (its views as a ``Prefix`` of the builder's:
        a request kept by a caller does not grow with the thread, and costs nothing to make)."""
        return ModelRequest(
            system=self.system,
            tools=list(self.tools),
            messages=Prefix(self._views, len(self._views)),
            max_tokens=self.max_tokens,
            thread_ref=self.thread_ref,
            resolve_task_ref=self.resolve_task_ref,
            tool_required=self.tool_required,
        )


def build_request(
    *,
    system: str,
    tools: Sequence[ToolSpec],
    history: Sequence[Message],
    thread_ref: str,
    max_tokens: int,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    resolve_task_ref: Callable[[str], Awaitable[str | None]] | None = None,
    foreign: bool = False,
) -> ModelRequest:
    builder = RequestBuilder(
        system=system,
        tools=tools,
        thread_ref=thread_ref,
        max_tokens=max_tokens,
        output_cap=output_cap,
        resolve_task_ref=resolve_task_ref,
        foreign=foreign,
    )
    builder.extend(history)
    return builder.request()
