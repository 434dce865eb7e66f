"""Each model request carries the history as it stood when it was made, without a copy of it:
``workers._request.Prefix``, the first n views of a running thread's request builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import Kind, NewMessage, Status, Store, format_ref
from workers import ModelRequest, ModelResponse
from workers._request import Prefix, RequestBuilder
from workers.providers import FunctionModel, text_response, tool_response

from .test_loop_nudges import TOOLS, new_thread, run


def views(n: int) -> list[NewMessage]:
    return [NewMessage.user(f"m{i}") for i in range(n)]


def test_a_prefix_reads_like_the_list_of_its_first_n_items() -> None:
    items = views(5)
    p = Prefix(items, 3)
    first = items[:3]
    assert len(p) == 3 and list(p) == first and p == first and first == p
    assert p[0] is items[0] and p[-1] is items[2] and p[-3] is items[0]
    assert p[1:] == items[1:3] and p[::-1] == first[::-1] and p[5:] == []
    assert items[3] not in p and items[2] in p and p.index(items[1]) == 1
    for bad in (3, -4, 10):
        with pytest.raises(IndexError):
            p[bad]
    assert p != items and p != items[:2] and p != "abc"
    with pytest.raises(TypeError):
        hash(p)


def test_a_request_kept_does_not_grow_with_the_thread() -> None:
    builder = RequestBuilder(system="s", tools=[], thread_ref="T-x", max_tokens=10)
    builder.extend([])
    first = builder.request()
    assert list(first.messages) == []
    builder._views.extend(views(2))  # what ``extend`` does with stored messages
    second = builder.request()
    builder._views.extend(views(3))
    assert len(first.messages) == 0 and len(second.messages) == 2
    assert len(builder.request().messages) == 5
    builder.reset([])  # a new list: the requests made before keep theirs
    assert len(second.messages) == 2 and len(builder.request().messages) == 0


async def test_every_request_of_a_run_is_the_history_as_it_stood(
    store: Store, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a\n")

    def reply(request: ModelRequest) -> ModelResponse:
        if len(request.messages) < 7:
            return tool_response(("list_files", {}))
        return text_response("done")

    model = FunctionModel(reply)
    tid = await new_thread(store, Kind.LEAD, tools=TOOLS)
    outcome = await run(store, tid, model, workspace)
    assert outcome.status == Status.DONE
    stored = await store.messages(tid)
    assert [len(r.messages) for r in model.requests] == [1, 3, 5, 7]
    for request in model.requests:
        n = len(request.messages)
        assert isinstance(request.messages, Prefix)
        assert [m.role for m in request.messages] == [m.role for m in stored[:n]]
        assert request.messages[-1].role == "user"
    # the last request's tool results are the model's views of the stored ones (labelled with
    # the ref of the message that stores them), the same objects the earlier requests carry
    last = model.requests[-1].messages
    assert last[2].content[0].text.startswith(f"[{format_ref(tid)}#3]\n")
    assert model.requests[1].messages[2] is last[2]
