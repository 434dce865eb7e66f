"""Jobs through the ``threadloom`` command: with and without tasks, resume and fork, the JSON
shapes and exit codes of SPEC, budgets, parallelism recorded in the store."""

from __future__ import annotations

import json
from typing import Any

from store import Kind, Store, ToolResultBlock, ToolUseBlock
from tests.e2e.conftest import Env, bash, db_read, submit

RUN_KEYS = {"job", "lead", "ref", "status", "report", "workers", "usage"}
USAGE_KEYS = {
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
}


def two_task_job(env: Env, name: str = "j") -> Any:
    return env.job(
        name,
        [
            {
                "match": f"Job: {name}",
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "read_thread",
                                "input": {"ref": "{{ref:a}}", "mode": "overview"},
                            }
                        ]
                    },
                    {"text": "Report: a={{ref:a}} b={{ref:b}}"},
                ],
            },
            {"match": "(?m)^Task a:", "turns": [bash("echo alpha > a.txt"), submit("wrote a.txt")]},
            {"match": "(?m)^Task b:", "turns": [bash("echo beta > b.txt"), submit("wrote b.txt")]},
            {"match": "one more", "turns": [bash("echo more >> a.txt"), submit("appended")]},
            {"match": "other way", "turns": [{"text": "the fork went the other way"}]},
        ],
        [
            {"id": "a", "title": "Write a", "prompt": "write a.txt"},
            {"id": "b", "title": "Write b", "prompt": "write b.txt"},
        ],
        extra="max_parallel = 2",
    )


def test_a_job_with_tasks_runs_to_its_report_with_the_spec_json_shape(env: Env) -> None:
    res = env.run("--json", "run", str(two_task_job(env)))
    assert res.code == 0, res.stderr
    doc = res.json
    assert set(doc) >= RUN_KEYS
    assert set(doc["usage"]) >= USAGE_KEYS
    assert doc["status"] == "done" and doc["job"] == doc["lead"] == doc["ref"]
    assert [w["task"] for w in doc["workers"]] == ["a", "b"]
    assert all(set(w) >= {"ref", "task", "status", "summary"} for w in doc["workers"])
    refs = {w["task"]: w["ref"] for w in doc["workers"]}
    assert doc["report"] == f"Report: a={refs['a']} b={refs['b']}"
    assert (env.ws / "a.txt").read_text() == "alpha\n"
    assert (env.ws / "b.txt").read_text() == "beta\n"


def test_a_job_without_tasks_lets_the_lead_plan_and_dispatch(env: Env) -> None:
    job = env.job(
        "plan",
        [
            {
                "match": "Job: plan",
                "turns": [
                    {
                        "text": "I will split the work.",
                        "tool_calls": [
                            {
                                "name": "dispatch",
                                "input": {
                                    "tasks": [
                                        {"id": "x", "title": "X", "prompt": "do x"},
                                        {"id": "y", "title": "Y", "prompt": "do y"},
                                    ]
                                },
                            }
                        ],
                    },
                    {"text": "Both done: {{ref:x}} {{ref:y}}"},
                ],
            },
            {"match": "(?m)^Task x:", "turns": [submit("x done")]},
            {"match": "(?m)^Task y:", "turns": [{"text": "y finished in plain text"}]},
        ],
    )
    res = env.run("--json", "run", str(job))
    assert res.code == 0, res.stderr
    doc = res.json
    assert [w["task"] for w in doc["workers"]] == ["x", "y"]
    assert doc["workers"][1]["summary"] == "y finished in plain text"
    assert doc["report"].startswith("Both done: T-")


def test_resume_and_fork_of_a_worker(env: Env) -> None:
    doc = env.run("--json", "run", str(two_task_job(env))).json
    a = next(w["ref"] for w in doc["workers"] if w["task"] == "a")
    res = env.run("--json", "resume", a, "one more thing")
    assert res.code == 0, res.stderr
    resumed = res.json
    assert set(resumed) >= RUN_KEYS
    assert resumed["ref"] == a and resumed["workers"] == []
    assert resumed["report"] == "appended"
    assert (env.ws / "a.txt").read_text() == "alpha\nmore\n"

    res = env.run("--json", "fork", f"{a}#3", "go the other way")
    assert res.code == 0, res.stderr
    forked = res.json
    assert forked["ref"] != a and forked["status"] == "done"
    assert forked["report"] == "the fork went the other way"
    shown = env.run("--json", "show", forked["ref"]).json
    assert shown["forked_from"] == {"ref": a, "at": 3}
    parent = env.run("--json", "show", f"{a}#1-3").json

    def core(msgs: list[dict[str, Any]]) -> list[Any]:
        return [(m["seq"], m["role"], m["content"]) for m in msgs]

    assert core(shown["messages"][:3]) == core(parent["messages"])

    res = env.run("--json", "fork", a, "--no-run")
    assert res.code == 0, res.stderr
    assert set(res.json) >= {"ref", "forked_from", "status"} and res.json["status"] == "idle"


def test_bad_job_files_are_exit_2_with_one_line_naming_the_key_and_nothing_is_stored(
    env: Env,
) -> None:
    cases = {
        "unknown": '[job]\nname = "x"\ngoal = "g"\nmodle = "m"\n',
        "missing": '[job]\nname = "x"\n',
        "type": '[job]\nname = "x"\ngoal = "g"\nmax_parallel = "four"\n',
        "dupe": '[job]\nname = "x"\ngoal = "g"\n[[task]]\nid = "a"\ntitle = "t"\nprompt = "p"\n'
        '[[task]]\nid = "a"\ntitle = "t"\nprompt = "p"\n',
        "toml": '[job\nname = "x"\n',
        "workspace": '[job]\nname = "x"\ngoal = "g"\nworkspace = "nope"\n',
        "model": '[job]\nname = "x"\ngoal = "g"\nmodel = "gpt4"\n',
        "name": '[job]\nname = "x\\nGoal: other"\ngoal = "g"\n',
        "title": '[job]\nname = "x"\ngoal = "g"\n[[task]]\nid = "a"\ntitle = "t\\r"\n'
        'prompt = "p"\n',
    }
    expect = {
        "unknown": ("4", "modle", "did you mean 'model'"),
        "missing": ("1", "goal", "missing"),
        "type": ("4", "max_parallel"),
        "dupe": ("9", "duplicate task id 'a'"),
        "toml": ("1", "not valid TOML"),
        "workspace": ("4", "workspace", "does not exist"),
        "model": ("gpt4",),
        "name": ("2", "job.name", "a title is one line"),
        "title": ("6", "task[0].title", "a title is one line"),
    }
    for name, text in cases.items():
        path = env.root / f"{name}.toml"
        path.write_text(text)
        res = env.run("run", str(path))
        assert res.code == 2, (name, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.stderr, (name, res.stderr)
        line = lines[0]
        first, *words = expect[name]
        if first.isdigit():
            assert f"{name}.toml:{first}:" in line, (name, line)
        else:
            words = [first, *words]
        for w in words:
            assert w in line, (name, line)
    assert not env.db.exists() or env.run("--json", "ls").json == []


def test_a_small_budget_stops_the_job_with_exit_1_and_the_refs_so_far(env: Env) -> None:
    job = env.job(
        "budget",
        [
            {
                "match": "Job: budget",
                "turns": [{"text": "report"}],
            },
            {
                "match": "(?m)^Task ",
                "turns": [
                    {**bash("echo step"), "usage": {"input_tokens": 400, "output_tokens": 100}}
                ]
                * 20,
            },
        ],
        [{"id": f"t{i}", "title": f"T{i}", "prompt": "loop"} for i in range(3)],
        extra="budget_tokens = 2000\nmax_parallel = 3",
    )
    res = env.run("--json", "run", str(job))
    assert res.code == 1, res.stderr
    doc = res.json
    assert doc["status"] == "failed"
    assert doc["error"]["code"] == 1 and "budget" in doc["error"]["message"]
    assert len(doc["workers"]) == 3 and all(w["ref"].startswith("T-") for w in doc["workers"])
    total = sum(doc["usage"][k] for k in doc["usage"])
    assert total < 2000 + 3 * 500  # each running thread stops at its next step


def test_sixteen_sleeping_workers_with_max_parallel_8_run_in_two_rounds(env: Env) -> None:
    job = env.job(
        "par",
        [
            {"match": "Job: par", "turns": [{"text": "done"}]},
            {"match": "(?m)^Task ", "turns": [bash("sleep 1"), submit("slept")]},
        ],
        [{"id": f"s{i}", "title": f"S{i}", "prompt": "sleep"} for i in range(16)],
        extra="max_parallel = 8",
    )
    res = env.run("--json", "run", str(job), timeout=300)
    assert res.code == 0, res.stderr
    lead = res.json["lead"]

    async def intervals(store: Store) -> list[tuple[float, float]]:
        out = []
        for t in await store.job_tree(lead[2:]):
            if t.kind != Kind.WORKER:
                continue
            msgs = await store.messages(t.id)
            # the bash call's turn and its result bracket the sleep
            start = msgs[1].created_at.timestamp()
            end = msgs[-1].created_at.timestamp()
            out.append((start, end))
        return out

    spans = db_read(env, intervals)
    assert len(spans) == 16
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 8  # never more than max_parallel, and really in parallel
    firsts = sorted(s for s, _ in spans)
    first_end = min(e for _, e in spans)
    assert firsts[8] >= first_end  # the second round waited for a slot


def test_read_thread_never_returns_more_than_max_chars(env: Env) -> None:
    big = "python3 -c \"print('x' * 50000)\""
    job = env.job(
        "pages",
        [
            {
                "match": "Job: pages",
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "read_thread",
                                "input": {"ref": "{{ref:w}}", "mode": m, "max_chars": 1000, **p},
                            }
                            for m, p in (
                                ("messages", {}),
                                ("tool_outputs", {}),
                                ("overview", {}),
                                ("grep", {"pattern": "x+"}),
                            )
                        ]
                    },
                    {"text": "read"},
                ],
            },
            {"match": "(?m)^Task w:", "turns": [bash(big), bash(big), submit("big outputs")]},
        ],
        [{"id": "w", "title": "W", "prompt": "print a lot"}],
    )
    doc = env.run("--json", "run", str(job)).json
    lead = doc["lead"]
    shown = env.run("--json", "show", lead).json
    pages = [
        b
        for m in shown["messages"]
        for b in m["content"]
        if b["type"] == "tool_result" and m is not shown["messages"][2]
    ]
    assert len(pages) == 4
    for page in pages:
        text = page["content"] if isinstance(page["content"], str) else page["content"][0]["text"]
        assert len(text) <= 1000
        assert "next page: T-" in text or "(end of range)" in text


def test_ask_thread_returns_only_citations_that_resolve(env: Env) -> None:
    job = env.job(
        "ask",
        [
            {
                "match": "Job: ask",
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "ask_thread",
                                "input": {"ref": "{{ref:w}}", "question": "what did it print?"},
                            }
                        ]
                    },
                    {"text": "ok"},
                ],
            },
            {"match": "(?m)^Task w:", "turns": [bash("echo the-answer-is-42"), submit("printed")]},
            {
                "match": "Question: what did it print",
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "read_thread",
                                "input": {"ref": "{{ref:w}}", "mode": "grep", "pattern": "answer"},
                            }
                        ]
                    },
                    {"text": "It printed the-answer-is-42 ({{ref:w}}#3), see also T-zzzzzzzz#9."},
                ],
            },
        ],
        [{"id": "w", "title": "W", "prompt": "print"}],
    )
    res = env.run("--json", "run", str(job))
    assert res.code == 0, res.stderr
    lead = env.run("--json", "show", res.json["lead"]).json
    answer = lead["messages"][4]["content"][0]
    text = answer["content"] if isinstance(answer["content"], str) else answer["content"][0]["text"]
    worker = res.json["workers"][0]["ref"]
    assert f"{worker}#3" in text
    assert "T-zzzzzzzz#9 [not found]" in text  # kept in place, marked
    assert f"{worker}#3 [not found]" not in text
    assert "citations checked:" in text
    readers = env.run("--json", "ls", "--kind", "reader").json
    assert len(readers) == 1 and readers[0]["parent"] == res.json["lead"]


def test_every_tool_use_of_a_finished_job_is_answered(env: Env) -> None:
    doc = env.run("--json", "run", str(two_task_job(env))).json

    async def check(store: Store) -> None:
        for t in await store.job_tree(doc["lead"][2:]):
            msgs = await store.messages(t.id)
            for i, m in enumerate(msgs):
                uses = {b.id for b in m.content if isinstance(b, ToolUseBlock)}
                if uses:
                    answered = {
                        b.tool_use_id for b in msgs[i + 1].content if isinstance(b, ToolResultBlock)
                    }
                    assert uses == answered

    db_read(env, check)
    assert json.loads(env.run("--json", "stats").stdout)["total"]["usage"]["input_tokens"] > 0
