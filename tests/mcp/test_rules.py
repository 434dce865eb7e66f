"""The rules a client's calls are held to, through the SDK's client in-process on both of its
modes (the 2025-11-25 handshake, ``legacy``; 2026-07-28, its default ``auto``): roots confine
every run a client starts; a client that declares roots and cannot give them gets none; a
call refused for its model stores nothing; one lead per client and workspace; task ids unique
in a job across calls; descriptions a model reads as text; ``list_threads`` pages on."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ListRootsResult, Root
from pydantic import FileUrl

from orchestrator import JobSpec
from orchestrator.mcp import Threadloom
from store import Kind, Status
from workers.tools import TOOL_REGISTRY

from .conftest import Serve, Setup, client, data, text

MODES = ["legacy", "auto"]


def task(tid: str | None = None, **more: Any) -> dict[str, Any]:
    return {**({"id": tid} if tid else {}), "title": f"task {tid}", "prompt": "p", **more}


def rooted(*dirs: Path) -> Any:
    async def list_roots(_ctx: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl(d.as_uri())) for d in dirs])

    return list_roots


async def job_outside(app: Threadloom, setup: Setup, outside: Path) -> tuple[str, str]:
    """A job the server's user ran in ``outside``: its lead and worker refs."""
    spec = JobSpec(
        name="scripted-job",
        goal="g",
        workspace=str(outside),
        model=setup.model,
        tasks=[{"id": "o", "title": "o", "prompt": "p"}],
    )
    done = await app.orch.run_job(spec)
    assert done.status == Status.DONE
    return done.lead, done.workers[0].ref


@pytest.mark.parametrize("mode", MODES)
async def test_roots_confine_dispatch_run_job_resume_and_fork_on_either_mode(
    serve: Serve, setup: Setup, tmp_path: Path, mode: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with serve(cwd=tmp_path) as app:
        lead, worker = await job_outside(app, setup, outside)
        before = len(await app.orch.store.list_threads())
        async with client(app, mode=mode, list_roots_callback=rooted(setup.ws)) as c:
            for tool, args in (
                ("dispatch", {"tasks": [task("a")], "workspace": str(outside)}),
                ("run_job", {"name": "n", "goal": "g", "workspace": str(outside)}),
                ("resume_thread", {"ref": worker, "message": "again"}),
                ("resume_thread", {"ref": lead, "message": "again"}),
                ("fork_thread", {"ref": worker, "message": "again"}),
                ("fork_thread", {"ref": worker, "message": "again", "at": 1, "no_run": True}),
            ):
                refused = await c.call_tool(tool, args)
                assert refused.is_error, (tool, text(refused))
                assert "outside the client's roots" in text(refused), text(refused)
            assert len(await app.orch.store.list_threads()) == before  # nothing stored
            ok = data(await c.call_tool("dispatch", {"tasks": [task("b")], "wait_s": 20}))
            info = (await app.orch.store.resolve(ok["workers"][0]["ref"])).thread
            assert (info.task or {})["workspace"] == str(setup.ws)  # the first root


@pytest.mark.parametrize("mode", MODES)
async def test_a_confined_client_cannot_turn_the_sandbox_off(
    serve: Serve, setup: Setup, mode: str
) -> None:
    async with serve() as app, client(app, mode=mode, list_roots_callback=rooted(setup.ws)) as c:
        for args in ({"sandbox": "none"}, {"worker": {"sandbox": "none"}}):
            refused = await c.call_tool("run_job", {"name": "n", "goal": "g", **args})
            assert refused.is_error and "sandbox 'none'" in text(refused)
        assert await app.orch.store.list_threads() == []
    async with serve() as app, client(app, mode=mode) as c:  # no roots: not confined
        ok = await c.call_tool("run_job", {"name": "n", "goal": "g", "sandbox": "none"})
        assert not ok.is_error, text(ok)


async def test_a_client_that_declares_roots_and_cannot_list_them_starts_nothing(
    serve: Serve,
) -> None:
    async def broken(_ctx: Any) -> ListRootsResult:
        raise RuntimeError("no roots today")

    async with serve() as app, client(app, mode="legacy", list_roots_callback=broken) as c:
        refused = await c.call_tool("dispatch", {"tasks": [task("a")]})
        assert refused.is_error
        assert "declares roots but did not list them" in text(refused)
        assert await app.orch.store.list_threads() == []


@pytest.mark.parametrize("mode", MODES)
async def test_roots_none_of_which_is_a_local_directory_confine_the_client_to_nothing(
    serve: Serve, mode: str
) -> None:
    async def remote(_ctx: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl("file://elsewhere.example/srv/repo"))])

    async with serve() as app, client(app, mode=mode, list_roots_callback=remote) as c:
        refused = await c.call_tool("dispatch", {"tasks": [task("a")]})
        assert refused.is_error and "none of the client's roots" in text(refused)
        assert await app.orch.store.list_threads() == []


async def test_a_dispatch_refused_for_a_missing_key_stores_nothing(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    async with serve(model="anthropic:claude-sonnet-4-5") as app, client(app) as c:
        for tool in ("dispatch", "ask_thread"):
            args = (
                {"tasks": [task("a")]} if tool == "dispatch" else {"ref": "T-0000", "question": "q"}
            )
            refused = await c.call_tool(tool, args)
            assert refused.is_error
        assert "ANTHROPIC_API_KEY" in text(await c.call_tool("dispatch", {"tasks": [task("a")]}))
        assert await app.orch.store.list_threads() == []  # no lead either


async def test_one_lead_per_client_and_workspace_whatever_the_server_flags(
    serve: Serve, setup: Setup
) -> None:
    async with serve() as app, client(app, name="Codex") as c:
        first = data(await c.call_tool("dispatch", {"tasks": [task()], "wait_s": 20}))
    async with serve(budget_tokens=10**6, max_parallel=2, worker_model=setup.model) as app:
        async with client(app, name="Codex") as c:
            second = data(await c.call_tool("dispatch", {"tasks": [task()], "wait_s": 20}))
        leads = await app.orch.store.list_threads(kind=Kind.LEAD)
        assert [t.ref for t in leads] == [first["job"]] == [second["job"]]
        job = (leads[0].task or {})["job"]
        assert job["budget_tokens"] == 10**6 and job["max_parallel"] == 2  # the flags in force
    assert [w["task"] for w in first["workers"] + second["workers"]] == ["task-1", "task-2"]


async def test_a_task_id_the_job_used_is_refused_by_a_later_dispatch_with_nothing_stored(
    serve: Serve,
) -> None:
    async with serve() as app, client(app) as c:
        data(await c.call_tool("dispatch", {"tasks": [task("a")], "wait_s": 20}))
        before = len(await app.orch.store.list_threads())
        again = await c.call_tool("dispatch", {"tasks": [task("b"), task("a")]})
        assert again.is_error
        assert "task id 'a' is used in this job already" in text(again)
        assert len(await app.orch.store.list_threads()) == before


def descriptions(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        found = [schema["description"]] if isinstance(schema.get("description"), str) else []
        return found + [d for v in schema.values() for d in descriptions(v)]
    if isinstance(schema, list):
        return [d for v in schema for d in descriptions(v)]
    return []


async def test_the_tool_descriptions_read_as_text_and_say_what_each_field_is(
    serve: Serve,
) -> None:
    async with serve() as app, client(app) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    for name, t in tools.items():
        for said in [t.description or "", *descriptions(t.input_schema)]:
            assert said and "\n" not in said and "  " not in said and "``" not in said, (name, said)
    run_job = tools["run_job"].input_schema
    for field, prop in run_job["properties"].items():
        assert prop.get("description"), f"run_job.{field} has no description"
    model, worker_model = (
        run_job["properties"][k]["description"] for k in ("model", "worker_model")
    )
    assert model != worker_model
    assert "lead" in model and "workers'" in worker_model
    task_tools = run_job["$defs"]["TaskInput"]["properties"]["tools"]["description"]
    assert all(name in task_tools for name in TOOL_REGISTRY)
    assert "before" in tools["list_threads"].input_schema["properties"]


async def test_list_threads_pages_past_100_with_before(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        made = [
            (await app.orch.store.create_thread(kind=Kind.WORKER, title=f"t{i}")).ref
            for i in range(130)
        ]
        seen: list[str] = []
        before = None
        while True:
            args: dict[str, Any] = {"limit": 100, **({"before": before} if before else {})}
            page = data(await c.call_tool("list_threads", args))
            seen += [r["ref"] for r in page]
            if len(page) < 100:
                break
            before = page[-1]["ref"]
    assert seen == made[::-1]


async def test_a_confined_client_gets_worktree_isolation_only_of_a_repository_in_its_roots(
    serve: Serve, setup: Setup, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    sub = repo / "sub"
    sub.mkdir(parents=True)
    (sub / "f.txt").write_text("x\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    job = {"name": "scripted-job", "goal": "g", "isolation": "worktree", "wait_s": 20}
    task = {"id": "w", "title": "w", "prompt": "p"}
    async with serve(cwd=tmp_path) as app:
        async with client(app, list_roots_callback=rooted(sub)) as c:
            refused = await c.call_tool("run_job", {**job, "workspace": str(sub)})
            assert refused.is_error and "worktree isolation writes to" in text(refused)
            assert await app.orch.store.list_threads() == []
        async with client(app, list_roots_callback=rooted(repo)) as c:
            ok = await c.call_tool("run_job", {**job, "workspace": str(sub), "tasks": [task]})
            assert not ok.is_error and data(ok)["status"] == "done", text(ok)
