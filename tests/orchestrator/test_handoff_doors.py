"""A job larger than one context on the command line (SPEC "Jobs larger than one context"):
``show`` and ``ls`` carry ``continues``/``continued_by``, ``tree`` shows the chain of leads and
a worker's successor with its predecessor, ``resume`` of any thread of a chain runs its newest —
each on a chain stored by ``Store.hand_off`` in a real SQLite file, through the real
``threadloom`` (both read paths: the fast one and, with ``THREADLOOM_NO_FAST``, the full one),
and the live progress renders the runtime's ``handoff`` event."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from orchestrator import Orchestrator
from orchestrator.cli._progress import Progress
from orchestrator.jobs import JobSpec
from store import Status, Store, Usage
from tests._handoffs import Chain, build_chain
from tests.orchestrator.test_cli_helpers import clean_env, run_cli
from workers import LoopEvent

SCRIPT = {
    "rules": [
        {"match": "ledger", "turns": [{"text": "the report, after two handoffs"}]},
        {"match": "again", "turns": [{"text": "did it again"}]},
    ]
}
AGO = re.compile(r"\d+[smhd] ago")


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, Chain]:
    """The chain of ``tests._handoffs``, its first lead carrying a scripted job (so a resume
    of any of its threads can run)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    (tmp_path / "ws").mkdir()
    spec = JobSpec(
        name="big-job", goal="sweep", model=f"scripted:{script}", base_dir=str(tmp_path / "ws")
    )
    db = tmp_path / "threads.db"

    async def build() -> Chain:
        async with await Store.open(str(db)) as store:
            return await build_chain(store, task={"job": spec.model_dump(mode="json")})

    return db, asyncio.run(build())


def both(db: Path, *args: str) -> str:
    """``threadloom ARGS`` on the fast read path and on the full one: the same bytes (but for
    an age that ticked between them), which are returned."""
    trace = db.parent / "fast-trace.jsonl"
    fast = run_cli(*args, db=db, env=clean_env(THREADLOOM_FAST_TRACE=str(trace)))
    assert json.loads(trace.read_text().splitlines()[-1])["taken"], "the fast path declined"
    full = run_cli(*args, db=db, env=clean_env(THREADLOOM_NO_FAST="1"))
    assert fast.returncode == full.returncode == 0, (fast.stderr, full.stderr)
    assert AGO.sub("ago", fast.stdout) == AGO.sub("ago", full.stdout)
    return fast.stdout


# ----------------------------------------------------------------- show, ls


def test_show_json_of_every_thread_carries_its_links(chain: tuple[Path, Chain]) -> None:
    db, c = chain
    links = {
        "lead1": (None, c.ref("lead2")),
        "lead2": (c.ref("lead1"), c.ref("lead3")),
        "lead3": (c.ref("lead2"), None),
        "w1": (None, None),
        "w2": (None, c.ref("w2b")),
        "w2b": (c.ref("w2"), None),
        "w3": (None, None),
    }
    shown: dict[str, Any] = {}
    for name, (continues, continued_by) in links.items():
        shown[name] = doc = json.loads(both(db, "--json", "show", c.ref(name)))
        assert (doc["continues"], doc["continued_by"]) == (continues, continued_by), name
        # the SPEC keys stay
        assert {"ref", "kind", "status", "title", "parent", "forked_from", "result"} <= set(doc)
    # a successor worker hangs under its predecessor's parent: the lead that dispatched it
    w2b = shown["w2b"]
    assert (w2b["kind"], w2b["parent"], w2b["job"]) == ("worker", c.ref("lead1"), c.ref("lead1"))
    # a later lead of the job has no parent; its job is the first lead's ref
    lead2 = shown["lead2"]
    assert (lead2["kind"], lead2["parent"], lead2["job"]) == ("lead", None, c.ref("lead1"))
    listed = {r["ref"]: r for r in json.loads(both(db, "--json", "ls", "--job", c.ref("w3")))}
    assert listed[c.ref("lead2")]["continued_by"] == c.ref("lead3")
    assert listed[c.ref("w2b")]["continues"] == c.ref("w2")


def test_show_prints_the_chain_in_its_lineage(chain: tuple[Path, Chain]) -> None:
    db, c = chain
    text = both(db, "show", c.ref("lead2")).splitlines()
    assert f"  chain     continues {c.ref('lead1')} · continued by {c.ref('lead3')}" in text
    first = both(db, "show", c.ref("lead1")).splitlines()
    assert f"  chain     continued by {c.ref('lead2')}" in first
    assert f"  chain     continues {c.ref('w2')}" in both(db, "show", c.ref("w2b")).splitlines()
    assert not any(line.startswith("  chain") for line in both(db, "show", c.ref("w1")).split("\n"))


# ----------------------------------------------------------------- tree


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for k in (*node["children"], *node["forks"]) for n in _nodes(k))]


def test_tree_shows_the_leads_in_chain_order_each_with_its_workers(
    chain: tuple[Path, Chain],
) -> None:
    db, c = chain
    # asked about any thread of the job, the same tree
    docs = [json.loads(both(db, "--json", "tree", c.ref(n))) for n in ("w3", "lead3")]
    doc = docs[0]
    assert {k: v for k, v in docs[1].items() if k != "focus"} == {
        k: v for k, v in doc.items() if k != "focus"
    }
    assert doc["ref"] == c.ref("lead1") and doc["focus"] == c.ref("w3")
    assert [doc["ref"], *(s["ref"] for s in doc["successors"])] == c.leads
    assert doc["continued_by"] == c.ref("lead2")
    lead2, lead3 = doc["successors"]
    assert (lead2["continues"], lead2["continued_by"]) == (c.ref("lead1"), c.ref("lead3"))
    assert (lead3["continues"], lead3["continued_by"], lead3["status"]) == (
        c.ref("lead2"),
        None,
        "queued",
    )
    # each lead with the workers it spawned; a worker's successor right after it
    assert [w["ref"] for w in doc["children"]] == [c.ref(n) for n in ("w1", "w2", "w2b")]
    w2, w2b = doc["children"][1:]
    assert (w2["continued_by"], w2b["continues"]) == (c.ref("w2b"), c.ref("w2"))
    assert [w["ref"] for w in lead2["children"]] == [c.ref("w3")]
    assert lead3["children"] == [] and "successors" not in lead3
    # every thread of the job once, and the SPEC keys on every node
    every = [n for lead in (doc, lead2, lead3) for n in _nodes(lead)]
    assert sorted(n["ref"] for n in every) == sorted(c.ref(n) for n in vars(c))
    for n in every:
        assert {"ref", "kind", "status", "title", "usage", "children", "forks"} <= set(n)
        assert {"continues", "continued_by"} <= set(n)


def test_tree_text_draws_each_handoff_as_such(chain: tuple[Path, Chain]) -> None:
    db, c = chain
    lines = both(db, "tree", c.ref("w2b")).splitlines()
    starts = [
        f"{c.ref('lead1')}  lead  done  big-job",
        f"├─ {c.ref('w1')}  worker  done  Task a",
        f"├─ {c.ref('w2')}  worker  done  Task b",
        f"└─ ↳ {c.ref('w2b')}  worker  done  Task b",
        f"↳ {c.ref('lead2')}  lead  done  big-job",
        f"└─ {c.ref('w3')}  worker  done  Task c",
        f"↳ {c.ref('lead3')}  lead  queued  big-job",
    ]
    assert len(lines) == len(starts), lines
    for line, start in zip(lines, starts, strict=True):
        assert line.startswith(start), (line, start)
    assert lines[0].endswith(f"↳ continued by {c.ref('lead2')}")
    assert lines[2].endswith(f"↳ continued by {c.ref('w2b')}")
    assert lines[3].endswith("◀")
    assert lines[4].endswith(f"↳ continued by {c.ref('lead3')}")
    # the focus is marked on a later lead too
    assert both(db, "tree", c.ref("lead3")).splitlines()[-1].endswith("◀")


# ----------------------------------------------------------------- resume


async def test_check_resume_of_any_thread_of_a_chain_names_its_newest(
    chain: tuple[Path, Chain],
) -> None:
    db, c = chain
    async with await Orchestrator.open(str(db)) as orch:
        for name, newest in [
            ("lead1", "lead3"),
            ("lead2", "lead3"),
            ("lead3", "lead3"),
            ("w2", "w2b"),
            ("w2b", "w2b"),
            ("w1", "w1"),
        ]:
            info = await orch.check_resume(c.ref(name), "go on")
            assert info.ref == c.ref(newest), name


def _resume(db: Path, *args: str) -> dict[str, Any]:
    proc = run_cli("--json", "resume", *args, db=db)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_resume_of_the_first_lead_runs_the_newest_lead(chain: tuple[Path, Chain]) -> None:
    db, c = chain
    out = _resume(db, c.ref("lead1"))
    assert (out["ref"], out["status"]) == (c.ref("lead3"), "done")
    assert out["report"] == "the report, after two handoffs"
    shown = {n: json.loads(both(db, "--json", "show", c.ref(n))) for n in ("lead1", "lead2")}
    # the earlier leads are untouched: each as it ended, whole
    assert [s["status"] for s in shown.values()] == ["done", "done"]
    assert len(shown["lead2"]["messages"]) == 3


def test_resume_of_a_worker_that_handed_off_runs_its_successor(
    chain: tuple[Path, Chain],
) -> None:
    db, c = chain
    before = json.loads(both(db, "--json", "show", c.ref("w2")))
    out = _resume(db, c.ref("w2"), "do it again")
    assert (out["ref"], out["status"], out["report"]) == (c.ref("w2b"), "done", "did it again")
    after = json.loads(both(db, "--json", "show", c.ref("w2")))
    assert after["messages"] == before["messages"]
    w2b = json.loads(both(db, "--json", "show", c.ref("w2b")))
    assert w2b["messages"][-2]["content"][0]["text"] == "do it again"


# ----------------------------------------------------------------- live progress


IDS = ("01" + "a" * 24, "01" + "b" * 24, "01" + "c" * 24)
WORKER2 = "T-01" + "d" * 24


def _events(lead1: str, lead2: str, worker: str) -> list[LoopEvent]:
    """A lead hands off while its worker runs; then the worker hands off to ``worker2``."""
    used = Usage(input_tokens=9000, output_tokens=100)
    return [
        LoopEvent(lead1, "started", thread_kind="lead", title="big-job", status=Status.RUNNING),
        LoopEvent(worker, "started", thread_kind="worker", title="Task a"),
        LoopEvent(lead1, "turn", thread_kind="lead", title="big-job", turn=3, usage=used),
        LoopEvent(lead1, "handoff", thread_kind="lead", title="big-job", detail=f"T-{lead2}"),
        LoopEvent(lead2, "started", thread_kind="lead", title="big-job", status=Status.RUNNING),
        LoopEvent(worker, "handoff", thread_kind="worker", title="Task a", detail=WORKER2),
        LoopEvent(WORKER2[2:], "started", thread_kind="worker", title="Task a"),
    ]


def test_a_handoff_is_one_plain_line_off_a_terminal() -> None:
    lead1, lead2, worker = IDS
    buf = io.StringIO()
    with Progress(stream=buf) as progress:
        for event in _events(lead1, lead2, worker):
            progress.on_event(event)
        # a finished event after the handoff says nothing more
        progress.on_event(LoopEvent(lead1, "finished", thread_kind="lead", status=Status.DONE))
    lines = buf.getvalue().splitlines()
    handoffs = [line for line in lines if line.startswith("handoff")]
    assert len(handoffs) == 2, lines
    assert handoffs[0].startswith(f"handoff  T-{lead1}  lead   big-job  handed off → T-{lead2}")
    assert "(context full)" in handoffs[0] and "tokens=9,100" in handoffs[0]
    assert handoffs[1].startswith(f"handoff  T-{worker}  worker Task a  handed off → {WORKER2}")
    assert lines[-1].startswith(f"started  {WORKER2}  worker Task a")
    assert not any(line.startswith("done") and lead1 in line for line in lines)
    assert progress.rows[lead1].successor == f"T-{lead2}"


def test_a_handoff_is_one_row_of_the_live_view() -> None:
    lead1, lead2, worker = IDS
    buf = io.StringIO()
    term = Console(file=buf, width=160, height=40, force_terminal=True, color_system=None)
    with Progress(console=term, auto_refresh=False) as progress:
        for event in _events(lead1, lead2, worker):
            progress.on_event(event)
        frame = ["".join(t for t, _ in parts) for parts in progress.lines(160, 40)]
    (row,) = [line for line in frame if f"T-{lead1}" in line]
    assert row.startswith("↳") and f"handed off → T-{lead2} (context full)" in row
    assert [line for line in frame if f"T-{lead2}" in line and f"T-{lead1}" not in line]
    # the summary follows the current lead, and counts a task once: by its current worker
    assert frame[-1].startswith("lead running · workers: 1 running |"), frame[-1]
