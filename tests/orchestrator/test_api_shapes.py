"""The API's reading methods (``show``, ``tree``, ``stats``, ``list_threads``, ``search_json``)
answer with exactly the documents ``threadloom … --json`` prints, on the full path and on the
read-only fast path: one set of shapes (``orchestrator.views``) for every front door."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from orchestrator import Orchestrator
from tests.orchestrator.test_cli_helpers import Sample, invoke, json_out


def api(sample: Sample, call: Callable[[Orchestrator], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        async with await Orchestrator.open(str(sample.path)) as orch:
            return await call(orch)

    return asyncio.run(go())


def both_paths(sample: Sample, *args: str) -> Any:
    """The ``--json`` document of ``args`` — the same on the fast and the full path."""
    fast = invoke("--json", *args, db=sample.path)
    full = invoke("--json", *args, db=sample.path, THREADLOOM_NO_FAST="1")
    assert fast.exit_code == full.exit_code == 0, (fast.output, full.output)
    assert json_out(fast) == json_out(full)
    return json_out(full)


@pytest.mark.parametrize("which", ["worker", "fork", "lead", "other"])
def test_show_is_the_cli_show_json(sample: Sample, which: str) -> None:
    ref = sample.ref(which)
    assert api(sample, lambda o: o.show(ref)) == both_paths(sample, "show", ref)


def test_show_of_a_range_holds_that_range_and_inherited_messages_say_where_from(
    sample: Sample,
) -> None:
    ref = f"{sample.ref('fork')}#2-4"
    shown = api(sample, lambda o: o.show(ref))
    assert shown == both_paths(sample, "show", ref)
    assert shown["range"] == {"start": 2, "end": 4}
    assert [m["seq"] for m in shown["messages"]] == [2, 3, 4]
    assert {m.get("from") for m in shown["messages"][:2]} == {sample.ref("worker")}
    assert "from" not in shown["messages"][2]  # the fork's own message


def test_show_without_messages_is_show_less_its_messages(sample: Sample) -> None:
    ref = sample.ref("worker")
    whole = api(sample, lambda o: o.show(ref))
    bare = api(sample, lambda o: o.show(ref, messages=False))
    assert "messages" not in bare
    assert len(whole.pop("messages")) == 6  # the worker's whole history
    assert bare == whole


@pytest.mark.parametrize("which", ["lead", "fork", "other"])
def test_tree_is_the_cli_tree_json(sample: Sample, which: str) -> None:
    ref = sample.ref(which)
    tree = api(sample, lambda o: o.tree(ref))
    assert tree == both_paths(sample, "tree", ref)
    assert tree["focus"] == ref


def test_stats_is_the_cli_stats_json_with_and_without_a_ref(sample: Sample) -> None:
    everything = api(sample, lambda o: o.stats())
    assert everything == json_out(invoke("--json", "stats", db=sample.path))
    assert [j["ref"] for j in everything["jobs"]] == [sample.ref("lead")]
    job = api(sample, lambda o: o.stats(sample.ref("worker")))
    assert job == json_out(invoke("--json", "stats", sample.ref("worker"), db=sample.path))
    refs = {t["ref"] for t in job["threads"]}
    assert {sample.ref("lead"), sample.ref("worker"), sample.ref("fork")} <= refs
    assert job["total"]["usage"]["input_tokens"] == 1500


@pytest.mark.parametrize(
    ("kwargs", "flags"),
    [
        ({}, []),
        ({"kind": "worker"}, ["--kind", "worker"]),
        ({"status": "done"}, ["--status", "done"]),
        ({"limit": 2}, ["--limit", "2"]),
        ({"limit": 0}, ["--limit", "0"]),
        ({"job": "fork"}, ["--job", "fork"]),
    ],
)
def test_list_threads_is_the_cli_ls_json_with_its_filters(
    sample: Sample, kwargs: dict[str, Any], flags: list[str]
) -> None:
    if "job" in kwargs:
        kwargs, flags = {"job": sample.ref("fork")}, ["--job", sample.ref("fork")]
    rows = api(sample, lambda o: o.list_threads(**kwargs))
    assert rows == both_paths(sample, "ls", *flags)
    assert rows, "every filter here matches some thread"


def test_search_json_is_the_cli_search_json(sample: Sample) -> None:
    hits = api(sample, lambda o: o.search_json("tokenizer"))
    assert hits == both_paths(sample, "search", "tokenizer")
    assert hits and all(h["ref"].startswith(h["thread"] + "#") for h in hits)
