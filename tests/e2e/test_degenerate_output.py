"""A model that repeats itself, or keeps hitting the output limit (issue 26 item 2): the real
``threadloom run`` in a subprocess against the loopback FakeChatAPI. A reply that loops is
stopped at once — no continuation asked, the thread failed with one line naming it and what was
seen; honest replies cut off by the output limit get at most two continuations."""

from __future__ import annotations

import itertools
from typing import Any

from tests.fakes.chat_api import FakeChatAPI
from tests.workers.test_repetition import BLOCK, looping

from .conftest import Env


def _error_line(stderr: str) -> str:
    [line] = [x for x in stderr.splitlines() if x.startswith("threadloom: error: ")]
    return line


def test_a_lead_looping_to_the_output_limit_keeps_what_it_said_once_and_says_so(env: Env) -> None:
    """A lead's text is its report: cut off inside a loop, the reply is kept up to where the
    loop began again — no continuation asked — and a warning names the thread and the loop."""
    with FakeChatAPI() as api:
        api.respond_with(lambda _: {"content": looping(), "finish_reason": "length"})
        res = env.run("--json", "run", str(env.job("loop", [], model=f"openai:m@{api.base_url}")))
        requests = len(api.requests)
    assert res.code == 0, res.stderr
    lead = res.json["lead"]
    assert res.json["report"] == ("Here is the result of the task:\n\n" + BLOCK).strip()
    said = f"{lead}: the model repeated the same {len(BLOCK)}-character block 60 times until"
    assert said in res.stderr and "turn.restated" in res.stderr
    assert "Traceback" not in res.stderr
    assert requests == 1  # no "continue exactly where it stopped" after a loop
    assert env.run("--json", "show", lead).json["status"] == "done"


def test_a_loop_that_ends_by_itself_stops_the_thread_naming_it(env: Env) -> None:
    """Not cut off: the model looped and stopped on its own. Its thread fails, one line."""
    with FakeChatAPI() as api:
        api.respond_with(lambda _: {"content": looping(), "finish_reason": "stop"})
        res = env.run("--json", "run", str(env.job("stop", [], model=f"openai:m@{api.base_url}")))
    assert res.code == 1, res.stderr
    lead = res.json["lead"]
    said = f"{lead}: the model repeated the same {len(BLOCK)}-character block 60 times; stopped"
    assert said in _error_line(res.stderr)
    shown = env.run("--json", "show", lead)
    assert shown.json["status"] == "failed"
    assert shown.json["error"] == said


def test_honest_replies_cut_off_by_the_limit_get_two_continuations_then_stop(env: Env) -> None:
    counter = itertools.count()

    def reply(_: dict[str, Any]) -> dict[str, Any]:
        n = next(counter)
        lines = "".join(
            f"step {n}.{i}: checked module_{i}.py, {i * 7 % 13} findings\n" for i in range(200)
        )
        return {"content": lines, "finish_reason": "length"}

    with FakeChatAPI() as api:
        api.respond_with(reply)
        res = env.run("--json", "run", str(env.job("cut", [], model=f"openai:m@{api.base_url}")))
        sent = [r.json["messages"][-1]["content"] for r in api.requests]
    assert res.code == 1, res.stderr
    lead = res.json["lead"]
    line = _error_line(res.stderr)
    assert f"{lead}: 3 replies hit the output-token limit (2 continuations asked); stopped" in line
    assert len(sent) == 3
    assert all(s.startswith("Your reply was cut off") for s in sent[1:])


def test_a_looping_worker_fails_naming_itself_and_the_lead_goes_on_to_its_report(
    env: Env,
) -> None:
    dispatch = {"name": "dispatch", "input": {"tasks": [{"id": "x", "title": "X", "prompt": "p"}]}}
    rules = [{"match": "Job: wloop", "turns": [{"tool_calls": [dispatch]}, {"text": "Report."}]}]
    with FakeChatAPI() as api:
        api.respond_with(lambda _: {"content": looping(), "finish_reason": "length"})
        path = env.job("wloop", rules)
        res = env.run("--json", "run", str(path), "--worker-model", f"openai:m@{api.base_url}")
        requests = len(api.requests)
    assert res.code == 1, res.stderr  # a worker failed
    assert res.json["report"] == "Report."
    [worker] = res.json["workers"]
    assert worker["status"] == "failed"
    said = f"{worker['ref']}: the model repeated the same {len(BLOCK)}-character block 60 times"
    assert worker["summary"].startswith(said)
    assert requests == 1


def test_a_worker_making_the_same_call_turn_after_turn_is_told_then_stopped(env: Env) -> None:
    """The 0.5B model's loop of issue 26, as the server sent it: the same ``read_file`` of the
    workspace, turn after turn. The third is answered with a tool error naming the output it
    already has; the fourth fails the worker with one line naming it; the lead reports."""
    dispatch = {"name": "dispatch", "input": {"tasks": [{"id": "x", "title": "X", "prompt": "p"}]}}
    rules = [{"match": "Job: rcall", "turns": [{"tool_calls": [dispatch]}, {"text": "Report."}]}]
    same = {"tool_calls": [{"name": "read_file", "arguments": {"path": "."}}]}
    with FakeChatAPI() as api:
        api.respond_with(lambda _: same)
        path = env.job("rcall", rules)
        res = env.run("--json", "run", str(path), "--worker-model", f"openai:m@{api.base_url}")
        told = [r["messages"][-1]["content"] for r in api.chat_requests]
    assert res.code == 1, res.stderr
    assert res.json["report"] == "Report."
    [worker] = res.json["workers"]
    said = f"{worker['ref']}: the model made the same call (read_file) 4 times in a row; stopped"
    assert worker["status"] == "failed" and worker["summary"] == said
    assert len(told) == 4  # four replies asked for, three calls answered, none run a fifth time
    assert "is a directory" in told[1] and "is a directory" in told[2]
    assert "not run: you made this same call (read_file with the same input) 3 times" in told[3]
    assert f"you already have its output at [{worker['ref']}#5]" in told[3]


# what Qwen2.5-Coder 1.5B wrote as the lead of issue 26's count job: a good report, then the same
# report again until the output limit — two copies a reply, under the loop detector's six
REPORT = (
    "## Report\n\n"
    "- Task `count` ({ref}): failed. The worker ran `python -m unittest`: 39 tests ran, with 1"
    " failure (test_modulo_binds_like_multiplication) and 2 errors (the tokenizer rejects"
    " '.'), at {ref}#3; the check verified its one claim.\n"
    "- Root cause: not investigated; the task asked only for the counts.\n"
    "- Open: the failure and the errors are unfixed.\n\n"
)


def test_a_lead_that_restates_its_report_to_the_limit_ends_with_it_once(env: Env) -> None:
    """The report as written once is the job's report: the reply is read as ending where it
    begins again (the stored reply is kept whole), with no continuation asked."""
    report = REPORT.format(ref="its thread")  # refs that resolve nowhere would be marked
    said = "Here is the report.\n\n" + report + report + report[:150]
    with FakeChatAPI() as api:
        api.respond_with(lambda _: {"content": said, "finish_reason": "length"})
        path = env.job("restate", [], model=f"openai:m@{api.base_url}")
        res = env.run("--json", "run", str(path))
        requests = len(api.requests)
    assert res.code == 0, res.stderr
    assert res.json["report"] == ("Here is the report.\n\n" + report).rstrip()
    assert requests == 1
    shown = env.run("--json", "show", res.json["lead"], "--raw")
    assert shown.json["status"] == "done"
    [stored] = [m for m in shown.json["messages"] if m["role"] == "assistant"]
    assert stored["content"][0]["text"] == said.strip()  # append-only: the reply as it came


def test_a_reply_asked_to_continue_that_begins_again_is_stopped_naming_it(env: Env) -> None:
    """One long copy per reply: the first is cut off, and asked to continue, the model writes
    it again from the start. Stopped at the second reply, not the third cut-off."""
    report = "".join(f"- finding {i}: module_{i}.py has {i * 7 % 13} issues\n" for i in range(300))
    with FakeChatAPI() as api:
        api.respond_with(lambda _: {"content": report, "finish_reason": "length"})
        path = env.job("restart", [], model=f"openai:m@{api.base_url}")
        res = env.run("--json", "run", str(path))
        requests = len(api.requests)
    assert res.code == 1, res.stderr
    lead = res.json["lead"]
    said = (
        f"{lead}: asked to continue its cut-off reply, the model wrote it again from the start;"
        " stopped"
    )
    assert said in _error_line(res.stderr)
    assert requests == 2
    assert env.run("--json", "show", lead).json["error"] == said
