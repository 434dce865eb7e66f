"""``ls``, ``show``, ``tree``, ``search``, ``stats`` and ``migrate`` on a real SQLite file."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from tests.orchestrator.test_cli_helpers import (
    BIG_OUTPUT,
    Sample,
    invoke,
    json_out,
    run_cli,
)

USAGE_KEYS = {
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
}


# ----------------------------------------------------------------- ls


def test_ls_prints_an_aligned_plain_table_newest_first(sample: Sample) -> None:
    proc = run_cli("ls", db=sample.path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["REF", "KIND", "STATUS", "MSGS", "AGE", "TITLE"]
    refs = [line.split()[0] for line in lines[1:]]
    assert refs == [sample.ref(n) for n in ("fork", "worker", "lead", "other")]
    title_col = lines[0].index("TITLE")
    assert lines[2][title_col:] == "Fix the tokenizer"
    assert all(line == line.rstrip() for line in lines)
    worker_row = lines[2].split()
    assert worker_row[1:4] == ["worker", "done", "6"]


def test_ls_json_has_the_spec_keys_and_filters(sample: Sample) -> None:
    rows = json_out(invoke("--json", "ls", db=sample.path))
    assert [r["ref"] for r in rows] == [sample.ref(n) for n in ("fork", "worker", "lead", "other")]
    spec_keys = {
        "ref",
        "kind",
        "status",
        "title",
        "parent",
        "forked_from",
        "created_at",
        "messages",
    }
    assert all(spec_keys <= set(r) for r in rows)
    by_ref = {r["ref"]: r for r in rows}
    fork = by_ref[sample.ref("fork")]
    assert fork["forked_from"] == {"ref": sample.ref("worker"), "at": 3}
    assert fork["messages"] == 4
    assert by_ref[sample.ref("worker")]["parent"] == sample.ref("lead")
    assert by_ref[sample.ref("lead")]["parent"] is None

    done = json_out(invoke("ls", "--status", "done", "--json", db=sample.path))
    assert [r["ref"] for r in done] == [sample.ref("worker")]
    leads = json_out(invoke("--json", "ls", "--kind", "lead", db=sample.path))
    assert [r["ref"] for r in leads] == [sample.ref("lead")]
    job = json_out(invoke("--json", "ls", "--job", sample.prefix("fork"), db=sample.path))
    assert {r["ref"] for r in job} == {sample.ref(n) for n in ("lead", "worker", "fork")}
    limited = invoke("ls", "--limit", "2", db=sample.path)
    assert len(limited.stdout.splitlines()) == 3
    assert "--limit 0" in limited.stderr


# ----------------------------------------------------------------- show


def test_show_prints_header_result_usage_and_one_line_tool_calls(sample: Sample) -> None:
    proc = run_cli("show", sample.prefix("worker"), db=sample.path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"{sample.ref('worker')}  worker  done\n")
    assert f"parent    {sample.ref('lead')}" in out
    assert "result  done" in out
    assert "split ignores tabs" in out and f"evidence: {sample.ref('worker')}#3" in out
    assert "modified  src/tok.py" in out
    assert "$ pytest -q  →  12 passed" in out
    assert "a regex split was slower" in out and "should tabs count as words?" in out
    assert "in 500 · out 100" in out
    headers = re.findall(r"^#(\d+) (user|assistant)", out, flags=re.M)
    assert headers == [
        ("1", "user"),
        ("2", "assistant"),
        ("3", "user"),
        ("4", "assistant"),
        ("5", "user"),
        ("6", "assistant"),
    ]
    assert "[thinking · 27 chars]" in out
    assert "Let me run the tests first." not in out
    assert '→ bash(command="pytest -q")' in out
    assert "← bash · ok · 200 lines · 3,199 chars — output line 000" in out
    assert "← write_file · error · 1 line · 17 chars — permission denied" in out
    assert "output line 199" not in out  # one line per result by default
    call = '→ write_file(path="src/tok.py", content="def parse(text): return text.split() def'
    assert call + ' parse(…")' in out


def test_show_json_has_the_spec_shape_with_blocks_as_stored(sample: Sample) -> None:
    doc = json_out(invoke("--json", "show", sample.ref("worker"), db=sample.path))
    spec = {
        "ref",
        "kind",
        "status",
        "title",
        "parent",
        "forked_from",
        "result",
        "usage",
        "messages",
    }
    assert spec <= set(doc)
    assert doc["ref"] == sample.ref("worker")
    assert doc["forked_from"] is None
    assert doc["parent"] == sample.ref("lead")
    assert set(doc["usage"]) == USAGE_KEYS
    assert doc["usage"]["input_tokens"] == 500
    assert doc["result"]["status"] == "done"
    assert doc["result"]["findings"][0]["evidence"] == [f"{sample.ref('worker')}#3"]
    assert [m["seq"] for m in doc["messages"]] == [1, 2, 3, 4, 5, 6]
    assert doc["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me run the tests first.", "signature": "sig"},
        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "pytest -q"}},
    ]
    assert doc["messages"][2]["content"][0]["content"] == BIG_OUTPUT


@pytest.mark.parametrize(
    ("anchor", "seqs"),
    [("#3", [3]), ("#2-4", [2, 3, 4]), ("#5-", [5, 6]), ("#1-1", [1])],
)
def test_show_a_range_shows_only_those_messages(
    sample: Sample, anchor: str, seqs: list[int]
) -> None:
    doc = json_out(invoke("show", sample.ref("worker") + anchor, "--json", db=sample.path))
    assert [m["seq"] for m in doc["messages"]] == seqs
    assert doc["ref"] == sample.ref("worker")
    text = invoke("show", sample.ref("worker") + anchor, db=sample.path).stdout
    assert re.findall(r"^#(\d+) ", text, flags=re.M) == [str(s) for s in seqs]
    assert f"showing #{seqs[0]}-{seqs[-1]}" in text


def test_show_range_names_the_tool_of_a_result_whose_call_is_outside_it(sample: Sample) -> None:
    text = invoke("show", sample.ref("worker") + "#3", db=sample.path).stdout
    assert "← bash · ok · 200 lines" in text


def test_show_tools_caps_outputs_with_a_marker_naming_the_ref(sample: Sample) -> None:
    text = invoke("show", sample.ref("worker"), "--tools", db=sample.path).stdout
    assert "    output line 000" in text and "    output line 019" in text
    assert "    output line 180" in text and "    output line 199" in text
    assert "output line 100" not in text
    marker = (
        f"[… 160 lines, 2,561 chars omitted; the whole output: threadloom show"
        f" {sample.ref('worker')}#3 --raw]"
    )
    assert marker in text
    assert "    def parse(text):" in text  # the shortened write_file content, whole
    assert "    permission denied" in text


def test_show_raw_prints_tool_outputs_and_thinking_whole(sample: Sample) -> None:
    text = invoke("show", sample.ref("worker"), "--raw", db=sample.path).stdout
    assert BIG_OUTPUT in text
    assert "omitted" not in text
    assert "Let me run the tests first." in text


def test_show_a_fork_includes_and_marks_the_inherited_history(sample: Sample) -> None:
    proc = run_cli("show", sample.ref("fork"), db=sample.path)
    assert proc.returncode == 0, proc.stderr
    assert f"fork of   {sample.ref('worker')}#3" in proc.stdout
    assert f"#1 user  (from {sample.ref('worker')})" in proc.stdout
    assert f"#3 user  (from {sample.ref('worker')})" in proc.stdout
    assert "#4 user\nTry a different fix" in proc.stdout
    doc = json_out(invoke("--json", "show", sample.ref("fork"), db=sample.path))
    assert doc["forked_from"] == {"ref": sample.ref("worker"), "at": 3}
    assert [m["seq"] for m in doc["messages"]] == [1, 2, 3, 4]
    assert doc["messages"][3]["content"] == [{"type": "text", "text": "Try a different fix"}]


# ----------------------------------------------------------------- tree


def test_tree_shows_spawn_and_fork_edges_with_status_and_tokens(sample: Sample) -> None:
    text = invoke("tree", sample.ref("fork"), db=sample.path).stdout
    lines = text.splitlines()
    assert lines[0].startswith(f"{sample.ref('lead')}  lead  idle  fix-parser")
    assert "5.2k tok" in lines[0]
    assert lines[1].startswith(f"└─ {sample.ref('worker')}  worker  done")
    assert "600 tok" in lines[1]
    assert lines[2].startswith(f"   └─ ⑂ fork of #3  {sample.ref('fork')}  worker  idle")
    assert lines[2].endswith("◀")
    assert sample.ref("other") not in text

    doc = json_out(invoke("--json", "tree", sample.ref("worker"), db=sample.path))
    assert doc["ref"] == sample.ref("lead")
    assert set(doc["usage"]) == USAGE_KEYS
    assert doc["forks"] == []
    (worker,) = doc["children"]
    assert (worker["ref"], worker["kind"], worker["status"]) == (
        sample.ref("worker"),
        "worker",
        "done",
    )
    assert worker["children"] == []
    (fork,) = worker["forks"]
    assert fork["ref"] == sample.ref("fork")
    assert fork["forked_from"] == {"ref": sample.ref("worker"), "at": 3}
    assert fork["children"] == fork["forks"] == []


# ----------------------------------------------------------------- search


def test_search_lists_hits_as_refs_with_snippets(sample: Sample) -> None:
    text = invoke("search", "tokenizer whitespace", db=sample.path).stdout
    hit = "assistant  The ⟦tokenizer⟧ splits on ⟦whitespace⟧ only."
    assert text.splitlines()[0] == f"{sample.ref('worker')}#6  {hit}"
    hits = json_out(invoke("--json", "search", "output line", db=sample.path))
    assert {(h["ref"], h["thread"], h["seq"]) for h in hits} == {
        (f"{sample.ref('worker')}#3", sample.ref("worker"), 3)
    }
    assert "output" in [hits[0]["snippet"][a:b] for a, b in hits[0]["marks"]]
    assert (
        json_out(invoke("--json", "search", "zebra", "--job", sample.ref("lead"), db=sample.path))
        == []
    )
    assert len(json_out(invoke("--json", "search", "zebra", db=sample.path))) == 1
    assert len(json_out(invoke("--json", "search", "fix", "--limit", "1", db=sample.path))) == 1


# ----------------------------------------------------------------- stats


def test_stats_sums_tokens_cost_and_cache_share_per_thread_and_job(sample: Sample) -> None:
    doc = json_out(invoke("--json", "stats", db=sample.path))
    by_ref = {t["ref"]: t for t in doc["threads"]}
    # every thread of each job that used tokens, as tree shows them: the fork used none
    assert set(by_ref) == {sample.ref(n) for n in ("lead", "worker", "fork")}
    assert by_ref[sample.ref("fork")]["usage"]["input_tokens"] == 0
    assert by_ref[sample.ref("lead")]["usage"]["cache_read_input_tokens"] == 3000
    assert by_ref[sample.ref("lead")]["cost_usd"] == pytest.approx(0.02)
    assert by_ref[sample.ref("lead")]["cache_read_share"] == pytest.approx(3000 / 5000)
    assert doc["total"]["usage"] == {
        "input_tokens": 1500,
        "output_tokens": 300,
        "cache_read_input_tokens": 3000,
        "cache_creation_input_tokens": 1000,
    }
    assert doc["total"]["cost_usd"] == pytest.approx(0.021)
    assert [(j["ref"], j["threads"]) for j in doc["jobs"]] == [(sample.ref("lead"), 3)]

    job = json_out(invoke("--json", "stats", sample.ref("fork"), db=sample.path))
    assert {t["ref"] for t in job["threads"]} == {sample.ref(n) for n in ("lead", "worker", "fork")}
    assert job["total"]["cost_usd"] == pytest.approx(0.021)

    text = invoke("stats", sample.ref("lead"), db=sample.path).stdout.splitlines()
    assert text[0].split()[:3] == ["THREAD", "KIND", "TITLE"]
    assert text[-1].split() == [
        "job",
        "total",
        "1,500",
        "300",
        "3,000",
        "1,000",
        "55%",
        "$0.0210",
        "—",
    ]
    summary = invoke("stats", db=sample.path).stdout.splitlines()
    assert summary[0].split()[:3] == ["JOB", "THREADS", "TITLE"]
    assert summary[1].split()[:4] == [sample.ref("lead"), "3", "fix-parser", "1,500"]


# ----------------------------------------------------------------- migrate and --db


def test_default_database_is_created_under_the_cwd_and_migrate_reports_revisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_cli("--json", "migrate", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    doc = json_out(first)
    db = tmp_path / ".threadloom" / "threads.db"
    assert doc["database"] == str(db)
    assert (doc["before"], doc["upgraded"]) == ("base", True)
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    monkeypatch.chdir(tmp_path)
    again = invoke("migrate")
    assert again.exit_code == 0, again.stderr
    assert again.stdout == f"{db}: schema already at the newest revision ({doc['after']})\n"


def test_threadloom_db_env_names_the_database(sample: Sample) -> None:
    result = invoke("--json", "ls", THREADLOOM_DB=str(sample.path))
    assert len(json_out(result)) == 4
