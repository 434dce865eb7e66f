"""SIGKILL of a process running a thread mid-tool, then resume in another process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from store import Kind, NewMessage, Status, Store, ToolResultBlock, ToolUseBlock
from workers import INTERRUPTED_RESULT, SUBMIT_RESULT, build_tools, run_thread
from workers.providers import ScriptedModel

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from store import Store
    from workers import build_tools, run_thread
    from workers.providers import ScriptedModel

    async def main(db, tid, script, ws):
        store = await Store.open(db)
        await run_thread(store, tid, model=ScriptedModel(script), tools=build_tools(["bash"]),
                         workspace=Path(ws))

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_sigkill_mid_tool_then_resume_answers_the_orphan_once_and_never_reruns_it(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = str(tmp_path / "threads.db")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "match": "count the runs",
                        "turns": [
                            {
                                "tool_calls": [
                                    {
                                        "name": "bash",
                                        "input": {"command": "echo ran >> runs.log; sleep 20"},
                                    }
                                ]
                            },
                            {
                                "tool_calls": [
                                    {
                                        "name": SUBMIT_RESULT,
                                        "input": {
                                            "status": "partial",
                                            "summary": "the tool was interrupted",
                                        },
                                    }
                                ]
                            },
                        ],
                    }
                ]
            }
        )
    )
    store = await Store.open(db)
    info = await store.create_thread(
        kind=Kind.WORKER,
        tools=["bash", SUBMIT_RESULT],
        system_prompt="s",
        status=Status.QUEUED,
        messages=[NewMessage.user("count the runs")],
    )
    child = subprocess.Popen([sys.executable, "-c", CHILD, db, info.id, str(script), str(ws)])
    log = ws / "runs.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text()):
        assert child.poll() is None, "the child ended before running the tool"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    crashed = await store.get_thread(info.id)
    # the dead runner could not say so itself; its lease names a pid that is gone, so every
    # reader sees the thread interrupted at once
    assert crashed.status == Status.INTERRUPTED
    outcome = await run_thread(
        store, info.id, model=ScriptedModel(script), tools=build_tools(["bash"]), workspace=ws
    )
    assert outcome.status == Status.DONE
    assert outcome.result is not None and outcome.result.status == "partial"
    assert log.read_text() == "ran\n"  # never re-run
    msgs = await store.messages(info.id)
    answers = [b for m in msgs for b in m.content if isinstance(b, ToolResultBlock)]
    assert answers[0].text == INTERRUPTED_RESULT
    assert len([a for a in answers if a.text == INTERRUPTED_RESULT]) == 1
    await store.close()


async def _died_after(tmp_path: Path, last: list[NewMessage]) -> tuple[Store, str, Path]:
    """A worker whose run died (its lease gone) with ``last`` its newest stored messages, and a
    script that answers any further request with a turn no test wants."""
    script = tmp_path / "never.json"
    never = {"text": "a model call the recovery should not make"}
    script.write_text(json.dumps({"rules": [{"match": ".", "turns": [never]}]}))
    store = await Store.open(str(tmp_path / "threads.db"))
    info = await store.create_thread(
        kind=Kind.WORKER,
        tools=["bash", SUBMIT_RESULT],
        system_prompt="s",
        status=Status.INTERRUPTED,
        messages=[NewMessage.user("do it"), *last],
    )
    return store, info.id, script


async def test_a_worker_that_died_after_its_submission_was_accepted_ends_with_it(
    tmp_path: Path,
) -> None:
    submission = {"status": "done", "summary": "the counts are 3 and 4"}
    store, tid, script = await _died_after(
        tmp_path,
        [
            NewMessage(
                role="assistant",
                content=[ToolUseBlock(id="toolu_1", name=SUBMIT_RESULT, input=submission)],
            ),
            NewMessage(
                role="user",
                content=[
                    ToolResultBlock(
                        tool_use_id="toolu_1", content="Result recorded. Your task is over."
                    )
                ],
            ),
        ],
    )
    out = await run_thread(
        store, tid, model=ScriptedModel(script), tools=build_tools(["bash"]), workspace=tmp_path
    )
    info = await store.get_thread(tid)
    assert out.status == Status.DONE and out.turns == 0
    assert info.result is not None and info.result.summary == "the counts are 3 and 4"
    assert info.head_seq == 3  # no model call, nothing appended
    await store.close()


async def test_a_worker_that_died_after_its_last_words_ends_with_them_as_its_partial_result(
    tmp_path: Path,
) -> None:
    store, tid, script = await _died_after(tmp_path, [NewMessage.assistant("I could not finish")])
    out = await run_thread(
        store, tid, model=ScriptedModel(script), tools=build_tools(["bash"]), workspace=tmp_path
    )
    info = await store.get_thread(tid)
    assert out.status == Status.DONE and info.result is not None
    assert (info.result.status, info.result.summary) == ("partial", "I could not finish")
    await store.close()
