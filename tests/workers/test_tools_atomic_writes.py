"""write_file and edit_file replace a file atomically: a reader (another worker importing the
module, in a job without worktrees) sees the old contents or the new, never a part — seen once
in CI as a half-written module under load. Real files, a real concurrent reader process, and
the kept properties: the mode, the owner (as root), hard links, symlinks inside the workspace."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.tools import EditFileTool, ToolContext, WriteFileTool

OLD = "a" * 2_000_000
NEW = "b" * 2_000_000

READER = """
import sys, time
path, seen = sys.argv[1], set()
end = time.monotonic() + float(sys.argv[2])
torn = 0
while time.monotonic() < end:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        torn += 1
        continue
    if data not in (b"a" * 2_000_000, b"b" * 2_000_000):
        torn += 1
print(torn)
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


async def test_a_concurrent_reader_never_sees_a_part_of_a_write(ws: Path) -> None:
    target = ws / "mod.py"
    target.write_text(OLD)
    ctx = ToolContext(workspace=ws)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(target), "3"], stdout=subprocess.PIPE, text=True
    )
    writes = 0
    while reader.poll() is None:
        for content in (NEW, OLD):
            out = await WriteFileTool().invoke({"path": "mod.py", "content": content}, ctx)
            assert not out.is_error, out.text
            writes += 1
        await asyncio.sleep(0)
    torn = int(reader.communicate()[0])
    assert writes > 20
    assert torn == 0
    assert [p.name for p in ws.iterdir()] == ["mod.py"]  # no temporary file left behind


async def test_edit_file_is_atomic_too_and_keeps_mode_and_owner(ws: Path) -> None:
    target = ws / "run.sh"
    target.write_text("echo old\n")
    target.chmod(0o754)
    if os.geteuid() == 0:
        os.chown(target, 65534, 65534)
    inode = target.stat().st_ino
    ctx = ToolContext(workspace=ws)
    out = await EditFileTool().invoke({"path": "run.sh", "old": "old", "new": "new"}, ctx)
    assert not out.is_error, out.text
    after = target.stat()
    assert target.read_text() == "echo new\n"
    assert after.st_ino != inode  # replaced by rename, not rewritten in place
    assert after.st_mode & 0o777 == 0o754
    if os.geteuid() == 0:
        assert (after.st_uid, after.st_gid) == (65534, 65534)


async def test_a_hard_linked_file_is_rewritten_in_place_so_its_links_stay(ws: Path) -> None:
    target = ws / "a.txt"
    target.write_text("one\n")
    os.link(target, ws / "b.txt")
    ctx = ToolContext(workspace=ws)
    out = await WriteFileTool().invoke({"path": "a.txt", "content": "two\n"}, ctx)
    assert not out.is_error, out.text
    assert (ws / "b.txt").read_text() == "two\n"
    assert os.path.samefile(target, ws / "b.txt")


async def test_writing_through_a_symlink_inside_replaces_its_target_and_keeps_the_link(
    ws: Path,
) -> None:
    (ws / "real.py").write_text("x = 1\n")
    (ws / "alias.py").symlink_to("real.py")
    ctx = ToolContext(workspace=ws)
    out = await WriteFileTool().invoke({"path": "alias.py", "content": "x = 2\n"}, ctx)
    assert not out.is_error, out.text
    assert (ws / "alias.py").is_symlink()
    assert (ws / "real.py").read_text() == "x = 2\n"
    assert sorted(p.name for p in ws.iterdir()) == ["alias.py", "real.py"]
