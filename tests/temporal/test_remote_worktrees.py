"""Worktree isolation across hosts through Temporal (SPEC §Scale-out, ``[job] remote``): two
``threadloom worker`` processes with their own homes and working directories (each its own
mirror of the remote), a bare repository in ``tmp_path`` as the remote, PostgreSQL, the
Temporal dev server.

A job of two tasks runs one task on each host (each blocks until both have started, and each
host has one slot); each worker edits files in a worktree of its host's mirror; its branch and
checkpoints land in the remote; ``diff`` and ``merge`` from the lead's repository see both
workers' changes; with the first host stopped, a fork of its worker at an early message runs on
the other host and finds the files of that checkpoint."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from store import Store
from tests.e2e.conftest import bash, submit
from tests.orchestrator.test_worktrees import git, read, write
from tests.temporal.conftest import Cluster
from tests.temporal.test_scale_out import _read, _wait

MERGED = "threadloom/{job}/merged"


def _gate(root: Path, task: str) -> dict[str, Any]:
    """A bash turn that says it started and waits until the test lets every worker go."""
    return bash(f"touch {root}/started-{task}; while [ ! -e {root}/go ]; do sleep 0.05; done")


def _job(cluster: Cluster, remote: Path) -> Path:
    root = cluster.root
    a = [write("a.txt", "a v1\n"), _gate(root, "a"), write("a.txt", "a v2\n"), submit("a done")]
    b = [write("b.txt", "b\n"), _gate(root, "b"), submit("b done")]
    path = cluster.job(
        "remote",
        [
            {"match": "Job: remote", "turns": [{"text": "both merged"}]},
            {"match": "(?m)^Task a:", "turns": a},
            {"match": "(?m)^Task b:", "turns": b},
            {"match": "try again", "turns": [read("a.txt"), submit("fork read")]},
        ],
        [{"id": "a", "title": "A", "prompt": "a"}, {"id": "b", "title": "B", "prompt": "b"}],
    )
    text = path.read_text().replace(
        "[job]\n", f'[job]\nisolation = "worktree"\nremote = "{remote.as_uri()}"\n', 1
    )
    path.write_text(text)
    return path


def _repo(ws: Path) -> None:
    git(ws, "init", "-q", "-b", "main")
    (ws / "shared.txt").write_text("original\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "initial")


def _host_of(cluster: Cluster, workspace: str) -> str:
    rel = Path(workspace).relative_to(cluster.root / "hosts")
    return rel.parts[0]


def test_workers_on_two_hosts_push_to_the_remote_and_the_lead_diffs_merges_and_forks(
    cluster: Cluster, tmp_path: Path
) -> None:
    _repo(cluster.ws)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    hosts = {"a": cluster.add_host("a", slots=1), "b": cluster.add_host("b", slots=1)}
    root = cluster.root
    for name in hosts:  # both polling before the job starts: one slot each takes one task
        log = root / "hosts" / name / "worker.log"
        _wait(lambda log=log: "temporal.worker_ready" in log.read_text(), f"host {name}", 120)
    lead = cluster.start("--json", "run", str(_job(cluster, remote)))
    _wait(lambda: (root / "started-a").exists() and (root / "started-b").exists(), "both", 120)
    (root / "go").touch()
    out, err = lead.communicate(timeout=120)
    assert lead.returncode == 0, err
    assert '"both merged"' in out

    rows = cluster.json("ls", "--kind", "worker")
    assert len(rows) == 2 and all(r["status"] == "done" for r in rows)

    async def threads(store: Store) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for t in await store.list_threads(kind="worker"):
            out[str((t.task or {})["id"])] = (t, await store.checkpoints.of_thread(t.id))
        return out

    workers = _read(cluster, threads)
    a, a_cps = workers["a"]
    b, b_cps = workers["b"]
    job = a.job_id
    # one task on each host, each in a worktree of that host's own mirror
    ran_on = {task: _host_of(cluster, t.task["workspace"]) for task, (t, _) in workers.items()}
    assert sorted(ran_on.values()) == ["a", "b"], ran_on
    for task, (t, _) in workers.items():
        mirrors = cluster.root / "hosts" / ran_on[task] / ".threadloom" / "mirrors"
        assert Path(t.task["workspace"]).is_relative_to(mirrors)
    # the branches and every checkpoint the store names are on the remote
    there = dict(
        line.split()[::-1]
        for line in git(remote, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
    )
    assert f"refs/heads/threadloom/{job}/a" in there and f"refs/heads/threadloom/{job}/b" in there
    assert [s for s, _ in a_cps] == [3, 7] and [s for s, _ in b_cps] == [3]
    for t, cps in ((a, a_cps), (b, b_cps)):
        for seq, commit in cps:
            assert there[f"refs/threadloom/jobs/{job}/checkpoints/{t.id}/{seq}"] == commit
    # the lead's repository had no worker worktree; diff and merge fetch first
    assert git(cluster.ws, "worktree", "list").count("\n") == 1
    diff = cluster.json("diff", a.ref)
    assert "+a v2" in diff["diff"]
    assert "+a v1" in cluster.json("diff", f"{a.ref}#3")["diff"]
    assert "+b" in cluster.json("diff", b.ref)["diff"]
    merged = cluster.json("merge", a.ref, b.ref)
    assert not merged["conflicts"] and len(merged["merged"]) == 2
    assert git(cluster.ws, "show", f"{MERGED.format(job=job)}:a.txt") == "a v2\n"
    assert git(cluster.ws, "show", f"{MERGED.format(job=job)}:b.txt") == "b\n"
    assert git(cluster.ws, "status", "--porcelain") == ""

    # the host that ran a stops; a fork of a at #3 runs on the other and finds a's files of then
    gone = ran_on["a"]
    hosts[gone].send_signal(2)
    hosts[gone].wait(30)
    fork = cluster.json("fork", f"{a.ref}#3", "try again")
    assert fork["status"] == "done", fork
    shown = cluster.json("show", fork["ref"])
    reads = [
        b_["content"]
        for m in shown["messages"][3:]
        for b_ in m["content"]
        if b_.get("type") == "tool_result"
    ]
    assert reads and "a v1" in str(reads[0])

    async def fork_ws(store: Store) -> str:
        return str((await store.get_thread(fork["ref"][2:])).task["workspace"])  # type: ignore[index]

    assert _host_of(cluster, _read(cluster, fork_ws)) != gone
