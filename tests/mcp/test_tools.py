"""Every MCP tool, through the SDK's client against the server object (in-process), on a real
store and the scripted model: shapes, waits that never outlast wait_s, refs that outlive the
session, and bad arguments answered with one clear line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ListRootsResult, Root, TextResourceContents
from pydantic import FileUrl

from orchestrator import JobSpec, Orchestrator, parse_job
from orchestrator.errors import JobFileError
from orchestrator.mcp import Settings, Threadloom, _answers
from store import Kind, Status
from tests.fakes.chat_api import FakeChatAPI

from .conftest import Serve, Setup, client, data, text

SPEC_TOOLS = {
    "dispatch",
    "wait",
    "run_job",
    "read_thread",
    "search_threads",
    "ask_thread",
    "resume_thread",
    "fork_thread",
    "list_threads",
    "job_tree",
    "stats",
    "cancel",
}


def task(tid: str, prompt: str = "p") -> dict[str, Any]:
    return {"id": tid, "title": f"task {tid}", "prompt": prompt}


async def test_the_server_lists_exactly_the_spec_tools_each_with_a_schema(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        tools = (await c.list_tools()).tools
    assert {t.name for t in tools} == SPEC_TOOLS
    for t in tools:
        assert t.description and t.input_schema["type"] == "object", t.name
    dispatch = next(t for t in tools if t.name == "dispatch")
    assert dispatch.input_schema["required"] == ["tasks"]
    assert dispatch.input_schema["properties"]["wait_s"]["maximum"] == 50


async def test_dispatch_returns_results_under_a_lead_named_for_the_client(
    serve: Serve, setup: Setup
) -> None:
    async with serve() as app, client(app, name="Claude Code") as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("a"), task("b")], "wait_s": 20}))
        assert out["pending"] == []
        assert [w["task"] for w in out["workers"]] == ["a", "b"]
        assert all(w["status"] == "done" and w["result"]["summary"] == "ok" for w in out["workers"])
        # each result carries its check: a done with no tool call is unverified, index null
        for w in out["workers"]:
            (claim,) = w["result"]["check"]["claims"]
            assert w["result"]["check"]["verdict"] == "unverified"
            assert claim["kind"] == "status" and claim["index"] is None
            assert claim["reason"] == "status done, but the thread made no tool call"
        lead = (await app.orch.store.resolve(out["job"])).thread
        assert lead.kind == Kind.LEAD and lead.title == "mcp: Claude Code"
        assert lead.status == Status.IDLE  # never run by a model: the client's agent is the lead
        for w in out["workers"]:
            info = (await app.orch.store.resolve(w["ref"])).thread
            assert info.parent_id == lead.id and info.job_id == lead.id
            assert (info.task or {})["workspace"] == str(setup.ws)
        # a second dispatch from the same client in the same workspace joins the same job
        again = data(await c.call_tool("dispatch", {"tasks": [task("c")], "wait_s": 20}))
        assert again["job"] == out["job"]


async def test_a_slow_worker_is_pending_after_wait_s_and_wait_collects_it_with_progress(
    serve: Serve,
) -> None:
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async with serve() as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("slow")], "wait_s": 0.2}))
        (worker,) = out["workers"]
        assert out["pending"] == [worker["ref"]] and "result" not in worker
        assert worker["status"] in ("queued", "running")
        got = data(
            await c.call_tool(
                "wait", {"refs": out["pending"], "timeout_s": 30}, progress_callback=on_progress
            )
        )
    assert got["pending"] == []
    assert got["workers"][0]["result"]["summary"] == "slept"
    assert got["workers"][0]["result"]["check"] == {
        "verdict": "verified",
        "claims": [],
        "rounds": 1,
    }
    assert heard and heard[0][1] == 1  # heard while it waited: 0 of 1 ended
    assert all(m and "running" in m for _, _, m in heard)


async def test_wait_any_returns_when_the_first_ends_and_wait_never_outlasts_its_timeout(
    serve: Serve,
) -> None:
    async with serve() as app, client(app) as c:
        out = data(
            await c.call_tool("dispatch", {"tasks": [task("fast"), task("slow")], "wait_s": 0})
        )
        refs = [w["ref"] for w in out["workers"]]
        asked = {"refs": refs[::-1], "mode": "any", "timeout_s": 30}
        anyone = data(await c.call_tool("wait", asked))
        assert anyone["pending"] == [refs[1]]
        assert [w["ref"] for w in anyone["workers"]] == refs[::-1]  # in the order asked for
        ended = {w["ref"]: w for w in anyone["workers"]}
        assert ended[refs[0]]["status"] == "done" and "result" not in ended[refs[1]]
        short = data(await c.call_tool("wait", {"refs": [refs[1]], "timeout_s": 0}))
        assert short["pending"] == [refs[1]]


async def test_refs_outlive_the_session_and_the_server_process(serve: Serve, setup: Setup) -> None:
    async with serve() as app:
        async with client(app) as first:
            out = data(await first.call_tool("dispatch", {"tasks": [task("slow")], "wait_s": 0}))
        # another server over the same database (another process, say) waits on the same refs
        # while this one runs them: it reads the store until they end
        async with await Orchestrator.open(str(setup.db)) as orch2:
            other = Threadloom(orch2, Settings(cwd=setup.ws))
            async with client(other) as elsewhere:
                refused = await elsewhere.call_tool("cancel", {"ref": out["pending"][0]})
                assert refused.is_error and "run by another process" in text(refused)
                seen = data(
                    await elsewhere.call_tool("wait", {"refs": out["pending"], "timeout_s": 30})
                )
            await other.aclose()
        async with client(app) as second:  # a reconnect: a new session, the same refs
            got = data(await second.call_tool("wait", {"refs": out["pending"], "timeout_s": 0}))
    assert got["pending"] == [] and got["workers"][0]["status"] == "done"
    assert seen["workers"] == got["workers"]


async def test_read_thread_search_and_the_listing_tools_give_the_spec_shapes(
    serve: Serve,
) -> None:
    async with serve() as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("echo")], "wait_s": 20}))
        ref = out["workers"][0]["ref"]
        page = data(
            await c.call_tool("read_thread", {"ref": ref, "mode": "grep", "pattern": "needle"})
        )
        assert page["ref"] == ref and f"{ref}#3" in page["text"] and page["next"] is None
        small = data(await c.call_tool("read_thread", {"ref": ref, "max_chars": 500}))
        assert len(small["text"]) <= 500
        hits = data(await c.call_tool("search_threads", {"query": "needle-in-output"}))
        assert {h["ref"] for h in hits} == {f"{ref}#2", f"{ref}#3"}
        assert set(hits[0]) >= {"ref", "thread", "seq", "snippet"}
        listed = data(await c.call_tool("list_threads", {"job": out["job"]}))
        assert listed == await app.orch.list_threads(job=out["job"], limit=50)
        assert {r["ref"] for r in listed} == {out["job"], ref}
        tree = data(await c.call_tool("job_tree", {"ref": ref}))
        assert tree == await app.orch.tree(ref)
        stats = data(await c.call_tool("stats", {"ref": out["job"]}))
        assert stats == await app.orch.stats(out["job"])
        assert set(stats) >= {"threads", "total"}


async def test_ask_resume_fork_and_cancel(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("echo")], "wait_s": 20}))
        ref = out["workers"][0]["ref"]
        asked = data(await c.call_tool("ask_thread", {"ref": ref, "question": "what ran?"}))
        assert asked["reader"].startswith("T-") and f"{asked['reader']}#1" in asked["citations"]
        assert "T-zzzz#9 [not found]" in asked["answer"]
        resumed = data(await c.call_tool("resume_thread", {"ref": ref, "message": "do it again"}))
        assert resumed["ref"] == ref and resumed["status"] == "done"
        assert resumed["result"]["summary"] == "did it again"
        idle = data(
            await c.call_tool(
                "fork_thread",
                {"ref": ref, "message": "again, differently", "at": 3, "no_run": True},
            )
        )
        assert idle["status"] == "idle" and idle["forked_from"] == {"ref": ref, "at": 3}
        ran = data(await c.call_tool("fork_thread", {"ref": ref, "message": "again please"}))
        assert ran["status"] == "done" and ran["ref"] not in (ref, idle["ref"])
        slow = data(await c.call_tool("dispatch", {"tasks": [task("slow")], "wait_s": 0.5}))
        stopped = data(await c.call_tool("cancel", {"ref": slow["pending"][0]}))
        assert stopped["cancelled"][0]["status"] == "cancelled"
        # the client's own lead is not a thread to resume: its agent is the client
        refused = await c.call_tool("resume_thread", {"ref": out["job"], "message": "go"})
        assert refused.is_error and "lead of an MCP client's job" in text(refused)


async def test_run_job_runs_a_job_file_worth_of_arguments(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        args = {"name": "scripted-job", "goal": "g", "tasks": [task("a")], "wait_s": 30}
        out = data(await c.call_tool("run_job", args))
        assert out["status"] == "done" and out["report"] == "the job's report"
        assert out["job"] == out["lead"]
        tree = await app.orch.tree(out["job"])
        assert tree  # the job is a job like any other
        pending = data(await c.call_tool("run_job", {**args, "tasks": [task("slow")], "wait_s": 0}))
        assert pending["status"] in ("queued", "running") and "report" not in pending
        got = data(await c.call_tool("wait", {"refs": [pending["job"]], "timeout_s": 30}))
        assert got["workers"][0]["result"]["report"] == "the job's report"


async def test_budget_tokens_bound_the_clients_job(serve: Serve) -> None:
    async with serve(budget_tokens=1) as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("echo")], "wait_s": 20}))
    (worker,) = out["workers"]
    assert worker["status"] == "failed"
    assert worker["error"].startswith("budget exhausted: the job has used")


async def test_models_come_from_the_call_else_the_servers_worker_model(
    serve: Serve, setup: Setup
) -> None:
    other = setup.root / "other.json"
    other.write_text(setup.script.read_text())
    settings = {"model": "anthropic:claude-sonnet-4-5", "worker_model": setup.model}
    async with serve(**settings, allow_scripted=True) as app:
        async with client(app) as c:
            default = data(await c.call_tool("dispatch", {"tasks": [task("a")], "wait_s": 20}))
            chosen = data(
                await c.call_tool(
                    "dispatch", {"tasks": [task("b")], "model": f"scripted:{other}", "wait_s": 20}
                )
            )
        store = app.orch.store
        first = (await store.resolve(default["workers"][0]["ref"])).thread
        second = (await store.resolve(chosen["workers"][0]["ref"])).thread
    assert first.model == setup.model and second.model == f"scripted:{other}"
    assert default["workers"][0]["status"] == chosen["workers"][0]["status"] == "done"


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("wait", {"refs": ["T-0000nothere"]}, "T-0000nothere"),
        ("wait", {"refs": ["not a ref"]}, "not a ref"),
        ("wait", {"refs": []}, "refs"),
        ("dispatch", {"tasks": [task("a")], "wait_s": 99}, "wait_s"),
        ("dispatch", {"tasks": [{"title": "no prompt"}]}, "prompt"),
        ("dispatch", {"tasks": [task("a"), task("a")]}, "duplicate task id 'a'"),
        ("dispatch", {"tasks": [{**task("a"), "tools": ["rm_rf"]}]}, "unknown tool 'rm_rf'"),
        ("dispatch", {"tasks": [task("a")], "model": "nope:x"}, "nope:x"),
        ("dispatch", {"tasks": [task("a")], "model": "anthropic:m"}, "ANTHROPIC_API_KEY"),
        ("dispatch", {"tasks": [task("a")], "wait": 5}, "unknown argument 'wait'"),
        ("dispatch", {"tasks": [task("a")], "workspace": "missing"}, "no such directory"),
        ("read_thread", {"ref": "T-0000nothere"}, "T-0000nothere"),
        ("read_thread", {"ref": "T-0000", "max_chars": 10**6}, "max_chars"),
        ("run_job", {"name": "x", "goal": "g", "max_parallel": 0}, "max_parallel"),
        ("run_job", {"name": "x", "goal": "g", "bogus": 1}, "bogus"),
        ("cancel", {"ref": "T-0000nothere"}, "T-0000nothere"),
        ("job_tree", {"ref": "T-"}, "T-"),
    ],
)
async def test_bad_arguments_are_mcp_errors_with_one_clear_line(
    serve: Serve, tool: str, args: dict[str, Any], says: str
) -> None:
    async with serve() as app, client(app) as c:
        result = await c.call_tool(tool, args)
        assert result.is_error
        message = text(result)
        assert says in message and "Traceback" not in message
        # and the server goes on answering
        assert not (await c.call_tool("list_threads", {})).is_error


async def test_a_workspace_outside_the_clients_roots_is_refused(
    serve: Serve, setup: Setup, tmp_path: Path
) -> None:
    inside = setup.ws / "sub"
    inside.mkdir()

    async def roots(_ctx: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl(setup.ws.as_uri()))])

    async with (
        serve(cwd=tmp_path) as app,
        client(app, mode="legacy", list_roots_callback=roots) as c,
    ):
        refused = await c.call_tool("dispatch", {"tasks": [task("a")], "workspace": str(tmp_path)})
        assert refused.is_error and "outside the client's roots" in text(refused)
        ok = data(await c.call_tool("dispatch", {"tasks": [task("a")], "workspace": "sub"}))
        info = (await app.orch.store.resolve(ok["workers"][0]["ref"])).thread
        assert (info.task or {})["workspace"] == str(inside)
        default = data(await c.call_tool("dispatch", {"tasks": [task("b")]}))
        info = (await app.orch.store.resolve(default["workers"][0]["ref"])).thread
        assert (info.task or {})["workspace"] == str(setup.ws)  # the first root, not the cwd


async def test_an_answer_too_large_for_one_call_is_refused_with_how_to_ask_for_less(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_answers, "MAX_ANSWER_CHARS", 200)
    async with serve() as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("a"), task("b")], "wait_s": 20}))
        big = await c.call_tool("list_threads", {"job": out["job"]})
        assert big.is_error and "lower limit" in text(big)
        tree = await c.call_tool("job_tree", {"ref": out["job"]})
        assert tree.is_error and "list_threads(job=ref" in text(tree)
        monkeypatch.setattr(_answers, "MAX_ANSWER_CHARS", 10**6)
        assert not (await c.call_tool("job_tree", {"ref": out["job"]})).is_error


async def test_first_calls_at_once_from_one_client_make_one_job(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        calls = [c.call_tool("dispatch", {"tasks": [task(t)], "wait_s": 20}) for t in "abc"]
        outs = [data(r) for r in await asyncio.gather(*calls)]
    assert len({o["job"] for o in outs}) == 1


@pytest.mark.slow
async def test_a_worker_longer_than_one_call_returns_pending_and_wait_collects_it(
    serve: Serve,
) -> None:
    """Longer than any client lets one call run: dispatch answers within wait_s, and wait (each
    call at most 50 s: a longer one is refused) collects it over several calls. The worker runs
    conftest's LONG_S (6 s) against waits of 2 s: the same path as a 70 s worker against waits
    of 50 s, which this test ran before, at 70 s of the suite's time."""
    async with serve() as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("long")], "wait_s": 1}))
        assert out["pending"] and out["workers"][0]["status"] in ("queued", "running")
        too_long = await c.call_tool("wait", {"refs": out["pending"], "timeout_s": 70})
        assert too_long.is_error and "timeout_s" in text(too_long), text(too_long)
        calls = 0
        while out["pending"]:
            calls += 1
            out = data(await c.call_tool("wait", {"refs": out["pending"], "timeout_s": 2}))
    assert calls >= 2  # no single wait could have held it
    assert out["workers"][0]["result"]["summary"] == "ran long"


LONG_TITLE = "x" * 201


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("run_job", {"name": "n", "goal": "g", "tasks": [task("a"), task("a")]}, "task id 'a'"),
        ("dispatch", {"tasks": [{**task("a"), "id": ""}]}, "tasks.0.id"),
        ("dispatch", {"tasks": [{**task("a"), "id": "a b/../c"}]}, "tasks.0.id"),
        ("dispatch", {"tasks": [{**task("a"), "title": LONG_TITLE}]}, "tasks.0.title"),
        ("run_job", {"name": LONG_TITLE, "goal": "g", "tasks": [task("a")]}, "name"),
        (
            "run_job",
            {"name": "n", "goal": "g", "tasks": [{**task("a"), "title": LONG_TITLE}]},
            "title",
        ),
    ],
)
async def test_run_job_and_dispatch_refuse_what_a_job_file_refuses_and_store_nothing(
    serve: Serve, tool: str, args: dict[str, Any], says: str
) -> None:
    """Duplicate task ids, an empty or ill-formed id, a title past 200 characters: refused with
    one line before anything is stored (a run_job with two tasks 'a' used to start a job
    whose lead's dispatch then failed)."""
    async with serve() as app, client(app) as c:
        result = await c.call_tool(tool, {**args, "wait_s": 20})
        assert result.is_error and says in text(result), text(result)
        assert await app.orch.store.list_threads() == []


async def test_the_title_cap_is_in_the_schemas_and_job_files_share_it_and_unique_ids(
    tmp_path: Path, serve: Serve
) -> None:
    async with serve() as app, client(app) as c:
        tools = {t.name: t.input_schema for t in (await c.list_tools()).tools}
    name = tools["run_job"]["properties"]["name"]
    assert name["maxLength"] == 200 and "200 characters" in name["description"]
    item = tools["dispatch"]["$defs"]["TaskInput"]["properties"]
    assert item["title"]["maxLength"] == 200 and "200 characters" in item["title"]["description"]
    # a job file: the same rule through JobSpec, its error naming the key and its line
    text = f'[job]\nname = "{LONG_TITLE}"\ngoal = "g"\n'
    with pytest.raises(JobFileError, match=r"^job\.toml:2: job\.name: at most 200 characters"):
        parse_job(text, name="job.toml", base_dir=tmp_path)
    text = '[job]\nname = "n"\ngoal = "g"\n' + "".join(
        f'[[task]]\nid = "a"\ntitle = "{t}"\nprompt = "p"\n' for t in ("t", "u")
    )
    with pytest.raises(JobFileError) as dupe:
        parse_job(text, name="job.toml", base_dir=tmp_path)
    assert str(dupe.value) == "job.toml:9: task[1].id: duplicate task id 'a' (also task[0])"
    # a spec read back from the store (an older job file's, say) loads whatever its length
    assert JobSpec.model_validate({"name": LONG_TITLE, "goal": "g"}).name == LONG_TITLE


async def test_one_long_title_leaves_the_listings_usable_and_whole_in_its_resource(
    serve: Serve, setup: Setup
) -> None:
    """A 100,000-character job name (stored before titles were capped) made list_threads and
    stats refuse every call while it was on their page. Each answer now cuts it, saying where
    the whole title is."""
    long = "scripted-job " + "y" * 100_000
    async with serve() as app, client(app) as c:
        stored = JobSpec.model_validate(
            {"name": long, "goal": "g", "model": setup.model, "base_dir": str(setup.ws)}
            | {"tasks": [task("a")]}
        )
        outcome = await app.orch.run_job(stored)
        lead = outcome.lead
        tid = lead.removeprefix("T-")
        where = f"threadloom://thread/{tid}"
        rows = data(await c.call_tool("list_threads", {}))
        (row,) = [r for r in rows if r["ref"] == lead]
        stats = data(await c.call_tool("stats", {}))
        (job,) = [j for j in stats["jobs"] if j["ref"] == lead]
        tree = data(await c.call_tool("job_tree", {"ref": lead}))
        for shown in (row["title"], job["title"], tree["title"]):
            assert shown.startswith(long[:200] + "…") and where in shown and len(shown) < 300
        assert json.loads(text(await c.call_tool("job_tree", {"ref": lead})))["title"] == shown
        whole = await c.read_resource(where)
        (content,) = whole.contents
        assert isinstance(content, TextResourceContents)
        assert json.loads(content.text)["title"] == long


async def test_resume_and_fork_with_a_short_wait_report_the_run_not_the_status_before_it(
    serve: Serve,
) -> None:
    """With wait_s 0 the run has usually not taken its thread yet: the store still says
    ``done`` (a resumed worker) or ``idle`` (a new fork). The answer says it runs, so the
    caller waits for the new result instead of reading the old status as the end."""
    async with serve() as app, client(app) as c:
        out = data(await c.call_tool("dispatch", {"tasks": [task("a"), task("b")], "wait_s": 20}))
        a, b = (w["ref"] for w in out["workers"])
        assert [w["status"] for w in out["workers"]] == ["done", "done"]
        resumed = data(
            await c.call_tool("resume_thread", {"ref": a, "message": "do it again", "wait_s": 0})
        )
        forked = data(
            await c.call_tool("fork_thread", {"ref": b, "message": "again, forked", "wait_s": 0})
        )
        for entry in (resumed, forked):
            # ended already (it may, in the few awaits of a zero wait): then with its new result
            ran_on = entry["status"] in ("queued", "running") and "result" not in entry
            assert ran_on or entry["result"]["summary"] == "did it again", entry
        got = data(await c.call_tool("wait", {"refs": [a, forked["ref"]], "timeout_s": 30}))
    assert got["pending"] == []
    assert [w["result"]["summary"] for w in got["workers"]] == ["did it again"] * 2


async def test_resume_and_fork_take_this_runs_model_call_knobs(serve: Serve) -> None:
    """``resume_thread``/``fork_thread`` take the run options of a run of a thread that exists
    (``RunOption.thread``), bounded as the job file's keys; they reach the provider's request."""
    with FakeChatAPI() as api:
        api.respond_with(lambda request: {"content": "looked"})
        async with serve(model=f"openai:m@{api.base_url}") as app, client(app) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for name in ("resume_thread", "fork_thread"):
                props = tools[name].input_schema["properties"]
                assert props["max_output_tokens"]["anyOf"][0]["minimum"] == 1, props
                assert props["request_timeout_s"]["anyOf"][0]["exclusiveMinimum"] == 0, props
            out = data(await c.call_tool("dispatch", {"tasks": [task("a")], "wait_s": 20}))
            ref = out["workers"][0]["ref"]
            default = {r["max_tokens"] for r in api.chat_requests}
            seen = []
            for name, args in (
                ("resume_thread", {"ref": ref, "message": "again", "max_output_tokens": 77}),
                ("fork_thread", {"ref": ref, "message": "other", "max_output_tokens": 55}),
                ("resume_thread", {"ref": ref, "message": "once more"}),
            ):
                before = len(api.chat_requests)
                data(await c.call_tool(name, {**args, "wait_s": 20}))
                seen.append({r["max_tokens"] for r in api.chat_requests[before:]})
            bad = await c.call_tool(
                "resume_thread", {"ref": ref, "message": "m", "request_timeout_s": 0}
            )
    assert seen == [{77}, {55}, default] and default != {77}, seen
    assert bad.is_error and "request_timeout_s" in text(bad)
