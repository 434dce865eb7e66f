"""The read path's handling of the garbage collector and its public builder: a large build
leaves the collector on (when it was), moves what it built out of the young generations
without a pass over them, never thaws objects the process froze itself (``store.construct_model``
is checked in ``test_models_stored``)."""

from __future__ import annotations

import gc
import json

from store import Message
from store._stored import GC_PAUSE_ROWS, segment_messages

OWNER = "01m8vfkpjx7rke2v8j6665hmn1"
STAMP = "2026-12-03 17:23:20.990790"


def _rows(n: int) -> list[tuple[str, str, str]]:
    return [
        (json.dumps([{"type": "text", "text": f"m{i}"}]), "user" if i % 2 else "assistant", STAMP)
        for i in range(n)
    ]


def test_a_large_build_leaves_its_models_in_the_oldest_generation() -> None:
    assert gc.isenabled()
    got = segment_messages(OWNER, 1, _rows(GC_PAUSE_ROWS))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    young = {id(o) for generation in (0, 1) for o in gc.get_objects(generation)}
    assert not any(id(m) in young or id(m.content) in young for m in got)
    assert got[-1].text == f"m{GC_PAUSE_ROWS - 1}" and got[-1].seq == GC_PAUSE_ROWS


def test_a_large_build_keeps_what_the_process_froze_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        segment_messages(OWNER, 1, _rows(GC_PAUSE_ROWS))
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_messages_of_several_blocks_read_back_whole() -> None:
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    got = segment_messages(OWNER, 7, [(json.dumps(blocks), "assistant", STAMP)] * 2)
    assert [m.seq for m in got] == [7, 8]
    assert all(isinstance(m, Message) and m.text == "a\nb" for m in got)
    assert got[0].content is not got[1].content
