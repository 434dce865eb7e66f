"""Re-import keeps the store in step with the source: two ``threadloom import`` processes of the
same sessions at once make each thread once; a Codex subagent imported before its parent is
hung under it when the parent comes; a session renamed at the source is renamed here (unless
the thread's title was given with ``--title``)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.importers import Session, import_sessions, parse, write_sessions
from orchestrator.importers._writer import Writer
from store import Kind, NewMessage, SourceTaken, Store, ToolResultBlock
from tests.importers.fixtures import ClaudeSession, CodexRollout
from tests.orchestrator.test_cli_helpers import invoke, json_out

ROOT = Path(__file__).resolve().parents[2]
PARENT = "019a0000-aaaa-7bbb-8ccc-0000000000a1"
CHILD = "019a0000-aaaa-7bbb-8ccc-0000000000a2"


def _sessions(root: Path, n: int) -> None:
    for i in range(n):
        s = ClaudeSession(root / "proj", f"0f7a6b8c-1111-4222-8333-{i:012d}")
        s.user(f"question {i}")
        for j in range(20):
            s.call(f"c{j}", "Bash", {"command": f"echo {j}"}, msg_id=f"m{i}-{j}")
            s.result(f"c{j}", f"out {j}")
        s.text("answer", msg_id=f"end{i}")
        s.write()


def test_two_concurrent_imports_of_the_same_sessions_make_each_thread_once(
    tmp_path: Path,
) -> None:
    src, db = tmp_path / "claude", tmp_path / "t.db"
    _sessions(src, 12)
    env = {**os.environ, "THREADLOOM_DB": str(db)}
    env.pop("CI", None)
    # created (and migrated) before, so both processes race on the import, not on the schema
    assert invoke("ls", db=db).exit_code == 0
    cmd = [sys.executable, "-m", "orchestrator", "--json", "import", str(src)]
    for _round in range(2):  # twice: the second round races two re-imports of a full store
        procs = [
            subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=240) for p in procs]
        for p, (out, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err.decode()
            assert len(json.loads(out)["threads"]) == 12
        listed = json_out(invoke("--json", "ls", "--limit", "1000", db=db))
        assert len(listed) == 12, sorted(t["title"] for t in listed)
        assert sorted(t["messages"] for t in listed) == [42] * 12


def _child(root: Path) -> CodexRollout:
    sub = CodexRollout(root, CHILD, parent_thread=PARENT)
    sub.user("explore the tests")
    sub.say("explored")
    sub.write()
    return sub


def _parent(root: Path) -> CodexRollout:
    r = CodexRollout(root, PARENT)
    r.user("plan the work")
    r.say("spawning a scout")
    r.write()
    return r


async def test_a_codex_subagent_imported_before_its_parent_is_hung_under_it_later(
    tmp_path: Path, store: Store
) -> None:
    child = _child(tmp_path / "a")
    parent = _parent(tmp_path / "b")
    (orphan,) = (await import_sessions(store, child.path)).threads
    assert orphan.info.kind == Kind.WORKER and orphan.info.parent_id is None
    fork = await store.fork(orphan.info.id)  # a thread of the orphan's own job goes along
    report = await import_sessions(store, parent.path)
    (lead,) = [w for w in report.threads if w.info.kind == Kind.LEAD]
    # the adopted subagent is reported with the session that adopted it
    assert [w.parent for w in report.threads if w.info.id == orphan.info.id] == [lead.info.ref]
    worker = await store.get_thread(orphan.info.id)
    assert worker.parent_id == lead.info.id
    assert worker.job_id == lead.info.id
    assert (await store.get_thread(fork.id)).job_id == lead.info.id
    assert {t.id for t in await store.job_tree(lead.info.id)} == {lead.info.id, worker.id, fork.id}
    # the same, importing the child's folder again after the parent's: reported under it
    again = await import_sessions(store, tmp_path)
    rows = {w.info.id: w for w in again.threads}
    assert rows[worker.id].parent == lead.info.ref
    assert len(await store.list_threads()) == 3


def test_a_codex_subagent_imported_before_its_parent_through_the_command(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    child = _child(tmp_path / "codex")
    first = json_out(invoke("--json", "import", str(child.path), db=db))
    assert first["threads"][0]["parent"] is None
    _parent(tmp_path / "codex")
    json_out(invoke("--json", "import", str(tmp_path / "codex"), db=db))
    shown = json_out(invoke("--json", "show", first["threads"][0]["ref"], db=db))
    lead = [t for t in json_out(invoke("--json", "ls", db=db)) if t["kind"] == "lead"]
    assert len(lead) == 1 and shown["parent"] == lead[0]["ref"]


def test_a_claude_code_session_renamed_at_the_source_is_renamed_on_reimport(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    s = ClaudeSession(tmp_path / "claude")
    s.user("fix the tokenizer")
    s.text("on it", msg_id="m1")
    s.user("first try")
    s.text("abandoned", msg_id="m2")
    s.user("second try", parent=json.loads(s.lines[1])["uuid"])
    s.text("better", msg_id="m3")
    s.write()
    first = json_out(invoke("--json", "import", str(s.path), db=db))
    titles = {t["ref"]: t["title"] for t in first["threads"]}
    assert sorted(titles.values()) == ["fix the tokenizer", "fix the tokenizer (rewound branch)"]
    s.raw({"type": "custom-title", "customTitle": "Tokenizer fix", "sessionId": s.session_id})
    s.write()
    again = json_out(invoke("--json", "import", str(s.path), db=db))
    assert {t["ref"]: t["title"] for t in again["threads"]} == {
        ref: t.replace("fix the tokenizer", "Tokenizer fix") for ref, t in titles.items()
    }
    for ref, title in titles.items():
        shown = json_out(invoke("--json", "show", ref, db=db))
        assert shown["title"] == title.replace("fix the tokenizer", "Tokenizer fix")
    assert sum(t["added"] for t in again["threads"]) == 0


def test_a_codex_thread_renamed_in_codexs_index_is_renamed_even_if_its_rollout_is_unchanged(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    codex = tmp_path / ".codex"
    r = _parent(codex / "sessions")
    index = codex / "session_index.jsonl"
    index.write_text(json.dumps({"id": PARENT, "thread_name": "Plan", "updated_at": "x"}) + "\n")
    (t,) = json_out(invoke("--json", "import", str(codex / "sessions"), db=db))["threads"]
    assert t["title"] == "Plan"
    with index.open("a") as f:
        f.write(json.dumps({"id": PARENT, "thread_name": "Plan v2", "updated_at": "y"}) + "\n")
    again = json_out(invoke("--json", "import", str(codex / "sessions"), db=db))
    assert [x["title"] for x in again["threads"]] == ["Plan v2"]
    assert json_out(invoke("--json", "show", t["ref"], db=db))["title"] == "Plan v2"
    # renamed in the rollout itself, later
    r.event(type="thread_name_updated", thread_name="Plan v3")
    r.write()
    json_out(invoke("--json", "import", str(codex / "sessions"), db=db))
    assert json_out(invoke("--json", "show", t["ref"], db=db))["title"] == "Plan v3"


def test_a_title_given_with_title_is_kept_when_the_source_is_renamed(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    r = CodexRollout(tmp_path / "codex")
    r.user("hello codex")
    r.say("hello")
    path = r.write()
    out = json_out(invoke("--json", "import", str(path), "--title", "Greeting", db=db))
    r.event(type="thread_name_updated", thread_name="Renamed in Codex")
    r.user("again")
    r.say("more")
    r.write()
    grown = json_out(invoke("--json", "import", str(path), db=db))
    assert [(t["ref"], t["added"]) for t in grown["threads"]] == [(out["ref"], 2)]
    assert json_out(invoke("--json", "show", out["ref"], db=db))["title"] == "Greeting"
    # asked for again: the given title wins once more
    json_out(invoke("--json", "import", str(path), "--title", "Greeting 2", db=db))
    assert json_out(invoke("--json", "show", out["ref"], db=db))["title"] == "Greeting 2"


async def test_the_database_keeps_one_thread_a_source_key(store: Store) -> None:
    first = await store.create_thread(kind=Kind.LEAD, title="a", source_key="codex:x")
    with pytest.raises(SourceTaken) as taken:
        await store.create_thread(kind=Kind.LEAD, title="b", source_key="codex:x")
    assert taken.value.thread_id == first.id and first.ref in str(taken.value)
    await store.create_thread(kind=Kind.LEAD, title="mine")  # threadloom's own: no key
    await store.create_thread(kind=Kind.LEAD, title="mine too")
    # the unique index is the guarantee, whoever writes the row
    path = tmp_db(store)
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO threads (id, kind, title, status, job_id, tools, pending_tool_ids,"
            " created_at, updated_at, source_key) VALUES ('01zz', 'lead', '', 'idle', '01zz',"
            " '[]', '[]', '2026-01-01', '2026-01-01', 'codex:x')"
        )


def tmp_db(store: Store) -> Path:
    assert store.db.path is not None
    return store.db.path


async def test_two_writers_of_one_session_at_once_make_its_threads_once(tmp_path: Path) -> None:
    """Two imports that both found nothing stored (the import lock not shared: the database
    reached by two paths) both go on to create the session's threads: the database refuses
    the second, which leaves the session to the import that made it."""
    root = tmp_path / "codex"
    r = CodexRollout(root, PARENT)
    r.user("plan the work")
    r.call("c1", "shell", {"command": ["ls"]})
    r.output("c1", "a\nb")
    r.say("done")
    r.write()
    sessions, _ = parse(root)
    db = tmp_path / "t.db"
    a, b = await Store.open(str(db)), await Store.open(str(db))
    try:
        wa, wb = Writer(a), Writer(b)
        await wa._known(), await wb._known()  # both read the empty store first
        out = await asyncio.gather(wa.write(sessions), wb.write(sessions))
        threads = await a.list_threads()
        assert len(threads) == 1
        assert {w.info.id for ws in out for w in ws} == {threads[0].id}
        assert len(await a.messages(threads[0].id)) == 4
    finally:
        await a.close()
        await b.close()


def _legacy(sessions: list[Session]) -> list[Session]:
    """``sessions`` as the mapping before 2 made them: each Codex output the JSON string the CLI
    wrote, the thread titled with its first user text (the environment block)."""
    for s in sessions:
        for b in s.branches:
            b.messages = [
                NewMessage(
                    role=m.role,
                    content=[
                        ToolResultBlock(tool_use_id=c.tool_use_id, content=RAW)
                        if isinstance(c, ToolResultBlock)
                        else c
                        for c in m.content
                    ],
                )
                for m in b.messages
            ]
        s.title = "<environment_context> <cwd>/home/someone</cwd> </environment_context>"
    return sessions


RAW = json.dumps({"output": "a\nb\n", "metadata": {"exit_code": 1, "duration_seconds": 0.1}})


async def test_a_thread_imported_by_an_older_mapping_is_retitled_and_extended_not_forked(
    tmp_path: Path, store: Store
) -> None:
    r = CodexRollout(tmp_path, PARENT)
    r.user("<environment_context>\n  <cwd>/home/someone</cwd>\n</environment_context>")
    r.user("list the files")
    r.call("c1", "shell", {"command": ["ls"]})
    r.output("c1", RAW)
    r.say("two files")
    r.write()
    (old,) = await write_sessions(store, _legacy(parse(r.path)[0]))
    task = old.info.task or {}
    imported = {k: v for k, v in task["source"]["imported"].items() if k != "mapping"}
    await store.update_thread(
        old.info.id, task={**task, "source": {**task["source"], "imported": imported}}
    )
    # the file as it was: read again all the same (its title follows the new rule)
    (same,) = (await import_sessions(store, tmp_path)).threads
    assert same.info.id == old.info.id and same.added == 0
    assert same.info.title == "list the files"
    # grown: extended where it stands, its stored outputs as they were (append-only)
    r.user("and the exit status?")
    r.call("c2", "shell", {"command": ["false"]})
    r.output("c2", RAW.replace('"c1"', '"c2"'))
    r.say("it failed")
    r.write()
    (grown,) = (await import_sessions(store, tmp_path)).threads
    assert grown.info.id == old.info.id and grown.added == 4
    assert len(await store.list_threads()) == 1
    results = [b for m in await store.messages(old.info.id) for b in m.tool_results()]
    assert [b.text for b in results] == [RAW, "a\nb\n[exit code: 1]"]
    assert (await import_sessions(store, tmp_path)).threads[0].added == 0
