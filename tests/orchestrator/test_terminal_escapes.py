"""Terminal escape sequences in a transcript (issue 9 item 9): a tool's output, a model's text
or a title that sets the pane title (OSC 0), writes the clipboard (OSC 52), overwrites a line
(CR, cursor moves, erase line), uses C1 controls or reorders text (bidi overrides) is shown
visibly by every human view — ``show``, ``show --tools``, ``search``, ``ls``, ``tree``, an error
line — on a terminal and in a pipe; ``show --raw`` and ``export`` keep the bytes as stored."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli._render import visible
from store import NewMessage, Status, Store, ToolResultBlock, ToolUseBlock
from tests._terminal import run_on_terminal
from tests.orchestrator.test_cli_helpers import clean_env, run_cli

TITLE = "\x1b]0;pwned pane\x07Fix \u202eexe.txt\u202c it"
OUTPUT = (
    "running tests\n"
    "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: put "rm -rf ~" on the clipboard
    "3 failed\r\x1b[2K\x1b[1A\x1b[2KFAKE: all 39 tests passed\n"
    "\x9b31m c1 csi\x9d0;title\x9c \x1b[?1049h bell\x07 del\x7f\n"
)
TEXT = "Done \x1b]0;owned\x07 hostilemarker \x1b[2J\x1b[H cleared\r\nok"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _controls(text: str) -> list[str]:
    return CONTROLS.findall(text)


async def _build(db: Path) -> str:
    store = await Store.open(str(db))
    try:
        thread = await store.create_thread(
            kind="worker", title=TITLE, messages=[NewMessage.user("run the tests")]
        )
        await store.append(
            thread.id,
            [
                NewMessage(
                    role="assistant",
                    content=[ToolUseBlock(id="t1", name="bash", input={"command": "pytest -q"})],
                ),
                NewMessage(
                    role="user", content=[ToolResultBlock(tool_use_id="t1", content=OUTPUT)]
                ),
                NewMessage.assistant(TEXT),
            ],
        )
        await store.set_status(thread.id, Status.RUNNING)
        await store.set_status(thread.id, Status.FAILED, error="exit \x1b[31m1\x1b[0m\rok")
        return f"T-{thread.id}"
    finally:
        await store.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("escapes") / "threads.db"
    return db, asyncio.run(_build(db))


def test_visible_shows_controls_and_keeps_text() -> None:
    assert visible("a\x1b[2Kb") == "a^[[2Kb"
    assert visible("x\ry") == "x^My" and visible("line\r\nnext\tz") == "line\r\nnext\tz"
    assert visible("\x07\x7f\x9b\u202e\u2066") == "^G^?\\x9b\\u202e\\u2066"
    assert visible("héllo — 世界 ✓") == "héllo — 世界 ✓"
    assert visible(visible(OUTPUT)) == visible(OUTPUT)  # idempotent: nothing left to escape
    assert _controls(visible(OUTPUT + TEXT + TITLE).replace("\r\n", "")) == []


@pytest.mark.parametrize(
    "args",
    [
        ("show", "{ref}"),
        ("show", "--tools", "{ref}"),
        ("search", "hostilemarker"),
        ("search", "passed"),
        ("ls",),
        ("tree", "{ref}"),
    ],
)
def test_human_views_show_control_characters_visibly(
    hostile: tuple[Path, str], args: tuple[str, ...]
) -> None:
    db, ref = hostile
    proc = run_cli(*(a.format(ref=ref) for a in args), db=db)
    assert proc.returncode == 0, proc.stderr
    assert _controls(proc.stdout) == [], proc.stdout
    assert "^[" in proc.stdout


def test_show_tools_prints_the_whole_output_made_visible(hostile: tuple[Path, str]) -> None:
    db, ref = hostile
    out = run_cli("show", "--tools", ref, db=db).stdout
    assert "^[]52;c;cm0gLXJmIH4=^G" in out
    assert "3 failed^M^[[2K^[[1A^[[2KFAKE: all 39 tests passed" in out
    assert "^[]0;pwned pane^GFix \\u202eexe.txt\\u202c it" in out
    assert "\\x9b31m c1 csi\\x9d0;title\\x9c" in out
    assert "error" in out and "exit ^[[31m1^[[0m ok" in out  # one line: the CR is a space
    assert "4 assistant\nDone ^[]0;owned^G hostilemarker ^[[2J^[[H cleared\nok" in out


def test_raw_and_export_keep_the_bytes_as_stored(hostile: tuple[Path, str]) -> None:
    db, ref = hostile
    raw = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--db", str(db), "show", "--raw", ref],
        capture_output=True,
        env=clean_env(),
        check=False,
    )
    assert raw.returncode == 0, raw.stderr
    assert OUTPUT.encode() in raw.stdout and TEXT.encode() in raw.stdout
    exported = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--db", str(db), "export", ref],
        capture_output=True,
        env=clean_env(),
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.decode().splitlines()]
    blob = json.dumps(lines, ensure_ascii=False)
    assert json.dumps(OUTPUT, ensure_ascii=False)[1:-1] in blob
    as_json = run_cli("--json", "show", ref, db=db)
    assert as_json.returncode == 0 and _controls(as_json.stdout) == []
    assert json.loads(as_json.stdout)["title"] == TITLE


def test_on_a_terminal_only_the_styling_is_escape_codes(hostile: tuple[Path, str]) -> None:
    """On a real pseudo-terminal rich styles the output; the record's controls are still shown."""
    db, ref = hostile
    code, out = run_on_terminal("--db", str(db), "show", "--tools", ref)
    assert code == 0, out
    assert "FAKE: all 39 tests passed" in out
    # the only escape sequences are rich's SGR styling: no OSC, no cursor move, no erase, no BEL
    without_sgr = re.sub("\x1b\\[[0-9;]*m", "", out).replace("\r\n", "\n")
    assert _controls(without_sgr) == [], without_sgr
    assert "^[]52;c;" in without_sgr
