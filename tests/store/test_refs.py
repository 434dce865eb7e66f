"""Resolving refs: full ids, unique prefixes, ambiguity, anchors (SPEC §Words)."""

from __future__ import annotations

import pytest

from store import AmbiguousRef, RefSyntaxError, Store, ThreadNotFound, ThreadRef, new_id

from .helpers import conversation, user

# ids sharing their first 12 characters, as threads created in the same millisecond do
SHARED = new_id()[:12]
SIBLINGS = [SHARED + f"{i:02d}" + "0" * 12 for i in range(12)]


async def test_a_full_id_resolves_to_its_thread(store: Store) -> None:
    t = await store.create_thread(kind="lead", title="x")
    resolved = await store.resolve(f"T-{t.id}")
    assert resolved.thread.id == t.id
    assert (resolved.start, resolved.end, resolved.ref) == (None, None, f"T-{t.id}")


async def test_a_unique_prefix_of_four_or_more_characters_resolves(store: Store) -> None:
    t = await store.create_thread(kind="lead", thread_id="zzzz" + new_id()[4:])
    await store.create_thread(kind="lead")  # a neighbour that shares no prefix
    for n in (4, 5, 12, 25):
        assert (await store.resolve(f"T-{t.id[:n]}")).thread.id == t.id
    assert (await store.resolve(ThreadRef.parse(f"T-{t.id[:6]}"))).thread.id == t.id


async def test_an_ambiguous_prefix_lists_the_candidates(store: Store) -> None:
    for tid in SIBLINGS[:3]:
        await store.create_thread(kind="worker", thread_id=tid)
    with pytest.raises(AmbiguousRef) as err:
        await store.resolve(f"T-{SHARED}")
    assert err.value.candidates == [f"T-{tid}" for tid in SIBLINGS[:3]]
    for tid in SIBLINGS[:3]:
        assert f"T-{tid}" in str(err.value)
    # one more character makes it unique again
    assert (await store.resolve(f"T-{SIBLINGS[1][:14]}")).thread.id == SIBLINGS[1]


async def test_an_ambiguous_prefix_with_many_candidates_lists_ten_and_says_there_are_more(
    store: Store,
) -> None:
    for tid in SIBLINGS:
        await store.create_thread(kind="worker", thread_id=tid)
    with pytest.raises(AmbiguousRef) as err:
        await store.resolve(f"T-{SHARED[:8]}")
    assert len(err.value.candidates) == 10
    assert str(err.value).endswith("…")


async def test_threads_created_back_to_back_share_a_prefix_that_is_ambiguous(
    store: Store,
) -> None:
    a = await store.create_thread(kind="worker")
    b = await store.create_thread(kind="worker")
    common = 0
    while a.id[common] == b.id[common]:
        common += 1
    assert common >= 4  # same second at least: the time prefix is shared
    with pytest.raises(AmbiguousRef):
        await store.resolve(f"T-{a.id[:common]}")


async def test_an_unknown_id_or_prefix_is_thread_not_found(store: Store) -> None:
    await store.create_thread(kind="lead")
    with pytest.raises(ThreadNotFound):
        await store.resolve("T-" + "0" * 26)
    with pytest.raises(ThreadNotFound):
        await store.resolve("T-zzzzzz")
    with pytest.raises(ThreadNotFound):
        await store.get_thread("0" * 26)


async def test_a_prefix_shorter_than_four_characters_is_a_syntax_error(store: Store) -> None:
    t = await store.create_thread(kind="lead")
    with pytest.raises(RefSyntaxError):
        await store.resolve(f"T-{t.id[:3]}")


async def test_anchors_resolve_to_clamped_ranges(store: Store) -> None:
    t = await store.create_thread(kind="worker", messages=conversation(2))  # 6 messages
    cases = {
        f"T-{t.id}#3": (3, 3, f"T-{t.id}#3"),
        f"T-{t.id}#2-5": (2, 5, f"T-{t.id}#2-5"),
        f"T-{t.id}#2-": (2, 6, f"T-{t.id}#2-6"),
        f"T-{t.id}#6": (6, 6, f"T-{t.id}#6"),
        f"T-{t.id}#6-": (6, 6, f"T-{t.id}#6"),
    }
    for ref, (start, end, text) in cases.items():
        r = await store.resolve(ref)
        assert (r.start, r.end, r.ref) == (start, end, text), ref
    info, msgs = await store.read(f"T-{t.id[:8]}#2-4")
    assert info.id == t.id
    assert [m.seq for m in msgs] == [2, 3, 4]


@pytest.mark.parametrize("anchor", ["#7", "#7-", "#3-7", "#7-9"])
async def test_anchors_past_the_end_are_thread_not_found(store: Store, anchor: str) -> None:
    t = await store.create_thread(kind="worker", messages=conversation(2))  # 6 messages
    with pytest.raises(ThreadNotFound, match="6 messages"):
        await store.resolve(f"T-{t.id}{anchor}")


async def test_an_anchor_into_an_empty_thread_is_thread_not_found(store: Store) -> None:
    t = await store.create_thread(kind="worker")
    with pytest.raises(ThreadNotFound):
        await store.resolve(f"T-{t.id}#1")
    with pytest.raises(ThreadNotFound):
        await store.message(t.id, 1)


async def test_message_reads_one_message_by_seq(store: Store) -> None:
    t = await store.create_thread(kind="worker", messages=[user("a"), user("b")])
    assert (await store.message(t.id, 2)).text == "b"
