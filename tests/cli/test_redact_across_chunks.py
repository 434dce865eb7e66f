"""``--redact`` masks a secret that straddles a stored output's 1 MiB chunk boundary, in every
reader that streams stored outputs: ``export`` as HTML, JSONL and Markdown, and ``show --raw``.
Redaction runs over the output as one stream, and on text, before HTML or JSON escaping: an
``sk-ant-`` key cut by a chunk boundary kept its last characters, and a configured secret
holding ``&``, ``<`` or ``"`` (escaped apart on the page) was printed whole.

Real SQLite file, real ``threadloom`` subprocesses, the secret configured in their
environment."""

from __future__ import annotations

import asyncio
import html
import json
import subprocess
import sys
from pathlib import Path

import pytest

from store import NewMessage, Store, ToolResultBlock, ToolUseBlock
from tests.orchestrator.test_cli_helpers import clean_env

CHUNK = 1 << 20  # characters in each chunk of a stored output cut from a string
FILL = "filler line of a long tool run 0123456789\n"
KEYS = {  # start of the key, relative to the first chunk boundary
    back: "sk-ant-api03-"
    + f"K{back:03d}"
    + "abcdefghijklmnopqrstuvwxyz0123456789" * 2
    + "QWERTYUIOP"
    for back in (10, 40, 70)
}
CONFIGURED = 'Hx7&Tq<pW"9z\\Lm'  # a configured secret with &, <, " and \
CONFIGURED_AT = 7  # it starts 7 characters before the boundary


def _output(planted: str, back: int) -> str:
    head = (FILL * (CHUNK // len(FILL) + 1))[: CHUNK - back - 1] + " "
    # ~1.1 MiB: past the boundary, a tail to stream on after the key (a second boundary, at
    # 2 MiB, would add only more of the same filler to escape and scan)
    return head + planted + " " + FILL * 3_000


async def _build(path: Path) -> str:
    async with await Store.open(str(path)) as store:
        t = await store.create_thread(kind="worker", messages=[NewMessage.user("run it")])
        outputs = [(KEYS[b], b) for b in KEYS] + [(CONFIGURED, CONFIGURED_AT)]
        for i, (planted, back) in enumerate(outputs):
            call = ToolUseBlock(id=f"c{i}", name="bash", input={"command": f"run {i}"})
            await store.append(t.id, NewMessage(role="assistant", content=[call]))
            result = ToolResultBlock(tool_use_id=f"c{i}", content=_output(planted, back))
            await store.append(t.id, NewMessage(role="user", content=[result]))
        msgs = await store.messages(t.id)
        stored = [b for m in msgs for b in m.content if getattr(b, "stored", None) is not None]
        assert len(stored) == len(outputs)  # every output is stored apart, in chunks
        return t.ref


@pytest.fixture(scope="module")
def thread(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("redact") / "t.db"
    return db, asyncio.run(_build(db))


def _fragments() -> list[str]:
    """What must not be printed: each key's tail and head (24 characters each), and each
    half of the configured secret, as text and as the page or JSON would spell it."""
    out = []
    for key in KEYS.values():
        out += [key[-24:], key[:24]]
    for half in (CONFIGURED[:6], CONFIGURED[6:]):
        out += [half, html.escape(half), json.dumps(half)[1:-1]]
    return out


@pytest.mark.parametrize(
    "args",
    [
        ["export", "--format", "html", "--redact"],
        ["export", "--format", "jsonl", "--redact"],
        ["export", "--format", "md", "--redact"],
        ["--json", "export", "--format", "html", "--redact"],
        ["show", "--raw", "--redact"],
    ],
    ids=["html", "jsonl", "md", "json-html", "show-raw"],
)
def test_a_secret_across_a_chunk_boundary_is_masked(
    thread: tuple[Path, str], args: list[str]
) -> None:
    db, ref = thread
    env = clean_env(MY_SERVICE_PASSWORD=CONFIGURED)
    cmd = [sys.executable, "-m", "orchestrator", "--db", str(db), *args, ref]
    out = subprocess.run(cmd, capture_output=True, env=env, check=True, text=True).stdout
    assert len(out) > 4 * CHUNK  # every output whole
    leaks = [f for f in _fragments() if f in out]
    assert not leaks, f"{args}: leaked {leaks}"
    assert out.count("sk-ant-…[REDACTED]") >= len(KEYS)  # masked where they were, not lost


def test_without_redact_the_export_is_the_record(thread: tuple[Path, str]) -> None:
    db, ref = thread
    env = clean_env(MY_SERVICE_PASSWORD=CONFIGURED)
    cmd = [sys.executable, "-m", "orchestrator", "--db", str(db), "export", ref]
    out = subprocess.run(cmd, capture_output=True, env=env, check=True, text=True).stdout
    for key in KEYS.values():
        assert key in out
    assert json.dumps(CONFIGURED)[1:-1] in out
