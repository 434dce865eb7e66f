"""Worktree isolation benchmark (issue: a git worktree per worker). Prints one JSON document.

Checkpoint cost per changed turn on a repository of FILES files: in a worker's worktree, one
file is changed and ``Checkpointer`` commits it (``add -A``, ``write-tree``, ``rev-parse``,
``commit-tree``, one ``update-ref`` transaction for the branch and the checkpoint ref). The
baseline, measured in the same run on a twin worktree of the same repository, is
``git add -A && git commit -q -m …`` of the same change. Median of ROUNDS rounds each; the
ratio is checkpoint / git commit. Also reported: a no-change turn (what a turn that touched
nothing costs: it records nothing) and the one-time cost of creating a worktree.

Run: python tests/benchmarks/bench_worktrees.py [--files 5000 --rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.isolation.git import git_env
from orchestrator.isolation.worktrees import Checkpointer, add_worktree

IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


def sh(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=git_env(IDENTITY))


def make_repo(root: Path, files: int) -> None:
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    for i in range(files):
        d = root / f"pkg{i % 50:02d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:05d}.py").write_text(f"# module {i}\nVALUE = {i}\n" + "x = 1\n" * 20)
    sh(root, "add", "-A")
    sh(root, "commit", "-q", "-m", "initial")


async def bench(files: int, rounds: int) -> dict[str, Any]:
    os.environ.update(IDENTITY)
    with tempfile.TemporaryDirectory(prefix="threadloom-bench-wt-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, files)
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        wt_dir = repo / ".git" / "threadloom" / "worktrees"
        t0 = time.perf_counter()
        await add_worktree(repo, wt_dir / "ckpt", "bench/ckpt", head)
        create_s = time.perf_counter() - t0
        await add_worktree(repo, wt_dir / "plain", "bench/plain", head)
        ckpt_tree, plain_tree = wt_dir / "ckpt", wt_dir / "plain"
        cp = Checkpointer(ckpt_tree, thread_id="bench")
        target = Path("pkg07") / "mod00007.py"
        ours: list[float] = []
        theirs: list[float] = []
        idle: list[float] = []
        for r in range(rounds):
            # alternate the order so neither side always runs on a warmer cache
            for side in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):
                tree = ckpt_tree if side == "ours" else plain_tree
                (tree / target).write_text(f"# changed in round {r}\n")
                t = time.perf_counter()
                if side == "ours":
                    commit = await cp(r + 1)
                    assert commit is not None
                    ours.append(time.perf_counter() - t)
                else:
                    sh(tree, "add", "-A")
                    sh(tree, "commit", "-q", "-m", f"round {r}")
                    theirs.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert await cp(10_000 + r) is None
            idle.append(time.perf_counter() - t)
    med_ours, med_theirs = statistics.median(ours), statistics.median(theirs)
    return {
        "benchmark": "worktree checkpoint per changed turn",
        "files": files,
        "rounds": rounds,
        "checkpoint_ms_median": round(med_ours * 1000, 2),
        "git_add_commit_ms_median": round(med_theirs * 1000, 2),
        "ratio_checkpoint_to_git_commit": round(med_ours / med_theirs, 3),
        "unchanged_turn_ms_median": round(statistics.median(idle) * 1000, 2),
        "worktree_create_ms": round(create_s * 1000, 1),
        "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.files, args.rounds)), indent=2))


if __name__ == "__main__":
    main()
