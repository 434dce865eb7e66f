"""An import pauses the cyclic garbage collector (``_draft.paused_collector``) and always gives
it back: after overlapping imports, after a failed one, and never turning on one the caller
turned off."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from orchestrator.importers import import_sessions
from orchestrator.importers._draft import paused_collector
from store import Store
from tests.importers.fixtures import CodexRollout


def _rollout(root: Path, sid: str) -> None:
    r = CodexRollout(root, sid)
    r.user("hello")
    r.say("hi")
    r.write()


async def test_overlapping_imports_give_the_collector_back(tmp_path: Path, store: Store) -> None:
    _rollout(tmp_path / "a", "019a0000-aaaa-7bbb-8ccc-0000000000b1")
    _rollout(tmp_path / "b", "019a0000-aaaa-7bbb-8ccc-0000000000b2")
    assert gc.isenabled()
    seen: list[bool] = []

    async def one(p: Path) -> None:
        with paused_collector():
            seen.append(gc.isenabled())
            await asyncio.sleep(0)
            await import_sessions(store, p)
            seen.append(gc.isenabled())

    await asyncio.gather(one(tmp_path / "a"), one(tmp_path / "b"))
    assert seen == [False, False, False, False]
    assert gc.isenabled()
    assert len(await store.list_threads()) == 2


def _fail_paused() -> None:
    with paused_collector():
        assert not gc.isenabled()
        raise RuntimeError("boom")


def test_a_failure_gives_it_back_and_a_caller_that_turned_it_off_keeps_it_off() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _fail_paused()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_collector():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
