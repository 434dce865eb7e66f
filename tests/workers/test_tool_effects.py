"""What a tool call did to the workspace (``store.Effects``): bash records its exit status and
the paths it changed, leaving out what git would ignore; write_file and edit_file record the
path they wrote; the record is stored with the tool result and never sent to a model."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from store import Change, Effects, Store, ToolResultBlock
from tests.workers.test_loop import new_worker, run, submit
from workers import ModelRequest, ModelResponse
from workers.providers import FunctionModel, tool_response
from workers.tools import BashTool, EditFileTool, ToolContext, WriteFileTool
from workers.tools._changes import changed_paths, take_snapshot


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


async def bash(ws: Path, command: str, **ctx: object) -> Effects:
    out = await BashTool().invoke({"command": command}, ToolContext(workspace=ws, **ctx))  # type: ignore[arg-type]
    assert out.effects is not None, out
    return out.effects


def changes(*pairs: tuple[str, str]) -> list[Change]:
    return [Change(path=p, action=a) for p, a in pairs]  # type: ignore[arg-type]


async def test_bash_records_its_exit_status_and_each_path_it_added_modified_or_deleted(
    ws: Path,
) -> None:
    (ws / "keep.py").write_text("x = 1\n")
    (ws / "old.txt").write_text("old\n")
    (ws / "same.txt").write_text("same\n")
    done = await bash(
        ws, "echo 'x = 2' >> keep.py; rm old.txt; mkdir -p d/e; echo n > d/e/new; exit 3"
    )
    assert done.exit_code == 3 and done.complete
    assert done.changed == changes(
        ("d/e/new", "added"), ("keep.py", "modified"), ("old.txt", "deleted")
    )
    nothing = await bash(ws, "cat same.txt && ls")
    assert nothing == Effects(exit_code=0, changed=[], complete=True)


async def test_bash_leaves_out_what_git_would_ignore_and_python_caches(ws: Path) -> None:
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("local.tmp\n")
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "exclude").write_text("secret.txt\n")
    done = await bash(
        ws,
        "mkdir -p build pkg/__pycache__ && echo o > build/out && echo l > a.log"
        " && echo k > keep.log && echo t > sub/local.tmp && echo s > secret.txt"
        " && echo c > pkg/__pycache__/m.cpython-311.pyc && echo p > pkg/m.pyc"
        " && echo r > pkg/real.py && git add -A >/dev/null",
    )
    assert done.changed == changes(("keep.log", "added"), ("pkg/real.py", "added"))


async def test_bash_in_a_subdirectory_of_a_repository_honours_the_rules_above_it(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    ws = repo / "pkg"
    ws.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("*.out\n/pkg/gen/\n/other/\n")
    done = await bash(ws, "mkdir gen other && echo 1 > a.out && echo 2 > gen/x && echo 3 > other/y")
    assert done.changed == changes(("other/y", "added"))


async def test_a_command_that_times_out_has_no_exit_status_and_keeps_what_it_changed(
    ws: Path,
) -> None:
    out = await BashTool().invoke(
        {"command": "echo a > made && sleep 30", "timeout_s": 1}, ToolContext(workspace=ws)
    )
    assert out.is_error and out.effects is not None
    assert out.effects.exit_code is None
    assert out.effects.changed == changes(("made", "added"))


async def test_paths_no_tool_may_reach_are_never_recorded(ws: Path) -> None:
    db = ws / "threads.db"
    db.write_text("")
    done = await bash(ws, "echo x >> threads.db && echo y > mine", hidden=(db,))
    assert done.changed == changes(("mine", "added"))


def test_a_workspace_larger_than_the_walk_is_marked_incomplete(ws: Path) -> None:
    for i in range(30):
        (ws / f"f{i}").write_text("")
    cut = take_snapshot(ws, limit=10)
    whole = take_snapshot(ws)
    assert not cut.complete and whole.complete and len(whole.files) == 30
    assert changed_paths(whole, whole) == []


async def test_the_file_tools_record_the_path_they_wrote(ws: Path) -> None:
    ctx = ToolContext(workspace=ws)
    made = await WriteFileTool().invoke({"path": "a/b.py", "content": "x = 1\n"}, ctx)
    again = await WriteFileTool().invoke({"path": "a/b.py", "content": "x = 2\n"}, ctx)
    edited = await EditFileTool().invoke({"path": "a/b.py", "old": "2", "new": "3"}, ctx)
    refused = await EditFileTool().invoke({"path": "a/b.py", "old": "nope", "new": "3"}, ctx)
    assert made.effects == Effects(changed=changes(("a/b.py", "added")))
    assert again.effects == Effects(changed=changes(("a/b.py", "modified")))
    assert edited.effects == Effects(changed=changes(("a/b.py", "modified")))
    assert refused.is_error and refused.effects is None


async def test_effects_are_stored_with_the_result_and_never_sent_to_the_model(
    store: Store, ws: Path
) -> None:
    requests: list[ModelRequest] = []
    turns = [
        tool_response(("bash", {"command": "echo hi > f.txt; exit 1"})),
        submit(),
    ]

    def reply(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return turns[min(sum(m.role == "assistant" for m in request.messages), 1)]

    tid = await new_worker(store)
    outcome = await run(store, tid, FunctionModel(reply), ws)
    assert outcome.result is not None
    blocks = [b for m in await store.messages(tid) for b in m.content]
    stored = [b for b in blocks if isinstance(b, ToolResultBlock) and b.effects is not None]
    assert stored[0].effects == Effects(exit_code=1, changed=changes(("f.txt", "added")))
    sent = json.dumps([m.model_dump(mode="json") for m in requests[-1].messages])
    assert "f.txt" not in sent.replace("echo hi > f.txt; exit 1", "")
    assert '"effects": null' in sent or '"effects"' not in sent
    for m in requests[-1].messages:
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                assert b.effects is None


async def test_a_command_beside_another_call_in_the_same_workspace_is_marked_concurrent(
    ws: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    ctx = ToolContext(workspace=ws)
    started = ws / "started"
    slow = BashTool().invoke(
        {"command": f"touch {started} && while [ ! -e go ]; do sleep 0.01; done"}, ctx
    )
    task = asyncio.ensure_future(slow)
    async with asyncio.timeout(30):
        while not started.exists():  # the slow command is running: its window is open
            await asyncio.sleep(0.01)
    alone = await bash(other, "echo x > y")  # another workspace: not beside it
    written = await WriteFileTool().invoke({"path": "go", "content": ""}, ctx)
    out = await task
    assert out.effects is not None and out.effects.concurrent
    assert written.effects is not None
    assert not alone.concurrent
    assert not (await bash(ws, "true")).concurrent  # the window closed with the command
