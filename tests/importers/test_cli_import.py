"""``threadloom import PATH [--from …]`` on Claude Code and Codex sessions, end to end: the
``--json`` shape, then ``show``/``tree``/``search``/``fork``/``export --redact`` on what it made,
re-import, and the errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.importers.fixtures import ClaudeSession, CodexRollout
from tests.orchestrator.test_cli_helpers import assert_one_error_line, invoke, json_out, run_cli

SECRET = "sk-ant-api03-" + "Q" * 40


def project(root: Path) -> ClaudeSession:
    s = ClaudeSession(root / "-home-someone-project")
    s.raw({"type": "summary", "summary": "Tokenizer fix", "leafUuid": "elsewhere"})
    s.user("fix the tokenizer")
    s.call("task1", "Task", {"description": "Find the failing test", "prompt": "find"}, msg_id="m1")
    s.result("task1", "test_tokenizer fails on empty input")
    s.text(f"Fixed. (the key was {SECRET})", msg_id="m2")
    sub = s.subagent("a7", "task1")
    sub.user("find the failing test", isSidechain=True)
    sub.call("tu9", "Grep", {"pattern": "def test_"}, msg_id="s1")
    sub.result("tu9", "tests/test_tokenizer.py:3: def test_empty_zebra():")
    sub.text("It is test_empty_zebra.", msg_id="s2")
    s.write()
    return s


def test_import_a_claude_code_project_then_read_it_back(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = project(tmp_path / "claude")
    out = invoke("--json", "import", str(tmp_path / "claude"), db=db)
    assert out.exit_code == 0, out.output
    data = json_out(out)
    assert data["skipped"] == 0
    main, worker = data["threads"]
    assert data["ref"] == main["ref"] and data["messages"] == main["messages"] == 4
    assert main["kind"] == "lead" and main["parent"] is None
    assert worker["kind"] == "worker" and worker["parent"] == main["ref"]
    assert main["source"] == {
        "format": "claude-code",
        "session_id": s.session_id,
        "path": str(s.path),
        "key": f"claude-code:{s.session_id}",
        "unmodeled": {"toolUseResult": 1},
    }
    shown = json_out(invoke("--json", "show", worker["ref"], db=db))
    assert shown["source"]["format"] == "claude-code"
    assert shown["source"]["tool_use_id"] == "task1"
    assert shown["parent"] == main["ref"]
    tree = invoke("tree", main["ref"], db=db)
    assert worker["ref"] in tree.output and main["ref"] in tree.output
    hits = json_out(invoke("--json", "search", "zebra", db=db))
    assert {h["thread"] for h in hits} == {worker["ref"]}
    fork = json_out(invoke("--json", "fork", f"{worker['ref']}#3", "--no-run", db=db))
    assert fork["forked_from"] == {"ref": worker["ref"], "at": 3}
    assert shown["model"] == "anthropic:claude-sonnet-4-5-20250929"


def test_an_imported_thread_resumes_on_threadloom_runtime(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = project(tmp_path / "claude")
    ref = json_out(invoke("--json", "import", str(tmp_path / "claude"), db=db))["ref"]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"match": "carry on", "turns": [{"text": "on it"}]}]}))
    out = invoke("--json", "resume", ref, "carry on", "--model", f"scripted:{script}", db=db)
    assert out.exit_code == 0, out.output
    assert json_out(out)["ref"] == ref
    shown = json_out(invoke("--json", "show", ref, db=db))
    assert [m["role"] for m in shown["messages"]][-2:] == ["user", "assistant"]
    assert shown["messages"][-1]["content"][0]["text"] == "on it"
    again = json_out(invoke("--json", "import", str(tmp_path / "claude"), db=db))
    assert sum(t["added"] for t in again["threads"]) == 0  # the resumed thread is left alone
    s.user("and the docs?")
    s.text("Updated.", msg_id="m3")
    s.write()
    grown = json_out(invoke("--json", "import", str(tmp_path / "claude"), db=db))
    (fork,) = [t for t in grown["threads"] if t["added"]]
    assert fork["forked_from"] == {"ref": ref, "at": 4} and fork["added"] == 2
    assert len(json_out(invoke("--json", "show", ref, db=db))["messages"]) == 6  # untouched


def test_reimport_is_unchanged_and_grows_with_the_session(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = project(tmp_path / "claude")
    first = json_out(invoke("--json", "import", str(tmp_path / "claude"), db=db))
    again = invoke("import", str(tmp_path / "claude"), db=db)
    assert again.exit_code == 0
    assert "2 threads (0 new, 0 extended, 2 unchanged)" in again.output
    s.user("and the docs?")
    s.text("Updated.", msg_id="m3")
    s.write()
    grown = json_out(invoke("--json", "import", str(s.path), db=db))
    assert grown["ref"] == first["ref"] and grown["messages"] == 6
    assert len(json_out(invoke("--json", "ls", db=db))) == 2


def test_secrets_in_imported_sessions_are_masked_on_request(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    project(tmp_path / "claude")
    ref = json_out(invoke("--json", "import", str(tmp_path / "claude"), db=db))["ref"]
    assert SECRET in invoke("show", ref, db=db).output  # the record, as stored
    for args in (("show", ref, "--redact"), ("export", ref, "--redact")):
        out = invoke(*args, db=db).output
        assert SECRET not in out and "sk-ant-…[REDACTED]" in out


def test_codex_rollouts_with_from_and_title(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    r = CodexRollout(tmp_path / "codex")
    r.user("hello codex")
    r.say("hello")
    r.lines.append("{broken")
    path = r.write()
    out = json_out(
        invoke("--json", "import", str(path), "--from", "codex", "--title", "Greeting", db=db)
    )
    assert out["skipped"] == 1
    (t,) = out["threads"]
    assert t["title"] == "Greeting" and t["source"]["format"] == "codex"
    shown = json_out(invoke("--json", "show", out["ref"], db=db))
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]


def test_errors_name_the_path(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    empty = tmp_path / "empty"
    empty.mkdir()
    out = invoke("import", str(empty), db=db)
    assert out.exit_code == 2
    assert_one_error_line(out.stderr, str(empty), "no Claude Code or Codex session files")
    out = invoke("import", str(empty), "--from", "jsonl", db=db)
    assert out.exit_code == 2
    assert_one_error_line(out.stderr, "--from jsonl imports one file")


def test_a_threadloom_transcript_still_imports_as_before(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    f = tmp_path / "t.jsonl"
    f.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "yo"}\n')
    out = json_out(invoke("--json", "import", str(f), db=db))
    assert out["messages"] == 2 and out["title"] == "imported from t.jsonl"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "robot", "content": "x"}\n')
    res = invoke("import", str(bad), db=db)
    assert res.exit_code == 2
    assert_one_error_line(res.stderr, "bad.jsonl:2")


def test_the_fast_read_path_shows_source_too(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    project(tmp_path / "claude")
    worker = json_out(invoke("--json", "import", str(tmp_path / "claude"), db=db))["threads"][1]
    fast = run_cli("--json", "show", worker["ref"], db=db)  # the real process: the fast path
    assert fast.returncode == 0, fast.stderr
    assert json_out(fast) == json_out(invoke("--json", "show", worker["ref"], db=db))
    assert json_out(fast)["source"]["tool_use_id"] == "task1"
    text = run_cli("show", worker["ref"], db=db).stdout
    # ages ("42s") are read a moment apart by the two paths: compared without their figure
    assert _ageless(text) == _ageless(invoke("show", worker["ref"], db=db).output)


def _ageless(text: str) -> str:
    return re.sub(r"\b\d+[smhdw]\b", "<age>", text)
    assert "  source    claude-code " in text


def test_a_session_file_forced_to_another_format_or_holding_nothing_is_exit_2(
    tmp_path: Path,
) -> None:
    """``--from codex`` on a Claude Code session (and the reverse) said exit 0 with nothing
    imported; so did a session file with no conversation in it. Each is now one line, exit 2,
    naming the file and what to do, and nothing is stored."""
    db = tmp_path / "t.db"
    claude = project(tmp_path / "claude").path
    rollout = CodexRollout(tmp_path / "codex")
    rollout.user("hello codex")
    rollout.say("hello")
    codex = rollout.write()
    bare = ClaudeSession(tmp_path / "bare")
    bare.raw({"type": "summary", "summary": "nothing else", "leafUuid": "x"})
    bare.write()
    for path, fmt, says in (
        (
            claude,
            "codex",
            "reads as a Claude Code session, not a Codex rollout: use --from claude-code",
        ),
        (
            codex,
            "claude-code",
            "reads as a Codex rollout, not a Claude Code session: use --from codex",
        ),
        (bare.path, "claude-code", "no conversation to import as a Claude Code session"),
    ):
        out = invoke("--json", "import", str(path), "--from", fmt, db=db)
        assert out.exit_code == 2, out.output
        assert_one_error_line(out.stderr, str(path), says)
    assert json_out(invoke("--json", "ls", db=db)) == []
    # the same files with the right format (or none) import as before
    assert invoke("import", str(claude), db=db).exit_code == 0
    again = invoke("--json", "import", str(claude), "--from", "claude-code", db=db)
    assert again.exit_code == 0 and json_out(again)["unchanged_files"] >= 1
