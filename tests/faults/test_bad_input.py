"""A corpus of bad input: truncated and garbage job files, refs, scripted-model files, JSONL
imports, and model responses that are not valid JSON or name tools that do not exist.

Each is a clear one-line error (or, for a model's bad tool call, an error result the model
reads), never a traceback, and nothing is stored that breaks a later read: after the whole
corpus, ``ls``, ``show`` and ``export`` of every stored thread still work and the database
verifies.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Env
from tests.fakes.chat_api import FakeChatAPI
from tests.faults.conftest import integrity

GOOD_JOB = '[job]\nname = "ok"\ngoal = "g"\nworkspace = "ws"\nmodel = "scripted:m.json"\n'

JOB_FILES = {
    "truncated": GOOD_JOB[:30],
    "garbage": "\x00\x01\xff not toml at all ][",
    "empty": "",
    "missing goal": '[job]\nname = "x"\n',
    "wrong type": GOOD_JOB + 'max_parallel = "four"\n',
    "bad sandbox": GOOD_JOB + 'sandbox = "maybe"\n',
    "bad network": GOOD_JOB + 'network = "yes"\n',
    "bad worker sandbox": GOOD_JOB + '[job.worker]\nsandbox = "off"\n',
    "unknown key": GOOD_JOB + "colour = 1\n",
    "task without prompt": GOOD_JOB + '[[task]]\nid = "a"\ntitle = "t"\n',
}

SCRIPTS = {
    "truncated": '{"rules": [{"match": "Job", "turns": [',
    "garbage": "\x00garbage",
    "no rules": "{}",
    "bad regex": '{"rules": [{"match": "(", "turns": []}]}',
    "turn not an object": '{"rules": [{"match": "Job", "turns": [42]}]}',
}

IMPORTS = {
    "truncated": '{"role": "user", "content": "hi"}\n{"role": "assis',
    "garbage": "\x00\x01\x02\n",
    "unknown role": '{"role": "system", "content": "x"}\n',
    "unanswered tool call": (
        '{"role": "user", "content": "hi"}\n'
        '{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash",'
        ' "input": {}}]}\n'
        '{"role": "user", "content": "no result"}\n'
    ),
}

REFS = ["T-", "T-!!!", "T-abc", "T-01m8#x", "T-01m8#5-2", "#7", "T-" + "z" * 40]


def _clean(res: object) -> None:
    code, err = res.code, res.stderr  # type: ignore[attr-defined]
    assert code in (2, 3), (code, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("threadloom: error: "), err


@pytest.mark.parametrize("case", sorted(JOB_FILES))
def test_bad_job_files_are_one_clear_line(env: Env, case: str) -> None:
    (env.root / "m.json").write_text('{"rules": [{"match": ".", "turns": [{"text": "x"}]}]}')
    path = env.root / "bad.toml"
    path.write_bytes(JOB_FILES[case].encode("utf-8", "surrogateescape"))
    res = env.run("run", str(path))
    _clean(res)
    assert "bad.toml" in res.stderr
    assert not env.db.exists() or env.run("--json", "ls").json == []


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_bad_scripted_model_files_are_one_clear_line(env: Env, case: str) -> None:
    (env.root / "m.json").write_bytes(SCRIPTS[case].encode("utf-8", "surrogateescape"))
    (env.root / "job.toml").write_text(GOOD_JOB)
    res = env.run("run", str(env.root / "job.toml"))
    _clean(res)
    assert "m.json" in res.stderr


def test_bad_imports_and_refs_store_nothing_that_breaks_a_later_read(env: Env) -> None:
    for case, text in IMPORTS.items():
        path = env.root / f"{case.replace(' ', '_')}.jsonl"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        res = env.run("import", str(path))
        _clean(res)
    for ref in REFS:
        for cmd in (["show", ref], ["resume", ref]):
            _clean(env.run(*cmd))
    good = env.root / "good.jsonl"
    good.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "yo"}\n')
    assert env.run("import", str(good)).code == 0
    _reads_work(env)


def _reads_work(env: Env) -> None:
    listed = env.run("--json", "ls")
    assert listed.code == 0, listed.stderr
    for t in listed.json:
        for cmd in (["show", t["ref"], "--raw"], ["export", t["ref"]], ["tree", t["ref"]]):
            res = env.run(*cmd)
            assert res.code == 0 and "Traceback" not in res.stderr, (cmd, res.stderr)
    assert integrity(env.db) == "ok"


def test_model_replies_with_broken_arguments_and_unknown_tools_are_answered_not_fatal(
    env: Env,
) -> None:
    replies = [
        {"tool_calls": [{"name": "read_thread", "arguments": '{"ref": "T-'}]},
        {"tool_calls": [{"name": "no_such_tool", "arguments": "{}"}]},
        {"tool_calls": [{"name": "dispatch", "arguments": "[1, 2"}]},
        {"content": "the report"},
    ]
    with FakeChatAPI() as api:
        api.respond_with(replies)
        path = env.job("chat", [], model=f"openai:m@{api.base_url}")
        res = env.run("--json", "run", str(path))
        sent = json.dumps(api.requests[-1].json) if api.requests else ""
    assert res.code == 0, res.stderr
    assert res.json["report"] == "the report"
    assert "not valid JSON" in sent and "unknown tool" in sent
    _reads_work(env)
