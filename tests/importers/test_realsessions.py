"""Importing the session files the real Claude Code and Codex CLIs wrote
(``../shared/realsessions``, outside the repository: see its SOURCES.md): outputs, exit
statuses, titles and times as the source has them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.importers import import_sessions
from orchestrator.views import output_summary
from store import Store, ToolResultBlock
from tests.realsessions import CLAUDE, CODEX, REAL, require

SHELL_040 = (
    CODEX / "2025/09/24/rollout-2025-09-24T19-22-20-01997e76-d124-7592-9cac-2ec05abbca08.jsonl"
)
UNIFIED_0125 = (
    CODEX / "2026/05/11/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
)
DESKTOP_0128 = (
    CODEX / "2026/05/11/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"
)


@pytest.fixture(autouse=True)
def _corpus() -> None:
    require(REAL)


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC)


async def _results(store: Store, thread_id: str) -> dict[str, tuple[int, ToolResultBlock]]:
    return {
        b.tool_use_id: (m.seq, b)
        for m in await store.messages(thread_id)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }


async def test_codex_json_string_outputs_are_text_with_their_exit_status(store: Store) -> None:
    (t,) = (await import_sessions(store, SHELL_040)).threads
    results = await _results(store, t.info.id)
    assert len(results) == 123
    assert not [b for _, b in results.values() if b.text.startswith('{"output"')]
    # a failed command: its text, its exit status as threadloom's bash keeps it, `show`'s state
    _, failed = results["call_aH7aK3Nrbx5haWYlNLCGiJRr"]
    assert (
        failed.text
        == "sed: packages/ui/hooks/use-api-list.ts: No such file or directory\n[exit code: 1]"
    )
    assert failed.effects is not None and failed.effects.exit_code == 1
    assert failed.effects.complete is False  # what it changed is unknown: no claim rests on it
    assert output_summary(failed.text, is_error=failed.is_error)[0] == "exit 1"
    codes = [b.effects.exit_code for _, b in results.values() if b.effects is not None]
    assert len(codes) == 116 and sorted(c for c in codes if c) == [1, 1, 1, 2, 2, 2, 2, 2]
    # lines are lines: a word that only ever starts a line of an output is found in it
    seq, sheet = results["call_SoPePfGeKbQ7MB0cHd4l6MZE"]
    assert "\ninterface " in sheet.text and "\\n" not in sheet.text.split("\n", 1)[0]
    hits = await store.search("interface", limit=100)
    assert f"#{seq}" in {h.ref[h.ref.index("#") :] for h in hits if t.info.id in h.ref}


async def test_codex_unified_exec_outputs_keep_their_exit_line(store: Store) -> None:
    (t,) = (await import_sessions(store, UNIFIED_0125)).threads
    results = [b for _, b in (await _results(store, t.info.id)).values()]
    exited = [b for b in results if "\nProcess exited with code " in b.text[:200]]
    assert exited and all(b.effects is not None for b in exited)
    for b in exited:
        assert b.effects is not None
        assert f"Process exited with code {b.effects.exit_code}\n" in b.text
        assert b.text.endswith(f"[exit code: {b.effects.exit_code}]")
    running = [b for b in results if "\nProcess running with session ID" in b.text[:200]]
    assert running and all(b.effects is None for b in running)  # no exit yet: none claimed


CODEX_TITLES = {
    SHELL_040: "Updating a team to assign a lead or change from viewer to contributor is VERY…",
    CODEX / "2026/01/02/rollout-2026-01-02T18-39-45-019b7f94-51b4-7593-922e-ba12b5b73b52.jsonl": (
        "what is current repository about? summarize purpuse and explain goals"
    ),
    UNIFIED_0125: "show tools",
    DESKTOP_0128: "analyze trascript and summarzie action items related to codemie and demo",
}
CLAUDE_TITLES = {
    CLAUDE / "-Users-chip-dev-ai-music/ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl": (
        "ok, now write the program using the instruction in README.md"
    ),
    CLAUDE / "-path-to-Demo/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl": "/init",
    CLAUDE / "-path-to-Demo/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl": (
        "/orchestrator @CLAUDE.md を最新の状態にアップデートしてください"
    ),
    CLAUDE / "-Users-user-repo/196820da-1026-4b6f-a513-a6aae42da1a6.jsonl": (
        "ultrathink there is logic that tracks files in claude folder for sso c"
    ),
}


@pytest.mark.parametrize("path", [*CODEX_TITLES, *CLAUDE_TITLES], ids=lambda p: p.name[:40])
async def test_titles_are_the_first_request_a_person_wrote(store: Store, path: Path) -> None:
    threads = (await import_sessions(store, path)).threads
    main = threads[0].info
    assert main.title.startswith({**CODEX_TITLES, **CLAUDE_TITLES}[path].rstrip("…"))


async def test_no_real_session_is_titled_with_what_its_cli_wrote(store: Store) -> None:
    report = await import_sessions(store, REAL)
    titles = {w.info.title for w in report.threads}
    assert len(titles) > 20
    bad = (
        "Caveat:",
        "<",
        "# AGENTS.md",
        "# Context from my IDE",
        "[developer message]",
        "[imported",
    )
    assert [t for t in titles if t.startswith(bad)] == []


async def test_threads_and_messages_keep_the_sources_times(store: Store) -> None:
    (t,) = (await import_sessions(store, SHELL_040)).threads
    # session_meta's timestamp; the first line's and the last line's
    assert t.info.created_at == _at("2025-09-25T01:22:20.068Z")
    msgs = await store.messages(t.info.id)
    assert msgs[0].created_at == _at("2025-09-25T01:22:20.083Z")
    assert msgs[-1].created_at == _at("2025-09-25T02:10:21.777Z")
    assert [m.created_at for m in msgs] == sorted(m.created_at for m in msgs)
    assert (await store.get_thread(t.info.id)).created_at == t.info.created_at  # as stored
    claude = CLAUDE / "-Users-chip-dev-ai-music/ba79134d-b6e9-4867-af0c-6941038c9e4b.jsonl"
    (c, *_) = (await import_sessions(store, claude)).threads
    assert c.info.created_at.year == 2025 and c.info.created_at < t.info.created_at
    # listings go by id: the older session lists first, whatever order it was imported in
    listed = [x.id for x in await store.list_threads(oldest_first=True)]
    assert listed.index(c.info.id) < listed.index(t.info.id)
