"""A new user's first hour at the command line (issue 23 items 2, 10, 11 and 12), through the
real ``threadloom`` command in subprocesses on the scripted model: a failure is said once, a
failed test run is summed up by its exit status, the hints fit the job, queued workers show and
the lead is no worker, ``ls`` where there is no database creates none and names the file, the
tokens after a fork are the fork's, ``stats`` counts every thread, ``ask`` answers with checked
citations, and a terminal too narrow for whole refs prints their shortest unique ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Env, bash, submit
from tests.e2e.test_progress_tty import CSI, _run_on_a_terminal


def usage(n_in: int, n_out: int) -> dict[str, int]:
    return {"input_tokens": n_in, "output_tokens": n_out}


def _with_usage(turn: dict[str, Any], n_in: int, n_out: int) -> dict[str, Any]:
    return {**turn, "usage": usage(n_in, n_out)}


def _job(env: Env, *, tasks: int = 1, extra: str = "", task_turns: list[Any] | None = None) -> Path:
    """A job of ``tasks`` workers (ids a, b, …) that each run a failing test command and submit;
    every turn has a fixed usage (workers 100 in / 10 out a turn, the lead 50 / 5)."""
    turns = task_turns or [
        _with_usage(
            bash("printf 'test_one ok\\ntest_two ERROR\\nFAILED (errors=1)\\n'; exit 1"), 100, 10
        ),
        _with_usage(submit("found the failing test"), 100, 10),
    ]
    return env.job(
        "first",
        [
            {"match": "Job: first", "turns": [{"text": "the report", "usage": usage(50, 5)}]},
            {
                "match": "(?i)try the other way",
                "turns": [_with_usage(submit("tried it"), 7, 3)],
            },
            {
                "match": "Thread to read",
                "turns": [
                    {"text": "It failed at {{ref:a}}#3; see also T-zzzz#9.", "usage": usage(20, 2)}
                ],
            },
            {"match": "(?m)^Task ", "turns": turns},
        ],
        [{"id": chr(ord("a") + i), "title": f"Task {i}", "prompt": "p"} for i in range(tasks)],
        extra=extra,
    )


def _ran(env: Env, *args: str) -> dict[str, Any]:
    res = env.run("--json", *args)
    assert res.code == 0, res.stderr
    return res.json  # type: ignore[no-any-return]


# ----------------------------------------------------------------- a failure is said once


def test_a_fork_that_fails_says_why_once(env: Env) -> None:
    ran = _ran(env, "run", str(_job(env)))
    worker, lead = ran["workers"][0]["ref"], ran["lead"]
    for ref in (f"{worker}#3", lead):  # a worker's fork, and the lead's
        res = env.run("fork", ref, "Something the script does not know")
        assert res.code == 1, res.stderr  # it ran, and ended failed
        both = res.stdout + res.stderr
        assert both.count("no rule matches") == 1, both
        assert res.stderr.strip().splitlines()[-1].startswith("threadloom: error: T-")
        assert re.search(r"^failed: T-[0-9a-z]{26}  \(job ", res.stdout, re.M), res.stdout
        assert "Traceback" not in both and "crashed" not in both


# ----------------------------------------------------------------- show, hints, progress


def test_show_sums_a_failed_test_run_up_by_its_exit_status_and_the_line_that_tells(
    env: Env,
) -> None:
    worker = _ran(env, "run", str(_job(env)))["workers"][0]["ref"]
    shown = env.run("show", worker)
    assert shown.code == 0, shown.stderr
    assert "← bash · exit 1 · 4 lines · " in shown.stdout  # 3 and the exit code's
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("← bash"))
    assert line.endswith(" — FAILED (errors=1)"), line
    assert "test_one ok" not in line
    overview = env.run("show", f"{worker}#3", "--tools")
    assert "← bash · exit 1 " in overview.stdout


def test_run_ends_with_hints_that_fit_a_job_whose_workers_all_failed(env: Env) -> None:
    job = env.job(  # no rule answers the worker: it fails at its first model call
        "failing",
        [{"match": "Job: failing", "turns": [{"text": "the report"}]}],
        [{"id": "a", "title": "A", "prompt": "p"}],
    )
    res = env.run("run", str(job))
    assert res.code == 1, res.stderr  # every worker failed: the job did
    hints = res.stdout.split("\nnext:\n", 1)[1]
    assert "regression test" not in hints and "Try a different fix" not in hints
    worker = re.search(r"threadloom show (T-[0-9a-z]{26}) --tools +# why a ended failed", hints)
    assert worker is not None, hints
    assert f'threadloom resume {worker.group(1)} "<what to try next>"' in hints


def test_run_without_a_terminal_names_queued_workers_and_the_lead_is_no_worker(env: Env) -> None:
    res = env.run("run", str(_job(env, tasks=3, extra="max_parallel = 1")))
    assert res.code == 0, res.stderr
    queued = re.findall(r"^queued +(T-[0-9a-z]{26}) +worker", res.stderr, re.M)
    started = re.findall(r"^started +(T-[0-9a-z]{26}) +worker", res.stderr, re.M)
    assert len(queued) == 2 and len(started) == 3, res.stderr  # one ran, two waited
    for ref in queued:  # each waited first, then started
        assert res.stderr.index(f"queued   {ref}") < res.stderr.index(f"started  {ref}")


def test_a_terminal_shows_queued_workers_and_counts_the_lead_apart(env: Env) -> None:
    slow = [_with_usage(bash("sleep 1"), 100, 10), _with_usage(submit("slept"), 100, 10)]
    job = _job(env, tasks=2, extra="max_parallel = 1", task_turns=slow)
    code, out = _run_on_a_terminal(env, "run", str(job))
    assert code == 0, out[-2000:]
    plain = CSI.sub("", out).replace("\r", "\n")
    assert re.search(r"T-[0-9a-z]{26} .*queued: waits for a free slot", plain), plain[-3000:]
    assert "lead running · workers: 1 running, 1 queued" in plain, plain[-3000:]
    assert "2 running" not in plain  # the lead is never counted among the workers


# ----------------------------------------------------------------- ls, tokens, stats


def test_ls_where_there_is_no_database_creates_none_and_names_the_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADLOOM_")}
    where = tmp_path / ".threadloom" / "threads.db"
    for args, code in (
        (("ls",), 0),
        (("--json", "ls"), 0),
        (("search", "x"), 0),
        (("stats",), 0),
        (("show", "T-abcd"), 3),
        (("tree", "T-abcd"), 3),
        (("resume", "T-abcd", "go on"), 3),
        (("show", "T-a"), 2),  # a bad ref is said first
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == code, (args, proc.stderr)
        if code != 2:
            assert f"no database at {where} (" in proc.stderr, (args, proc.stderr)
        assert not (tmp_path / ".threadloom").exists(), args
        if args == ("--json", "ls"):
            assert proc.stdout == "[]\n"


def test_the_tokens_after_a_fork_are_the_forks_run_not_the_whole_jobs(env: Env) -> None:
    ran = _ran(env, "run", str(_job(env)))
    assert ran["usage"]["input_tokens"] == 250  # the job: 2 worker turns and the lead's
    fork = env.run("fork", f"{ran['workers'][0]['ref']}#3", "Try the other way")
    assert fork.code == 0, fork.stderr
    assert "tokens: 7 in, 3 out," in fork.stdout, fork.stdout
    as_json = _ran(env, "fork", f"{ran['workers'][0]['ref']}#3", "Try the other way")
    assert as_json["usage"]["input_tokens"] == 7 and as_json["usage"]["output_tokens"] == 3


def test_stats_counts_every_thread_of_a_job_as_tree_shows_them(env: Env) -> None:
    ran = _ran(env, "run", str(_job(env)))
    worker = ran["workers"][0]["ref"]
    assert env.run("fork", worker, "--no-run").code == 0  # a thread that used no tokens
    assert env.run("fork", f"{worker}#3", "unscripted").code == 1  # one that failed at once
    tree = _ran(env, "tree", ran["lead"])

    def count(node: dict[str, Any]) -> int:
        return 1 + sum(count(n) for n in node["children"] + node["forks"])

    assert count(tree) == 4
    stats = env.run("stats")
    assert stats.stdout.splitlines()[1].split()[:2] == [ran["lead"], "4"], stats.stdout
    assert [j["threads"] for j in _ran(env, "stats")["jobs"]] == [4]


# ----------------------------------------------------------------- ask


def test_ask_answers_with_checked_citations_through_the_leads_ask_thread(env: Env) -> None:
    ran = _ran(env, "run", str(_job(env)))
    worker = ran["workers"][0]["ref"]
    doc = _ran(env, "ask", worker, "Where did it fail?")
    assert set(doc) >= {"answer", "citations", "reader"}
    assert doc["citations"] == [f"{worker}#3"] and doc["unresolved"] == ["T-zzzz#9"]
    assert "T-zzzz#9 [not found]" in doc["answer"]
    assert doc["usage"]["input_tokens"] == 20  # the reader's run
    reader = _ran(env, "show", doc["reader"])
    assert reader["kind"] == "reader" and reader["parent"] == ran["lead"]
    text = env.run("ask", f"T-…{worker[-6:]}#2-3", "Where did it fail?")  # a range, by its end
    assert text.code == 0, text.stderr
    assert f"citations: {worker}#3" in text.stdout
    assert "did not resolve (marked [not found] above): T-zzzz#9" in text.stdout
    question = _ran(env, "show", re.findall(r"done: (T-[0-9a-z]{26})", text.stdout)[0] + "#1")
    assert question["messages"][0]["content"][0]["text"].startswith(
        f"Thread to read: {worker}#2-3\n"
    )


def test_ask_refuses_before_storing_anything(env: Env) -> None:
    ran = _ran(env, "run", str(_job(env)))
    worker = ran["workers"][0]["ref"]
    before = len(_ran(env, "ls"))
    for args, code, needle in (
        ((worker, "   "), 2, "the question is empty"),
        ((worker, "why?", "--model", "nope:x"), 2, "nope"),
        ((worker, "why?", "--model", "scripted:missing.json"), 2, "missing.json"),
        (("T-…zzzzzz", "why?"), 3, "no thread matches T-…zzzzzz"),
        (("T-…zz", "why?"), 2, "bad ref"),
    ):
        res = env.run("--json", "ask", *args)
        assert res.code == code, (args, res.stderr)
        assert needle in res.stderr and res.json["error"]["code"] == code, (args, res.stderr)
    assert len(_ran(env, "ls")) == before
    (env.root / "empty.json").write_text(json.dumps({"rules": []}))
    res = env.run("ask", worker, "why?", "--model", f"scripted:{env.root / 'empty.json'}")
    assert res.code == 1, res.stderr  # the reader ran and could not answer
    assert (res.stdout + res.stderr).count("no rule matches") == 1


# ----------------------------------------------------------------- refs by their end


def test_a_narrow_terminal_prints_the_shortest_unique_ends_of_refs(env: Env) -> None:
    table = "| task | worker |\n| --- | --- |\n| a | {{ref:a}} |\n| b | {{ref:b}} |\n"
    job = env.job(
        "refs",
        [
            {
                "match": "Job: refs",
                "turns": [{"text": "# Report\n\n" + table, "usage": usage(5, 5)}],
            },
            {"match": "(?m)^Task ", "turns": [_with_usage(submit("done"), 5, 5)]},
        ],
        [{"id": "a", "title": "A", "prompt": "p"}, {"id": "b", "title": "B", "prompt": "p"}],
    )
    ran = _ran(env, "run", str(job))
    refs = [w["ref"] for w in ran["workers"]]
    code, out = _run_on_a_terminal(env, "run", str(job), columns=40)
    assert code == 0, out[-2000:]
    plain = CSI.sub("", out).replace("\r", "\n")
    ends = re.findall(r"T-…[0-9a-z]{4,}", plain.split("Report", 1)[1])
    assert len(ends) >= 2, plain[-2500:]
    for end in ends:  # each names its thread, as every command takes it
        assert env.run("show", end).code == 0, end
    narrow_ls = _run_on_a_terminal(env, "ls", columns=50)[1]
    listed = re.findall(r"T-…[0-9a-z]{4,}", CSI.sub("", narrow_ls))
    assert len(listed) == len(_ran(env, "ls")), narrow_ls
    wide_ls = CSI.sub("", _run_on_a_terminal(env, "ls", columns=200)[1])
    assert "T-…" not in wide_ls and refs[0] in wide_ls
