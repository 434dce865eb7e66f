"""The real Claude Code and Codex files in ../shared/realsessions import whole through the
confined, file-at-a-time reader: nothing refused, every session file read, nothing skipped,
and imported again nothing added."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.importers import import_sessions
from store import Store
from tests.realsessions import REAL, require


@pytest.mark.parametrize("where", ["claude/projects", "codex/sessions"])
async def test_real_sessions_import_whole_and_once(where: str, store: Store) -> None:
    root = require(REAL / where)
    files = [
        Path(d) / f
        for d, _, names in os.walk(root)
        for f in names
        if f.endswith(".jsonl") and Path(d).name != "subagents"
    ]
    report = await import_sessions(store, root)
    assert report.refused == []
    assert report.unrecognized == [] and report.files == len(files)
    assert report.skipped == 0 and report.threads
    again = await import_sessions(store, root)
    assert again.threads and sum(w.added for w in again.threads) == 0
