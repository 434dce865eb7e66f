"""Checked results through every door, with the real CLI: the end of ``run`` and ``run --json``,
``show`` (text and JSON), ``tree``, ``stats``, the HTML page, the lead's dispatch result, and the
lead's report with a citation of a failed run used for a passing claim."""

from __future__ import annotations

import json
from typing import Any

from tests.check_corpus import fabricated_turns, honest_turns, seed_workspace
from tests.e2e.conftest import Env


def _job(env: Env, *, text: bool = False) -> Any:
    seed_workspace(env.ws, 2)
    rules = [
        {
            "match": "Job: checked",
            # the lead's report cites the fabricated worker's failed run for a passing claim
            "turns": [{"text": "t0 is fixed. The tests of t1 pass ({{ref:t1}}#5)."}],
        },
        {"match": "(?m)^Task t0:", "turns": honest_turns("plain", 0)},
        # variant 1 insists after the correction round: its claim stands contradicted
        {"match": "(?m)^Task t1:", "turns": fabricated_turns("exit1_claimed_passing", 1, 1)},
    ]
    tasks = [
        {"id": "t0", "title": "honest", "prompt": "fix mod_0"},
        {"id": "t1", "title": "fabricated", "prompt": "fix mod_1"},
    ]
    path = env.job("checked", rules, tasks, worker='sandbox = "none"')
    res = env.run("run", str(path)) if text else env.run("--json", "run", str(path))
    assert res.code == 0, res.stderr
    return res.stdout if text else res.json


def test_every_door_shows_each_claims_verdict_computed_once(env: Env) -> None:
    doc = _job(env)
    lead = doc["lead"]
    by_task = {w["task"]: w for w in doc["workers"]}
    honest, bad = by_task["t0"]["ref"], by_task["t1"]["ref"]
    assert by_task["t0"]["check"]["verdict"] == "verified"
    bad_check = by_task["t1"]["check"]
    assert bad_check["verdict"] == "contradicted" and bad_check["rounds"] == 2
    (v,) = [c for c in bad_check["claims"] if c["kind"] == "verification"]
    assert v["refs"] == [f"{bad}#5"] and "exited 1" in v["reason"]

    # the report: the citation of a failed run for a passing claim is marked
    assert f"({bad}#5 [does not support this: the cited run exited 1])" in doc["report"]

    # show, as text: the verdict, then each claim with its reason and refs
    shown = env.run("show", bad)
    assert shown.code == 0
    assert "check  contradicted" in shown.stdout
    claimed = "claimed passing, but `pytest -q pkg/test_mod_1.py` exited 1"
    assert f"✗ verification 0: {claimed} at {bad}#5 ({bad}#5)" in shown.stdout
    assert "✓ change 0:" in shown.stdout

    data = env.run("--json", "show", honest).json
    assert data["result"]["check"]["verdict"] == "verified"
    assert all(c["verdict"] == "verified" for c in data["result"]["check"]["claims"])

    tree = env.run("tree", lead).stdout
    assert "✓ 3/3 verified" in tree and "✗ 2/3 verified, 1 contradicted" in tree
    assert env.run("--json", "tree", lead).json["children"][0]["check"]["verdict"] == "verified"

    stats = env.run("--json", "stats", lead).json
    assert stats["total"]["checked_claims"] == {"claims": 6, "verified": 5, "share": 0.8333}

    # the lead's dispatch result shows each claim's verdict in one line
    lead_msgs = env.run("--json", "show", lead).json["messages"]
    results = [b for m in lead_msgs for b in m["content"] if b["type"] == "tool_result"]
    payloads = [json.loads(line) for line in results[0]["content"].splitlines()]
    bad_payload = next(p for p in payloads if p["ref"] == bad)
    assert bad_payload["check"]["verdict"] == "contradicted"
    assert any(
        line.startswith("✗ verification 0: claimed passing")
        for line in bad_payload["check"]["claims"]
    )

    # the page: a badge per claim, linking to the message that decided it
    html = env.run("export", bad, "--format", "html").stdout
    assert (
        '<span class="verdict verdict-contradicted" title="claimed passing, but `pytest -q'
        f' pkg/test_mod_1.py` exited 1 at {bad}#5"><a href="#5">✗ contradicted</a>'
    ) in html


def test_the_end_of_run_prints_each_workers_claims_with_their_verdicts(env: Env) -> None:
    out = _job(env, text=True)
    assert "    check  verified" in out and "    check  contradicted" in out
    assert (
        "      ✗ verification 0: claimed passing, but `pytest -q pkg/test_mod_1.py` exited 1" in out
    )
    assert "      ✓ verification 0: `pytest -q pkg/test_mod_0.py` ran at" in out
