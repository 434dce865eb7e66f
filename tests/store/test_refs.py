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


# ----------------------------------------------------------------- refs by their end

# siblings created in one millisecond: the same start, told apart only by their last characters
TWINS = [SHARED + "0" * 10 + end for end in ("x2p4", "x2p5", "y2p4")]


async def test_a_ref_by_its_end_resolves_with_either_ellipsis_and_any_anchor(
    store: Store,
) -> None:
    for tid in TWINS:
        await store.create_thread(kind="worker", thread_id=tid, messages=conversation(2))
    for text, (tid, start, end) in {
        "T-…x2p5": (TWINS[1], None, None),
        "T-...x2p5": (TWINS[1], None, None),
        "t-…X2P5": (TWINS[1], None, None),
        "…y2p4#3": (TWINS[2], 3, 3),
        "T-…0x2p4#2-4": (TWINS[0], 2, 4),
        "T-...0y2p4#5-": (TWINS[2], 5, 6),
        f"T-…{TWINS[0]}": (TWINS[0], None, None),  # the whole id from its end
    }.items():
        r = await store.resolve(text)
        assert (r.thread.id, r.start, r.end) == (tid, start, end), text
    # the prefix every twin shares names none of them
    with pytest.raises(AmbiguousRef):
        await store.resolve(f"T-{SHARED}")


async def test_an_ambiguous_or_unknown_end_lists_the_candidates_or_says_so(store: Store) -> None:
    ends = [SHARED + "0" * 6 + end for end in ("ab123456", "cd123456")]
    for tid in ends:
        await store.create_thread(kind="worker", thread_id=tid)
    with pytest.raises(AmbiguousRef) as err:
        await store.resolve("T-…3456")
    assert err.value.candidates == [f"T-{tid}" for tid in ends]
    assert str(err.value).startswith("T-…3456 is ambiguous: ")
    assert (await store.resolve("T-...b123456")).thread.id == ends[0]
    with pytest.raises(ThreadNotFound, match=r"^no thread matches T-…zzzz$"):
        await store.resolve("T-…zzzz")
    # an end is no prefix: the start of an id is not found as its end
    with pytest.raises(ThreadNotFound):
        await store.resolve(f"T-…{SHARED[:6]}")
    with pytest.raises(ThreadNotFound, match="has 0 messages"):
        await store.resolve("T-…b123456#9")


@pytest.mark.parametrize("text", ["T-…x2p", "T-...", "T-…", "T-…x2p4!", "T-…x2p4#0", "T-…il0o"])
def test_a_ref_by_its_end_needs_four_id_characters(text: str) -> None:
    with pytest.raises(RefSyntaxError):
        ThreadRef.parse(text)


async def test_short_refs_are_the_shortest_unique_ends(store: Store) -> None:
    long_twins = [SHARED + "0" * 6 + end for end in ("ab123456", "cd123456")]  # share 6
    for tid in [*TWINS, *long_twins]:
        await store.create_thread(kind="worker", thread_id=tid)
    short = await store.short_refs([*TWINS, *long_twins])
    assert short == {
        TWINS[0]: "T-…x2p4",  # shares "2p4" with y2p4: four characters are enough
        TWINS[1]: "T-…x2p5",
        TWINS[2]: "T-…y2p4",
        long_twins[0]: "T-…b123456",
        long_twins[1]: "T-…d123456",
    }
    for tid, ref in short.items():
        assert (await store.resolve(ref)).thread.id == tid  # each names its thread
    with pytest.raises(AmbiguousRef):
        await store.resolve("T-…123456")  # one character less is not unique
    assert await store.short_refs([]) == {}
