"""The MCP resources mirror refs: a thread, a range of its messages, a job's tree."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import MCPError
from mcp.types import TextResourceContents

from orchestrator.mcp import _resources

from .conftest import Serve, client, data


def body(result: Any) -> Any:
    (content,) = result.contents
    assert isinstance(content, TextResourceContents) and content.mime_type == "application/json"
    return json.loads(content.text)


async def test_the_templates_are_listed(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        templates = (await c.list_resource_templates()).resource_templates
    assert {t.uri_template for t in templates} == {
        "threadloom://thread/{id}",
        "threadloom://thread/{id}/messages/{range}",
        "threadloom://job/{id}",
    }


async def test_thread_messages_and_job_resources_match_show_and_tree(serve: Serve) -> None:
    async with serve() as app, client(app) as c:
        out = data(
            await c.call_tool(
                "dispatch", {"tasks": [{"id": "echo", "title": "e", "prompt": "p"}], "wait_s": 20}
            )
        )
        ref = out["workers"][0]["ref"]
        tid = ref.removeprefix("T-")
        shown = body(await c.read_resource(f"threadloom://thread/{ref}"))
        assert shown == await app.orch.show(ref, messages=False)
        assert shown["ref"] == ref and not isinstance(shown.get("messages"), list)
        assert body(await c.read_resource(f"threadloom://thread/{tid}")) == shown  # bare id
        part = body(await c.read_resource(f"threadloom://thread/{tid}/messages/2-3"))
        assert [m["seq"] for m in part["messages"]] == [2, 3] and part["next"] is None
        rest = body(await c.read_resource(f"threadloom://thread/{tid}/messages/2-"))
        assert rest["messages"][0]["seq"] == 2
        assert rest["messages"] == (await app.orch.show(f"{ref}#2-"))["messages"]
        tree = body(await c.read_resource(f"threadloom://job/{out['job']}"))
        assert tree == await app.orch.tree(out["job"])


async def test_a_long_range_is_cut_into_bounded_parts_that_name_the_rest(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_resources, "MAX_RESOURCE_CHARS", 50)
    async with serve() as app, client(app) as c:
        out = data(
            await c.call_tool(
                "dispatch", {"tasks": [{"id": "echo", "title": "e", "prompt": "p"}], "wait_s": 20}
            )
        )
        ref = out["workers"][0]["ref"]
        seen: list[int] = []
        uri: str | None = f"threadloom://thread/{ref}/messages/1-"
        while uri is not None:
            part = body(await c.read_resource(uri))
            seen += [m["seq"] for m in part["messages"]]
            nxt = part["next"]
            uri = None if nxt is None else f"threadloom://thread/{nxt.replace('#', '/messages/')}"
        whole = [m["seq"] for m in (await app.orch.show(ref))["messages"]]
    assert seen == whole and len(whole) > 2


@pytest.mark.parametrize(
    "uri",
    [
        "threadloom://thread/T-0000nothere",
        "threadloom://thread/T-0000nothere/messages/1-",
        "threadloom://job/nothere0000",
        "threadloom://thread/T-%20bad",
    ],
)
async def test_a_bad_resource_is_an_mcp_error_naming_it(serve: Serve, uri: str) -> None:
    async with serve() as app, client(app) as c:
        with pytest.raises(MCPError) as caught:
            await c.read_resource(uri)
    assert "Traceback" not in str(caught.value)
    assert caught.value.error.message
