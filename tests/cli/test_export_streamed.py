"""``export --json`` and ``export --redact`` stream: a huge tool output stored apart exports
whole, masked where asked, with the memory of a small thread's export (the peak RSS of fresh
``threadloom`` processes, against that baseline in the same run); and the streaming
redaction masks exactly what ``redact`` masks in the whole text, wherever the pieces fall.

The sizes: a streaming export's growth over the baseline does not depend on the output's size
(measured: ~15 MiB for ``--json``, ~44 MiB with ``--redact``, alike at 40 and 100 MB), so each
mode's output is only as large as it must be for one whole copy of it, by itself, to exceed
the bound: ``--json`` could hold the output as bytes (about one byte a character here), so
its output stays 100 MB; ``--redact`` matches its patterns on text, and the text of these
lines (each with a ✓) is two bytes a character in a Python string, so 40 MB (~77 MB as one
string) is enough for the two ``--redact`` modes, whose redaction of every character is what
the test's time goes to (~4 MB/s: 24 s an export at 100 MB)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from store import NewMessage, OutputFile, Store, ToolResultBlock, ToolUseBlock
from workers import redact
from workers._redact import HOLD, PIECE, RedactingWriter, refresh_secrets

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-ant-api03-" + "Q" * 40
HUGE = 100_000_000  # the plain --json export's output
HUGE_REDACT = 40_000_000  # the --redact exports': ~77 MB as one string (see the docstring)
GROWTH_MIB = 64  # the bound on a big export's peak RSS over a small one's
LINE = "output line of a very long tool run, 0123456789 ✓\n"
EVERY = 997  # a secret on every 997th line: some fall across every piece boundary


def _chunk(n: int) -> str:
    return "".join(f"key: {SECRET} ok\n" if i % EVERY == 0 else LINE for i in range(n))


async def _build(db: Path, huge: int) -> tuple[str, str, int]:
    store = await Store.open(str(db))
    try:
        small = await store.create_thread(kind="worker", messages=[NewMessage.user("hi")])
        await store.append(small.id, NewMessage.assistant("hello"))
        t = await store.create_thread(kind="worker", messages=[NewMessage.user("run it")])
        call = ToolUseBlock(id="c1", name="bash", input={"command": "make noise"})
        await store.append(t.id, NewMessage(role="assistant", content=[call]))
        f = OutputFile()
        block = _chunk(20_000).encode()
        planted = 0
        while f.size + len(block) <= huge:
            f.write(block)
            planted += block.count(SECRET.encode())
        try:
            result = ToolResultBlock(tool_use_id="c1", content="")
            msg = NewMessage(role="user", content=[result])
            await store.append(t.id, msg, output_files={"c1": f})
        finally:
            f.close()
        await store.append(t.id, NewMessage.assistant("that was a lot"))
        return small.ref, t.ref, planted
    finally:
        await store.close()


_PROBE = r"""
import atexit, os, runpy, sys
def peak():
    # VmHWM: the peak RSS of this process's own memory since its exec. Not ru_maxrss: that
    # also counts the parent's pages this child held between fork and exec (pytest's, here)
    with open("/proc/self/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM:"))
    with open(os.environ["PEAK_FILE"], "w") as out:
        out.write(hwm.split()[1])
atexit.register(peak)
sys.argv = ["threadloom", *sys.argv[1:]]
runpy.run_module("orchestrator", run_name="__main__")
"""


def _export(db: Path, out: Path, *args: str) -> float:
    """MiB of the peak RSS of one fresh ``threadloom … export`` process, stdout to ``out``."""
    peak = out.with_suffix(".peak")
    env = {k: v for k, v in os.environ.items() if k != "THREADLOOM_DB"}
    env["PEAK_FILE"] = str(peak)
    with out.open("wb") as f:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, "--db", str(db), *args],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.PIPE,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr.decode()
    return int(peak.read_text()) / 1024


def test_export_json_and_redact_of_a_huge_output_stay_in_bounded_memory(tmp_path: Path) -> None:
    built: dict[int, tuple[Path, str, str, int]] = {}
    for huge in (HUGE, HUGE_REDACT):
        db = tmp_path / f"t{huge}.db"
        built[huge] = (db, *asyncio.run(_build(db, huge)))
    out = tmp_path / "out"
    peaks: dict[str, float] = {}
    for name, args in {
        "json": ("--json", "export"),
        "redact": ("export", "--redact"),
        "json_redact": ("--json", "export", "--redact"),
    }.items():
        huge = HUGE_REDACT if "redact" in name else HUGE
        db, small, big, planted = built[huge]
        base = _export(db, out, *args, small)
        peaks[name] = _export(db, out, *args, big)
        grown = peaks[name] - base
        print(
            json.dumps(
                {
                    "export": name,
                    "output_mb": huge / 1e6,
                    "baseline_mib": base,
                    "mib": peaks[name],
                    "ratio": round(peaks[name] / base, 2),
                }
            )
        )
        size = out.stat().st_size
        assert size > huge
        assert grown < GROWTH_MIB, (name, peaks[name], base)  # before: ~4x the output
        with out.open(encoding="utf-8") as f:
            if name.startswith("json"):
                doc = json.load(f)
                assert doc["ref"] == big and doc["messages"] == 4
                text = doc["text"]
            else:
                text = f.read()
        assert text.count(SECRET) == (0 if "redact" in name else planted)
        if "redact" in name:
            assert text.count("sk-ant-…[REDACTED]") == planted
        assert text.count(LINE.rstrip("\n")) > 0
        del text


def _pieces(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.choice([1, 7, 4096, PIECE - 3, PIECE, 2 * PIECE + 11, 3 * PIECE])
        out.append(text[i : i + n])
        i += n
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_redaction_masks_what_redact_masks_in_the_whole_text(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = 'hunter2-but-longer: with spaces, {quotes} and "such"'
    monkeypatch.setenv("MY_SERVICE_PASSWORD", configured)
    refresh_secrets()
    try:
        rng = random.Random(seed)
        pem = (
            "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIE" * 3000 + "\n-----END RSA PRIVATE KEY-----"
        )
        secrets = [
            SECRET,
            "sk-proj-" + "a" * 30,
            "AKIAABCDEFGHIJKLMNOP",
            "ghp_" + "x" * 36,
            "aws_secret_access_key = " + "A" * 40,
            configured,
            pem,
        ]
        parts: list[str] = []
        while sum(map(len, parts)) < 9 * PIECE:
            parts.append(LINE * rng.randint(1, 3000))
            # JSON escapes too (``\\n``, ``\\u2028``): a token may start right after one
            parts.append(rng.choice([" ", "\n", '"', "", "\\n", "\\u2028"]) + rng.choice(secrets))
        parts.append(" sk-ant-" + "Z" * (3 * PIECE) + " tail")  # a token longer than a piece
        text = "".join(parts)
        got: list[str] = []
        w = RedactingWriter(got.append)
        for piece in _pieces(text, rng):
            w.write(piece)
        w.close()
        streamed = "".join(got)
        assert streamed == redact(text)
        assert max(map(len, got)) < 6 * PIECE  # written as it comes (a piece or two), not whole
        assert configured not in streamed and SECRET not in streamed
    finally:
        monkeypatch.delenv("MY_SERVICE_PASSWORD")
        refresh_secrets()


def test_a_piece_is_never_cut_between_a_json_escape_and_the_token_after_it() -> None:
    """The only separator near the cut is the backslash of ``\\n``: cut there, the next piece
    began with ``nsk-ant-…`` and the token was no longer seen as one."""
    text = "y" * PIECE + " " + "x" * 100 + "\\nsk-ant-" + "Q" * 40 + "z" * (2 * PIECE + 2 * HOLD)
    got: list[str] = []
    w = RedactingWriter(got.append)
    w.write(text)
    w.close()
    assert len(got) > 1  # it was cut
    assert "".join(got) == redact(text) and "sk-ant-" + "Q" * 40 not in "".join(got)
