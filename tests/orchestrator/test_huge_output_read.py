"""Readers get the whole of a tool output stored apart: ``show --raw``, ``export`` (jsonl, md),
``import`` of that export, and ``read_thread`` paging through it by ``max_chars``; a fork shows
its parent's; ``--redact`` masks secrets inside the stored chunks (even one straddling two
chunks) exactly as inside inline text — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.importers.jsonl import transcript_line
from orchestrator.runtime.pages import read_page
from store import INLINE_LIMIT, NewMessage, Store, ToolResultBlock, ToolUseBlock
from store._outputs import CHUNK_BYTES
from tests import pg
from tests.orchestrator.test_cli_helpers import invoke, json_out
from workers import redact

SECRET = "sk-ant-api03-" + "Q" * 40
BACKTICKS = "`" * 7


def _whole() -> str:
    """About 2.5 MiB: a secret across the first chunk boundary (a string is cut every
    CHUNK_BYTES characters), a run of seven backticks, non-ASCII text, a last line."""
    line = "output line ✓ éàü 0123456789\n"
    body = line * ((5 * CHUNK_BYTES // 2) // len(line))
    cut = CHUNK_BYTES - 10
    body = body[:cut] + SECRET + body[cut + len(SECRET) :]
    mid = 2 * CHUNK_BYTES - 100
    body = body[:mid] + BACKTICKS + body[mid + 7 :]
    return body + "LAST-LINE\n[exit code: 0]"


WHOLE = _whole()
assert len(WHOLE) > INLINE_LIMIT


@dataclass(frozen=True)
class Sample:
    url: str
    thread: str
    fork: str


async def _build(url: str) -> Sample:
    store = await Store.open(url)
    try:
        t = await store.create_thread(kind="worker", messages=[NewMessage.user("run it")])
        call = ToolUseBlock(id="c1", name="bash", input={"command": "make noise"})
        await store.append(t.id, NewMessage(role="assistant", content=[call]))
        result = ToolResultBlock(tool_use_id="c1", content=WHOLE)
        (msg,) = await store.append(t.id, NewMessage(role="user", content=[result]))
        assert isinstance(msg.content[0], ToolResultBlock) and msg.content[0].stored is not None
        await store.append(t.id, NewMessage.assistant("that was a lot"))
        fork = await store.fork(t.id, at=3)
        return Sample(url, t.id, fork.id)
    finally:
        await store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sample(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sample]:
    if request.param == "sqlite":
        yield asyncio.run(_build(str(tmp_path / "threads.db")))
        return
    pg.require()
    db = pg.create_database_sync(pg.new_name("read"))
    try:
        yield asyncio.run(_build(db.url))
    finally:
        pg.drop_database_sync(db.name)


def _raw_output(stdout: str) -> str:
    """The tool output in ``show --raw`` text: what follows the result's header line."""
    header = re.search(r"← bash · ok · [\d,]+ lines · ([\d,]+) chars\n", stdout)
    assert header is not None, stdout[:500]
    assert header.group(1) == f"{len(WHOLE):,}"
    return stdout[header.end() :].split("\n#4 assistant", 1)[0]


def test_show_raw_prints_the_whole_output_for_the_thread_and_its_fork(sample: Sample) -> None:
    for ref in (f"T-{sample.thread}", f"T-{sample.fork}#3"):
        res = invoke("show", ref, "--raw", db=sample.url)
        assert res.exit_code == 0, res.output
        assert _raw_output(res.stdout) == WHOLE + "\n"
    # without --raw: the preview (capped again), its header line giving the whole size
    brief = invoke("show", f"T-{sample.thread}#3", "--tools", db=sample.url)
    assert f"← bash · ok · {len(WHOLE):,} chars, stored apart" in brief.stdout
    assert "LAST-LINE" in brief.stdout


def _cli(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "--db", db, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=300,
        check=False,
    )


def test_show_json_raw_gives_the_whole_output_as_show_raw_does(sample: Sample) -> None:
    """``show --json --raw`` (issue 23 item 9), through the real command: the output stored
    apart is whole in the document, its ``stored`` entry kept; without --raw, its preview."""
    for ref in (f"T-{sample.thread}", f"T-{sample.fork}#3"):
        res = _cli("--json", "show", ref, "--raw", db=sample.url)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        (msg,) = [m for m in doc["messages"] if m["seq"] == 3]
        block = msg["content"][0]
        assert block["content"] == WHOLE
        assert block["stored"]["chars"] == len(WHOLE)
    preview = json.loads(_cli("--json", "show", f"T-{sample.thread}#3", db=sample.url).stdout)
    block = preview["messages"][0]["content"][0]
    assert block["stored"]["chars"] == len(WHOLE) and len(block["content"]) < INLINE_LIMIT
    # --redact masks inside the whole output too, as the text does
    masked = json.loads(
        _cli("--json", "show", f"T-{sample.thread}#3", "--raw", "--redact", db=sample.url).stdout
    )
    assert masked["messages"][0]["content"][0]["content"] == redact(WHOLE)


def test_export_jsonl_holds_the_whole_output_and_imports_back_into_the_same_transcript(
    sample: Sample, tmp_path: Path
) -> None:
    res = invoke("export", f"T-{sample.thread}", db=sample.url)
    assert res.exit_code == 0
    lines = res.stdout.split("\n")
    inline = NewMessage(role="user", content=[ToolResultBlock(tool_use_id="c1", content=WHOLE)])
    assert lines[2] == transcript_line(inline)
    assert json.loads(lines[2])["content"][0]["content"] == WHOLE
    path = tmp_path / "t.jsonl"
    path.write_text(res.stdout, encoding="utf-8")
    imported = json_out(invoke("--json", "import", str(path), db=sample.url))
    again = invoke("export", imported["ref"], db=sample.url)
    assert again.stdout == res.stdout  # the round trip is exact
    as_json = json_out(invoke("--json", "export", f"T-{sample.thread}", db=sample.url))
    assert as_json["text"] == res.stdout


def test_export_md_fences_the_whole_output_past_its_longest_backtick_run(sample: Sample) -> None:
    res = invoke("export", f"T-{sample.thread}", "--format", "md", db=sample.url)
    assert res.exit_code == 0
    fence = "`" * 8
    body = res.stdout.split(f"**← `bash`** ok\n\n{fence}text\n", 1)[1]
    assert body.startswith(WHOLE + f"\n{fence}\n")


def test_redact_masks_secrets_in_the_stored_chunks_even_across_a_chunk_boundary(
    sample: Sample,
) -> None:
    masked = redact(WHOLE)  # exactly what inline text gets
    assert SECRET not in masked and "sk-ant-…[REDACTED]" in masked
    shown = invoke("show", f"T-{sample.thread}", "--raw", "--redact", db=sample.url)
    assert SECRET not in shown.stdout
    assert _raw_output(shown.stdout) == masked + "\n"
    exported = invoke("export", f"T-{sample.thread}", "--redact", db=sample.url)
    assert SECRET not in exported.stdout
    assert json.loads(exported.stdout.split("\n")[2])["content"][0]["content"] == masked
    # the record itself keeps it, as for inline output
    assert SECRET in invoke("export", f"T-{sample.thread}", db=sample.url).stdout


async def test_read_thread_pages_through_the_whole_output_by_max_chars(sample: Sample) -> None:
    store = await Store.open(sample.url)
    try:
        for mode, prefix in (
            ("tool_outputs", f"--- T-{sample.thread}#3 tool outputs\n[c1]\n"),
            ("messages", f"--- T-{sample.thread}#3 user\n← result:\n"),
        ):
            ref: str | None = f"T-{sample.thread}#3-"
            bodies: list[str] = []
            refs: list[str] = []
            while ref is not None and "#4" not in ref:
                page = await read_page(store, ref, mode=mode, max_chars=100_000)  # type: ignore[arg-type]
                assert len(page.text) <= 100_000
                lines = page.text.split("\n")
                assert lines[0].startswith(f"T-{sample.thread}#3 of 4 messages: characters ")
                bodies.append("\n".join(lines[1:-1]))
                ref = page.next_ref
                if ref is not None:
                    refs.append(ref)
            assert "".join(bodies) == prefix + WHOLE
            assert len(bodies) == -(-len(prefix + WHOLE) // 99_700)
            assert refs[0] == f"T-{sample.thread}#3-@99700"
            assert refs[-1] == f"T-{sample.thread}#4-"  # then on to the next message
        # a single-message ref pages within it and ends there
        page = await read_page(store, f"T-{sample.thread}#3@{len(WHOLE)}", mode="tool_outputs")
        assert page.next_ref is None and page.text.endswith("(end of range)")
        # overview names the whole size
        over = await read_page(store, f"T-{sample.thread}", mode="overview")
        assert f"{len(WHOLE):,} chars, stored apart" in over.text
    finally:
        await store.close()


async def test_a_bad_character_offset_is_a_read_error_naming_the_ref(sample: Sample) -> None:
    from orchestrator.errors import ReadError

    store = await Store.open(sample.url)
    try:
        for ref, needle in (
            (f"T-{sample.thread}#3@x1", "after '@' comes a character offset"),
            (f"T-{sample.thread}@5", "after '@' comes a character offset"),
        ):
            with pytest.raises(ReadError, match=needle):
                await read_page(store, ref, mode="tool_outputs")
        # an offset reads on in any mode, into what that mode shows of the message: where it
        # shows nothing, there is nothing to read on from
        with pytest.raises(ReadError, match=r"grep shows nothing of T-.*#3 to read on from"):
            await read_page(store, f"T-{sample.thread}#3@5", mode="grep", pattern="zqzqzq")
    finally:
        await store.close()


async def test_a_reader_confined_to_the_thread_follows_its_offset_page_refs(sample: Sample) -> None:
    """A reader thread may read only the thread it was asked about; the next-page refs inside a
    huge message (``T-…#3-@99700``) name that thread too and must be accepted."""
    from types import SimpleNamespace
    from typing import Any, cast

    from orchestrator.runtime.lead_tools import ReadThreadInput, ReadThreadTool

    store = await Store.open(sample.url)
    try:
        rt = cast(Any, SimpleNamespace(store=store))
        tool = ReadThreadTool(rt, only=sample.thread)
        ctx = cast(Any, None)
        first = await tool.run(
            ReadThreadInput(ref=f"T-{sample.thread}#3-", mode="tool_outputs", max_chars=100_000),
            ctx,
        )
        assert f"T-{sample.thread}#3-@99700" in first.text
        second = await tool.run(
            ReadThreadInput(ref=f"T-{sample.thread}#3-@99700", mode="tool_outputs"), ctx
        )
        assert not second.is_error, second.text
        assert second.text.split("\n", 1)[0].startswith(f"T-{sample.thread}#3 of 4 messages")
    finally:
        await store.close()
