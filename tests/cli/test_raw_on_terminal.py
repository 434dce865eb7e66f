"""``show --raw`` on a real terminal draws a tool output's escape sequences (OSC 52 would write
the clipboard, OSC 0 retitle the window, SGR 8 hide text); piped, it writes them as stored.
The terminal is a real pty (``os.openpty``) and the command a real ``threadloom`` process."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

from store import NewMessage, Store, ToolResultBlock, ToolUseBlock
from tests.orchestrator.test_cli_helpers import clean_env

HOSTILE = {
    "osc52": "\x1b]52;c;cm0gLXJmIH4=\x07",  # the clipboard
    "osc0": "\x1b]0;pwned\x07",  # the window's title
    "sgr8": "\x1b[8mhidden\x1b[0m",  # invisible text
    "csi-up": "\x1b[2A\x1b[2K",  # overwrite the lines above
    "c1-csi": "\x9b31m",  # a one-byte CSI
}
OUTPUT = "before " + " ".join(HOSTILE.values()) + " after\n"


async def _build(path: Path) -> str:
    async with await Store.open(str(path)) as store:
        t = await store.create_thread(kind="worker", messages=[NewMessage.user("run it")])
        call = ToolUseBlock(id="c1", name="bash", input={"command": "cat evil"})
        await store.append(t.id, NewMessage(role="assistant", content=[call]))
        result = ToolResultBlock(tool_use_id="c1", content=OUTPUT)
        await store.append(t.id, NewMessage(role="user", content=[result]))
        return t.ref


def _on_pty(*args: str) -> bytes:
    """What ``threadloom ARGS…`` writes to a terminal: its stdout is a pty's slave end."""
    master, slave = os.openpty()
    env = clean_env(TERM="xterm-256color", COLUMNS="160", LINES="50")
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    out = bytearray()
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed the terminal
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return bytes(out)


def test_raw_on_a_terminal_draws_every_escape_sequence(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    ref = asyncio.run(_build(db))
    for args in (["show", "--raw", ref], ["show", "--raw", "--redact", ref], ["show", ref]):
        shown = _on_pty("--db", str(db), *args)
        assert b"before" in shown, shown  # the output is there
        for name, seq in HOSTILE.items():
            assert seq.encode() not in shown, f"{args}: {name} reached the terminal"
        assert b"\x1b]" not in shown  # no OSC at all (rich styles with SGR only)
        if "--raw" in args:
            assert b"^[]52;c;cm0gLXJmIH4=^G" in shown  # drawn, as cat -v would
            assert b"^[[8mhidden^[[0m" in shown
            assert b"\\x9b31m" in shown


def test_raw_piped_and_json_keep_the_bytes_as_stored(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    ref = asyncio.run(_build(db))
    env = clean_env()
    cmd = [sys.executable, "-m", "orchestrator", "--db", str(db)]
    piped = subprocess.run([*cmd, "show", "--raw", ref], capture_output=True, env=env, check=True)
    assert OUTPUT.rstrip("\n").encode() in piped.stdout  # the record, byte for byte
    doc = subprocess.run(
        [*cmd, "--json", "show", "--raw", ref], capture_output=True, env=env, check=True
    )
    assert b"\x1b" not in doc.stdout  # escaped in JSON, and decodes to the bytes as stored
    texts = [b.get("content") for m in json.loads(doc.stdout)["messages"] for b in m["content"]]
    assert OUTPUT in texts
    exported = subprocess.run([*cmd, "export", ref], capture_output=True, env=env, check=True)
    assert json.dumps(OUTPUT, ensure_ascii=False)[1:-1].encode() in exported.stdout
