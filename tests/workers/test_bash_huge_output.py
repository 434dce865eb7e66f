"""A 100 MB bash output is stored whole (SPEC: every tool output is stored whole), streamed
through a temporary file into the database in the append's transaction, with the memory of the
storing process bounded far below the output's size; the model sees exactly the capped view it
would see of the output inline, with the whole size in its marker; ``show --raw`` prints it
whole. Real bash, the real loop, real SQLite and PostgreSQL, a fresh process for the memory
measurement (``ru_maxrss`` is a high-water mark)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Store, ToolResultBlock
from tests import pg
from workers import ToolContext, build_tools, cap_text, run_thread
from workers.providers import FunctionModel, text_response, tool_response
from workers.tools import BashTool
from workers.tools._bash import SPILL_BYTES, SpooledOutput

ROOT = Path(__file__).resolve().parents[2]
SIZE = 100 * 1024 * 1024
COMMAND = f"head -c {SIZE} /dev/zero | tr '\\0' a; echo; echo END-MARKER"
WHOLE_TAIL = "\nEND-MARKER\n[exit code: 0]"
"""After the SIZE a's: what ``COMMAND``'s stored output ends with."""
MEMORY_LIMIT_MIB = 64

# A child that does only this: open the store, run one thread whose model calls bash once with
# COMMAND, then ends. It reports its peak memory growth over the run, and what was stored.
_CHILD = r"""
import asyncio, hashlib, json, resource, sys
from pathlib import Path
from store import Store, NewMessage
from workers import build_tools, run_thread
from workers.providers import FunctionModel, text_response, tool_response

url, ws, command = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

def reply(request):
    if request.messages[-1].tool_results():
        return text_response("done")
    return tool_response(("bash", {"command": command, "timeout_s": 300}))

async def main():
    store = await Store.open(url)
    t = await store.create_thread(
        kind="worker", tools=["bash"], messages=[NewMessage.user("make a lot of output")]
    )
    model = FunctionModel(reply)
    # warm up everything the run touches once (imports, the first append, a bash call)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = await run_thread(
        store, t.id, model=model, tools=build_tools(["bash"]), workspace=ws
    )
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    msg = await store.message(t.id, 3)
    block = msg.content[0]
    digest = hashlib.sha256()
    async for piece in store.output_pieces(t.id, 3, block.tool_use_id):
        digest.update(piece.encode())
    sent = model.requests[-1].messages[-1].content[0]
    print(json.dumps({
        "thread": t.id,
        "status": str(outcome.status),
        "grown_mib": grown,
        "stored": block.stored.model_dump() if block.stored else None,
        "preview_chars": len(block.text),
        "read_sha256": digest.hexdigest(),
        "sent": sent.content,
        "sent_keys": sorted(sent.model_dump(exclude_none=True)),
    }))
    await store.close()

asyncio.run(main())
"""


def _expected_sha256(after: bytes = b"") -> str:
    digest = hashlib.sha256()
    block = b"a" * (1 << 20)
    for _ in range(SIZE // len(block)):
        digest.update(block)
    digest.update(WHOLE_TAIL.encode() + after)
    return digest.hexdigest()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "threads.db")
        return
    pg.require()
    db = pg.create_database_sync(pg.new_name("huge"))
    try:
        yield db.url
    finally:
        pg.drop_database_sync(db.name)


def test_a_100mb_bash_output_is_stored_whole_in_bounded_memory_and_shown_whole(
    db_url: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, db_url, str(ws), COMMAND],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])  # after any log lines
    assert got["status"] == "done"
    chars = SIZE + len(WHOLE_TAIL)
    expected = _expected_sha256()
    assert got["stored"] is not None
    assert got["stored"]["chars"] == chars and got["stored"]["bytes"] == chars
    assert got["stored"]["sha256"] == expected
    assert got["read_sha256"] == expected  # read back byte-identical, chunk by chunk
    assert got["grown_mib"] < MEMORY_LIMIT_MIB, got["grown_mib"]
    assert got["preview_chars"] < 200_000
    # the model saw what it would have seen of the whole output inline, and no "stored" key
    ref = f"T-{got['thread']}#3"
    whole = "a" * SIZE + WHOLE_TAIL
    assert got["sent"] == f"[{ref}]\n{cap_text(whole, 30_000, ref)}"
    assert f"({chars:,} in all)" in got["sent"]
    assert got["sent_keys"] == ["content", "is_error", "tool_use_id", "type"]
    del whole
    # `threadloom show --raw` prints it whole, byte for byte: hash what follows its header line
    env = {**os.environ, "THREADLOOM_DB": db_url}
    show = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "show", ref, "--raw"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert show.stdout is not None
    header = f" · {chars:,} chars\n".encode()
    buf = b""
    while header not in buf and len(buf) < 1 << 16:
        buf += show.stdout.read1(4096)
    assert header in buf, buf[:2000]
    digest = hashlib.sha256(buf.split(header, 1)[1])
    while data := show.stdout.read(1 << 20):
        digest.update(data)
    _, err = show.communicate(timeout=120)
    assert show.returncode == 0, err[-2000:]
    assert digest.hexdigest() == _expected_sha256(b"\n")


async def test_bash_spills_past_its_threshold_and_the_text_is_still_whole(
    tmp_path: Path,
) -> None:
    size = SPILL_BYTES + 12345
    out = await BashTool().invoke(
        {"command": f"head -c {size} /dev/zero | tr '\\0' b"}, ToolContext(workspace=tmp_path)
    )
    assert isinstance(out, SpooledOutput)
    assert out.file.size == size + len("\n[exit code: 0]")
    assert out.text == "b" * size + "\n[exit code: 0]"
    out.file.close()
    small = await BashTool().invoke({"command": "echo hi"}, ToolContext(workspace=tmp_path))
    assert not isinstance(small, SpooledOutput) and small.text == "hi\n[exit code: 0]"


async def test_beyond_the_ceiling_bash_keeps_the_head_and_the_last_mib_around_a_marker(
    tmp_path: Path,
) -> None:
    cap = SPILL_BYTES + (2 << 20)
    size = cap + (5 << 20)
    command = f"head -c {size} /dev/zero | tr '\\0' c; echo; echo LAST-LINE"
    out = await BashTool(output_cap_bytes=cap).invoke(
        {"command": command}, ToolContext(workspace=tmp_path)
    )
    assert isinstance(out, SpooledOutput)
    text = out.text
    out.file.close()
    total = size + len("\nLAST-LINE\n")
    head_kept = cap - (1 << 20)
    omitted = total - head_kept - (1 << 20)
    marker = f"\n[… {omitted} bytes of output omitted …]\n"
    assert text.index(marker) == head_kept
    assert text.endswith("c\nLAST-LINE\n[exit code: 0]")
    assert len(text) == head_kept + len(marker) + (1 << 20) + len("[exit code: 0]")


async def test_a_spilled_output_goes_through_the_loop_into_the_store_and_its_file_is_freed(
    store: Store, workspace: Path
) -> None:
    size = SPILL_BYTES + 999
    outputs: list[SpooledOutput] = []

    class Recording(BashTool):
        async def run(self, args, ctx):  # type: ignore[no-untyped-def]
            out = await super().run(args, ctx)
            assert isinstance(out, SpooledOutput)
            outputs.append(out)
            return out

    def reply(request):  # type: ignore[no-untyped-def]
        if request.messages[-1].tool_results():
            return text_response("done")
        return tool_response(("bash", {"command": f"head -c {size} /dev/zero | tr '\\0' d"}))

    from store import NewMessage

    t = await store.create_thread(kind="worker", tools=["bash"], messages=[NewMessage.user("go")])
    tools = [Recording(), *build_tools([])]
    outcome = await run_thread(
        store, t.id, model=FunctionModel(reply), tools=tools, workspace=workspace
    )
    assert str(outcome.status) == "done"
    msg = await store.message(t.id, 3)
    block = msg.content[0]
    assert isinstance(block, ToolResultBlock) and block.stored is not None
    assert await store.output_text(msg, block) == "d" * size + "\n[exit code: 0]"
    assert outputs and outputs[0].file.closed  # the spill file is gone once appended
