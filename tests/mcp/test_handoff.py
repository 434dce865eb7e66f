"""A job larger than one context through MCP (SPEC "Jobs larger than one context"): ``job_tree``
and the job resource show the chain as ``tree`` does, a thread resource carries
``continues``/``continued_by``, and ``resume_thread`` of a thread that handed off runs the
newest of its chain — on a chain stored by ``Store.hand_off`` in the server's real store."""

from __future__ import annotations

import json
from typing import Any

from mcp.types import TextResourceContents

from orchestrator.jobs import JobSpec
from store import Store
from tests._handoffs import Chain, build_chain

from .conftest import Serve, Setup, client, data


async def _chain(setup: Setup) -> Chain:
    spec = JobSpec(name="big-job", goal="sweep", model=setup.model, base_dir=str(setup.ws))
    async with await Store.open(str(setup.db)) as store:
        return await build_chain(store, task={"job": spec.model_dump(mode="json")})


def _resource(result: Any) -> Any:
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    return json.loads(content.text)


async def test_job_tree_and_the_resources_show_the_chain(serve: Serve, setup: Setup) -> None:
    c = await _chain(setup)
    async with serve() as app, client(app) as mcp:
        tree = data(await mcp.call_tool("job_tree", {"ref": c.ref("w3")}))
        assert tree == await app.orch.tree(c.ref("w3"))  # the one views function
        job = _resource(await mcp.read_resource(f"threadloom://job/{c.lead2}"))
        lead2 = _resource(await mcp.read_resource(f"threadloom://thread/{c.lead2}"))
    assert [tree["ref"], *(s["ref"] for s in tree["successors"])] == c.leads
    assert [w["ref"] for w in tree["children"]] == [c.ref(n) for n in ("w1", "w2", "w2b")]
    assert tree["children"][2]["continues"] == c.ref("w2")
    assert [w["ref"] for w in tree["successors"][0]["children"]] == [c.ref("w3")]
    assert {k: v for k, v in job.items() if k != "focus"} == {
        k: v for k, v in tree.items() if k != "focus"
    }
    assert (lead2["continues"], lead2["continued_by"]) == (c.ref("lead1"), c.ref("lead3"))


async def test_resume_thread_of_a_thread_that_handed_off_runs_the_newest(
    serve: Serve, setup: Setup
) -> None:
    c = await _chain(setup)
    async with serve() as app, client(app) as mcp:
        worker = data(
            await mcp.call_tool(
                "resume_thread", {"ref": c.ref("w2"), "message": "do it again", "wait_s": 30}
            )
        )
        lead = data(
            await mcp.call_tool(
                "resume_thread", {"ref": c.ref("lead1"), "message": "go again", "wait_s": 30}
            )
        )
        w2 = await app.orch.show(c.ref("w2"))
    assert (worker["ref"], worker["status"]) == (c.ref("w2b"), "done")
    assert worker["result"]["summary"] == "did it again"
    assert (lead["ref"], lead["status"]) == (c.ref("lead3"), "done")
    # the thread that handed off is as it ended
    assert [m["role"] for m in w2["messages"]] == ["user"]
