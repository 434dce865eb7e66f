"""Forks share their parent's history by reference (SPEC §Threads 4)."""

from __future__ import annotations

import pytest

from store import ForkPointError, InvariantError, Status, Store, ThreadInfo

from .helpers import assistant, calls, conversation, count_rows, results, shape, user


async def _parent(store: Store, turns: int = 2) -> ThreadInfo:
    return await store.create_thread(kind="worker", title="parent", messages=conversation(turns))


async def test_a_forks_messages_up_to_the_fork_point_equal_the_parents(store: Store) -> None:
    parent = await _parent(store, turns=3)  # 8 messages
    fork = await store.fork(parent.id, at=5)
    assert fork.forked_from is not None
    assert (fork.forked_from.thread_id, fork.forked_from.at) == (parent.id, 5)
    assert fork.head_seq == 5
    assert shape(await store.messages(fork.id)) == shape(await store.messages(parent.id, end=5))
    # the inherited rows are the parent's own
    assert {m.thread_id for m in await store.messages(fork.id)} == {parent.id}


async def test_appending_to_a_fork_leaves_the_parent_unchanged(store: Store) -> None:
    parent = await _parent(store)
    before = shape(await store.messages(parent.id))
    fork = await store.fork(parent.id, at=3)
    appended = await store.append(fork.id, [calls("x"), results("x"), assistant("fork only")])
    assert [m.seq for m in appended] == [4, 5, 6]
    assert all(m.thread_id == fork.id for m in appended)
    after = await store.get_thread(parent.id)
    assert (after.head_seq, after.version) == (parent.head_seq, parent.version)
    assert shape(await store.messages(parent.id)) == before
    # and the parent's own later appends do not show in the fork
    await store.append(parent.id, user("parent only"))
    fork_msgs = await store.messages(fork.id)
    assert [m.text for m in fork_msgs][-1] == "fork only"
    assert len(fork_msgs) == 6


async def test_a_fork_of_a_fork_of_a_fork_reads_every_range_correctly(store: Store) -> None:
    p = await store.create_thread(
        kind="lead",
        messages=[user("p1"), assistant("p2"), user("p3"), assistant("p4"), user("p5")],
    )
    f1 = await store.fork(p.id, at=4, messages=[user("f1-5"), assistant("f1-6")])
    f2 = await store.fork(f1.id, at=5, messages=[assistant("f2-6"), user("f2-7")])
    f3 = await store.fork(f2.id, at=6)
    await store.append(f3.id, [user("f3-7"), assistant("f3-8")])
    full = await store.messages(f3.id)
    assert [m.text for m in full] == ["p1", "p2", "p3", "p4", "f1-5", "f2-6", "f3-7", "f3-8"]
    assert [m.thread_id for m in full] == [p.id] * 4 + [f1.id, f2.id, f3.id, f3.id]
    assert [m.seq for m in full] == list(range(1, 9))
    # every range, including those crossing one or more segment boundaries
    for start in range(1, 9):
        for end in range(start, 9):
            got = await store.messages(f3.id, start=start, end=end)
            assert shape(got) == shape(full[start - 1 : end]), (start, end)
        assert shape(await store.messages(f3.id, start=start)) == shape(full[start - 1 :])
    # each ancestor still reads as itself
    assert [m.text for m in await store.messages(f2.id)] == [
        *["p1", "p2", "p3", "p4", "f1-5"],
        *["f2-6", "f2-7"],
    ]
    assert [m.text for m in await store.messages(f1.id)][-2:] == ["f1-5", "f1-6"]
    # through refs as well
    _, msgs = await store.read(f"T-{f3.id}#3-7")
    assert [m.text for m in msgs] == ["p3", "p4", "f1-5", "f2-6", "f3-7"]


async def test_ranges_past_the_head_are_clamped_and_empty_ranges_are_empty(store: Store) -> None:
    parent = await _parent(store, turns=1)  # 4 messages
    fork = await store.fork(parent.id, at=3)
    assert [m.seq for m in await store.messages(fork.id, start=2, end=99)] == [2, 3]
    assert await store.messages(fork.id, start=4) == []
    assert await store.messages(fork.id, start=3, end=2) == []


async def test_forking_between_a_tool_use_and_its_result_is_refused_naming_valid_points(
    store: Store,
) -> None:
    parent = await store.create_thread(
        kind="worker",
        messages=[user("go"), calls("a", text="let me look"), results("a"), assistant("ok")],
    )
    with pytest.raises(ForkPointError) as err:
        await store.fork(parent.id, at=2)
    text = str(err.value)
    assert "#2" in text and "nearest valid points are #1 and #3" in text
    assert await count_rows(store, "threads") == 1


async def test_forking_a_thread_that_is_mid_turn_forks_at_its_last_turn_boundary(
    store: Store,
) -> None:
    parent = await store.create_thread(kind="worker", messages=[user("go"), calls("a")])
    fork = await store.fork(parent.id)
    assert fork.forked_from is not None and fork.forked_from.at == 1


async def test_forking_at_a_trailing_unanswered_tool_use_names_the_point_before(
    store: Store,
) -> None:
    parent = await store.create_thread(kind="worker", messages=[user("go"), calls("a")])
    with pytest.raises(ForkPointError, match=r"not answered yet .*nearest valid point is #1$"):
        await store.fork(parent.id, at=2)


@pytest.mark.parametrize("at", [0, -1, 5])
async def test_forking_outside_the_history_is_refused(store: Store, at: int) -> None:
    parent = await _parent(store, turns=1)
    with pytest.raises(ForkPointError, match=r"1\.\.4"):
        await store.fork(parent.id, at=at)


async def test_forking_an_empty_thread_is_refused(store: Store) -> None:
    empty = await store.create_thread(kind="worker")
    with pytest.raises(ForkPointError):
        await store.fork(empty.id)


async def test_refs_into_inherited_messages_resolve_through_the_fork(store: Store) -> None:
    parent = await _parent(store)
    fork = await store.fork(parent.id, at=5)
    for n in range(1, 6):
        _, via_fork = await store.read(f"T-{fork.id}#{n}")
        _, via_parent = await store.read(f"T-{parent.id}#{n}")
        assert shape(via_fork) == shape(via_parent)
        assert (await store.message(fork.id, n)).content == via_parent[0].content
    resolved = await store.resolve(f"T-{fork.id}#2-")
    assert (resolved.start, resolved.end) == (2, 5)


async def test_a_fork_at_the_end_shares_everything(store: Store) -> None:
    parent = await _parent(store)
    fork = await store.fork(parent.id)
    assert fork.head_seq == parent.head_seq
    assert shape(await store.messages(fork.id)) == shape(await store.messages(parent.id))
    assert fork.own_messages == 0


async def test_a_fork_at_one_keeps_only_the_first_message(store: Store) -> None:
    parent = await _parent(store)
    fork = await store.fork(parent.id, at=1)
    assert [m.text for m in await store.messages(fork.id)] == ["start"]
    await store.append(fork.id, assistant("a different answer"))
    assert [m.seq for m in await store.messages(fork.id)] == [1, 2]


async def test_a_fork_with_messages_appends_them_after_the_fork_point(store: Store) -> None:
    parent = await _parent(store)
    fork = await store.fork(parent.id, at=3, messages=[user("what if instead…")])
    assert fork.head_seq == 4 and fork.own_messages == 1
    msgs = await store.messages(fork.id)
    assert (msgs[-1].seq, msgs[-1].text, msgs[-1].thread_id) == (4, "what if instead…", fork.id)
    assert [h.ref for h in await store.search("instead")] == [f"T-{fork.id}#4"]


async def test_a_fork_whose_messages_break_pairing_is_refused_and_not_created(
    store: Store,
) -> None:
    parent = await _parent(store)
    with pytest.raises(InvariantError):
        await store.fork(parent.id, at=3, messages=[results("nothing-asked")])
    assert await count_rows(store, "threads") == 1


async def test_forking_writes_no_message_rows(store: Store) -> None:
    parent = await _parent(store, turns=20)
    rows = await count_rows(store, "messages")
    fts = await count_rows(store, "messages_fts")
    for at in (1, 3, 21, parent.head_seq):
        await store.fork(parent.id, at=at)
    fork = await store.fork(parent.id)
    await store.fork(fork.id)
    assert await count_rows(store, "messages") == rows
    assert await count_rows(store, "messages_fts") == fts
    assert await count_rows(store, "threads") == 7


async def test_a_fork_copies_metadata_and_lists_under_its_origin(store: Store) -> None:
    lead = await store.create_thread(kind="lead", messages=[user("plan")])
    parent = await store.create_thread(
        kind="worker",
        title="tokenizer",
        parent_id=lead.id,
        system_prompt="you are a worker",
        tools=["read_file", "bash"],
        model="scripted:x",
        task={"id": "tok"},
        status=Status.RUNNING,
        messages=conversation(1),
    )
    fork = await store.fork(parent.id, at=3)
    assert fork.job_id == lead.id
    assert (fork.kind, fork.title, fork.status) == (parent.kind, "fork of tokenizer", Status.IDLE)
    assert (fork.system_prompt, fork.tools, fork.model, fork.task) == (
        parent.system_prompt,
        parent.tools,
        parent.model,
        parent.task,
    )
    assert [t.id for t in await store.forks(parent.id)] == [fork.id]
    assert fork.id in [t.id for t in await store.job_tree(lead.id)]
