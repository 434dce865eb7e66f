"""Exit codes, one-line errors, ``--json`` errors, the plumbing, and a fast, SDK-free start."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli import COMMANDS, Output, command, main, run_async, run_command
from orchestrator.errors import EXIT_CODES, exit_code_for
from store import Status, Store
from tests.orchestrator.test_cli_helpers import (
    Sample,
    assert_one_error_line,
    clean_env,
    invoke,
    json_out,
    run_cli,
)

# ----------------------------------------------------------------- through the real command


def test_bad_refs_exit_2_or_3_with_one_line_and_json_errors(sample: Sample) -> None:
    ambiguous = f"T-{sample.lead[:4]}"
    cases = [
        (["show", "T-x!"], 2, "bad ref 'T-x!'"),
        (["--json", "tree", ambiguous], 3, f"{ambiguous} is ambiguous: "),
    ]
    for args, code, needle in cases:
        proc = run_cli(*args, db=sample.path)
        assert proc.returncode == code, (args, proc.stderr)
        line = assert_one_error_line(proc.stderr, needle)
        if "--json" in args:
            error = json.loads(proc.stdout)["error"]
            assert error == {"code": code, "message": line.removeprefix("threadloom: error: ")}
            assert all(
                sample.ref(n) in error["message"] for n in ("lead", "worker", "fork", "other")
            )
        else:
            assert proc.stdout == ""


def test_unknown_and_ambiguous_prefixes_exit_3_listing_candidates(sample: Sample) -> None:
    unknown = invoke("show", "T-zzzz", db=sample.path)
    assert (unknown.exit_code, unknown.stdout) == (3, "")
    assert_one_error_line(unknown.stderr, "no thread matches T-zzzz")
    ambiguous = invoke("--json", "ls", "--job", f"T-{sample.lead[:4]}", db=sample.path)
    assert ambiguous.exit_code == 3
    message = assert_one_error_line(ambiguous.stderr, "is ambiguous: ")
    assert json_out(ambiguous)["error"]["message"] == message.removeprefix("threadloom: error: ")
    assert all(sample.ref(n) in message for n in ("lead", "worker", "fork", "other"))


def test_a_database_directory_that_does_not_exist_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "threads.db"
    proc = run_cli("--json", "ls", db=missing)
    assert proc.returncode == 2
    assert_one_error_line(proc.stderr, "database directory does not exist", str(missing.parent))
    assert json.loads(proc.stdout)["error"]["code"] == 2
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    "url", ["sqlite+aiosqlite://", "sqlite:///:memory:", "mysql://localhost/threads"]
)
def test_a_database_url_threadloom_cannot_use_is_one_line_exit_2(url: str) -> None:
    proc = run_cli("--json", "ls", db=url)
    assert proc.returncode == 2
    line = assert_one_error_line(proc.stderr, url.split(":")[0])
    assert "memory" in line or "unsupported database URL" in line
    assert json.loads(proc.stdout)["error"]["code"] == 2


def test_help_and_ls_do_not_import_the_anthropic_sdk(sample: Sample) -> None:
    script = shutil.which("threadloom", path=str(Path(sys.executable).parent))
    assert script is not None, "the console script is installed"
    runs = {
        "help": [script, "--help"],  # the console script itself
        "ls": ["-m", "orchestrator", "--db", str(sample.path), "ls"],
    }
    for name, args in runs.items():
        done = subprocess.run(
            [sys.executable, "-X", "importtime", *args],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        imported = [ln.rsplit("|", 1)[-1].strip() for ln in done.stderr.splitlines() if "|" in ln]
        assert not [m for m in imported if m.split(".")[0] == "anthropic"], name
        if name == "ls":  # answered on the read-only fast path, before click is imported
            assert "click" not in imported and "sqlalchemy" not in imported
        if name == "help":
            assert "click" in imported
            assert done.stdout.startswith("Usage: threadloom [OPTIONS] COMMAND [ARGS]...")
            # --help loads no part of the store but its stdlib-only leaves (the redaction)
            assert not [m for m in imported if m.startswith(("sqlalchemy", "store._store"))]
            assert "store._engine" not in imported


# ----------------------------------------------------------------- in-process


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["ls", "--status", "bogus"], "Invalid value for '--status'"),
        (["ls", "--limit", "-1"], "Invalid value for '--limit'"),
        (["ls", "--bogus"], "No such option '--bogus'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["show"], "Missing argument 'REF'"),
        (["export", "T-zzzz", "--format", "pdf"], "Invalid value for '--format'"),
        (["search", "  "], "the query is empty"),
        (["import", "/no/such/file.jsonl"], "cannot read /no/such/file.jsonl"),
    ],
)
def test_usage_errors_are_one_line_exit_2_and_json_with_json(
    sample: Sample, args: list[str], needle: str
) -> None:
    plain = invoke(*args, db=sample.path)
    assert plain.exit_code == 2
    assert plain.stdout == ""
    assert_one_error_line(plain.stderr, needle)
    as_json = invoke("--json", *args, db=sample.path)
    assert as_json.exit_code == 2
    assert json_out(as_json)["error"]["code"] == 2
    assert needle in json_out(as_json)["error"]["message"]


def test_json_may_follow_the_command(sample: Sample) -> None:
    assert len(json_out(invoke("ls", "--json", db=sample.path))) == 4
    missing = invoke("show", "T-zzzz", "--json", db=sample.path)
    assert missing.exit_code == 3
    assert json_out(missing) == {"error": {"code": 3, "message": "no thread matches T-zzzz"}}


def test_a_ref_past_the_end_of_a_thread_is_not_found(sample: Sample) -> None:
    result = invoke("show", sample.ref("worker") + "#7", db=sample.path)
    assert result.exit_code == 3
    assert_one_error_line(result.stderr, "the thread has 6 messages")


def test_exit_codes_map_store_worker_and_interrupt_errors() -> None:
    from store import errors as se
    from workers import errors as we

    assert exit_code_for(se.RefSyntaxError("x")) == 2
    assert exit_code_for(se.ThreadNotFound("x")) == 3
    assert exit_code_for(se.AmbiguousRef("x", [])) == 3
    assert exit_code_for(se.ForkPointError("x")) == 2
    assert exit_code_for(se.ImportFormatError("x", line=3)) == 2
    assert exit_code_for(se.StatusError("x")) == 2
    assert exit_code_for(se.DatabaseUnavailable("x")) == 2
    assert exit_code_for(we.ProviderUnavailable("x")) == 4
    assert exit_code_for(we.ModelSpecError("x")) == 2
    assert exit_code_for(KeyboardInterrupt()) == 130
    assert exit_code_for(RuntimeError("bug")) == 1
    assert all(v in (1, 2, 3, 4, 130) for v in EXIT_CODES.values())


@pytest.fixture
def scratch_command() -> Iterator[list[BaseException | Output]]:
    """A throwaway ``_probe`` command that raises or returns whatever the test puts first."""
    plan: list[BaseException | Output] = []

    @command("_probe")
    @click.pass_context
    def probe(ctx: click.Context) -> None:
        async def go() -> Output:
            item = plan[0]
            if isinstance(item, BaseException):
                raise item
            return item

        run_async(ctx, go)

    main.add_command(probe)
    try:
        yield plan
    finally:
        main.commands.pop("_probe", None)


def test_run_async_maps_errors_in_one_place(scratch_command: list[BaseException | Output]) -> None:
    from workers.errors import ProviderUnavailable

    runner = CliRunner()
    for exc, code, message in [
        (ProviderUnavailable("anthropic: 529 overloaded after 5 attempts"), 4, "529 overloaded"),
        (KeyboardInterrupt(), 130, "interrupted"),
        (ValueError("boom\nsecond line"), 1, "internal error: ValueError: boom second line"),
    ]:
        scratch_command[:] = [exc]
        result = runner.invoke(main, ["--json", "_probe"])
        assert result.exit_code == code
        assert_one_error_line(result.stderr, message)
        assert json.loads(result.stdout)["error"]["code"] == code
    scratch_command[:] = [ValueError("boom")]
    verbose = runner.invoke(main, ["-v", "_probe"])
    assert "Traceback" in verbose.stderr
    assert verbose.stderr.rstrip().endswith("\nthreadloom: error: internal error: ValueError: boom")


def test_output_exit_code_and_text_or_json(scratch_command: list[BaseException | Output]) -> None:
    runner = CliRunner()
    scratch_command[:] = [Output({"status": "failed"}, "it failed\n", exit_code=1)]
    text = runner.invoke(main, ["_probe"])
    assert (text.exit_code, text.stdout) == (1, "it failed\n")
    as_json = runner.invoke(main, ["--json", "_probe"])
    assert (as_json.exit_code, json.loads(as_json.stdout)) == (1, {"status": "failed"})


def test_version_is_plain_text_or_one_json_document_with_json() -> None:
    from importlib.metadata import version

    number = version("threadloom")
    plain = run_cli("--version")
    assert (plain.returncode, plain.stdout, plain.stderr) == (
        0,
        f"threadloom, version {number}\n",
        "",
    )
    for args in (("--json", "--version"), ("--version", "--json")):
        done = run_cli(*args)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert json.loads(done.stdout) == {"name": "threadloom", "version": number}


def test_every_registered_command_loads_and_has_help() -> None:
    runner = CliRunner()
    for name in COMMANDS:
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert f"Usage: threadloom {name}" in result.stdout


async def test_run_command_opens_the_database_it_is_given(tmp_path: Path) -> None:
    db = tmp_path / "threads.db"
    store = await Store.open(str(db))
    try:
        await store.create_thread(kind="worker", title="t", status=Status.IDLE)
    finally:
        await store.close()
    seen: list[str] = []

    @command("_count")
    @click.pass_context
    def count(ctx: click.Context) -> None:
        async def go(s: Store) -> Output:
            seen.append(s.db.display)
            return Output(len(await s.list_threads()), "")

        run_command(ctx, go)

    main.add_command(count)
    try:
        import asyncio

        result = await asyncio.to_thread(
            CliRunner().invoke, main, ["--json", "--db", str(db), "_count"]
        )
    finally:
        main.commands.pop("_count", None)
    assert (result.exit_code, result.stdout.strip()) == (0, "1")
    assert seen == [str(db)]


def test_log_json_writes_dotted_events_as_json_lines_on_stderr_only(tmp_path: Path) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text('{"role": "user", "content": "hi"}\n')
    result = invoke("-v", "--log-json", "--json", "import", str(src), db=tmp_path / "threads.db")
    assert result.exit_code == 0, result.stderr
    assert json_out(result)["messages"] == 1  # stdout holds the command's output only
    events = [json.loads(line) for line in result.stderr.splitlines()]
    imported = [e for e in events if e["event"] == "thread.imported"]
    assert imported and imported[0]["level"] == "info" and imported[0]["messages"] == 1
    quiet = invoke("import", str(src), db=tmp_path / "threads.db")
    assert quiet.stderr == ""  # WARNING and above only by default


def test_no_command_prints_the_help_and_exits_2() -> None:
    bare = CliRunner().invoke(main, [])
    assert bare.exit_code == 2
    assert bare.stdout.startswith("Usage: threadloom [OPTIONS] COMMAND [ARGS]...")
    as_json = CliRunner().invoke(main, ["--json"])
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"]["code"] == 2


@pytest.mark.parametrize("fast", ["", "1"])
def test_a_limit_past_any_database_lists_everything(sample: Sample, fast: str) -> None:
    """``--limit`` is at least 1 and otherwise as large as one likes: 2**63 - 1 (and more) was
    an OverflowError, "internal error", exit 1."""
    env = clean_env(THREADLOOM_NO_FAST=fast) if fast else clean_env()
    huge = str(2**63 - 1)
    listed = run_cli("--json", "ls", "--limit", huge, db=sample.path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 4
    hits = run_cli("--json", "search", "tokenizer", "--limit", str(10**30), db=sample.path, env=env)
    assert hits.returncode == 0, hits.stderr
    assert json.loads(hits.stdout)


def test_a_demo_directory_that_cannot_be_made_is_one_line_exit_2(tmp_path: Path) -> None:
    """``demo --keep DIR`` under a file, or where nothing can be made, was "internal error"
    (NotADirectoryError, FileNotFoundError), exit 1; nothing is copied or run."""
    (tmp_path / "afile").write_text("x")
    db = tmp_path / "d.db"
    for keep, says in (
        (tmp_path / "afile" / "sub", "cannot make that directory: Not a directory"),
        (Path("/proc/threadloom-nope/x"), "cannot make that directory: No such file or directory"),
    ):
        proc = run_cli("--json", "demo", "--keep", str(keep), db=db)
        assert proc.returncode == 2, proc.stderr
        assert_one_error_line(proc.stderr, f"--keep {keep}: {says}")
        assert json.loads(proc.stdout)["error"]["code"] == 2
    assert not db.exists() or run_cli("--json", "ls", db=db).stdout.strip() == "[]"


@pytest.mark.parametrize("fast", ["", "1"])
def test_a_stdout_that_cannot_hold_every_character_gets_escapes_not_an_error(
    tmp_path: Path, fast: str
) -> None:
    """``PYTHONIOENCODING=ascii`` (or a Latin-1 terminal) made any output with an ellipsis or
    an arrow "internal error: UnicodeEncodeError", exit 1. JSON is then all ASCII (the same
    values), text escapes what it cannot write."""
    lines = [{"role": "user", "content": "café naïve → done… 日本語 ✓"}]
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    db = tmp_path / "t.db"
    ref = json.loads(run_cli("--json", "import", str(transcript), db=db).stdout)["ref"]
    env = clean_env(PYTHONIOENCODING="ascii", THREADLOOM_NO_FAST=fast)
    for args in (("--json", "search", "café"), ("--json", "show", ref)):
        plain = run_cli(*args, db=db, env=clean_env())
        ascii_ = run_cli(*args, db=db, env=env)
        assert ascii_.returncode == 0, ascii_.stderr
        assert ascii_.stdout.isascii() and not plain.stdout.isascii()
        assert json.loads(ascii_.stdout) == json.loads(plain.stdout)
    text = run_cli("show", ref, db=db, env=env)
    assert text.returncode == 0, text.stderr
    assert "caf\\xe9 na\\xefve \\u2192 done\\u2026" in text.stdout


@pytest.mark.parametrize("name", ["a?b.db", "a%20b.db", "c#d.db", "file:x.db?mode=ro"])
def test_a_database_path_is_that_file_whatever_characters_it_holds(
    tmp_path: Path, name: str
) -> None:
    """``--db 'a?b.db'`` wrote to a file named ``a`` (the path was read as a URL: its query),
    ``a%20b.db`` to ``a b.db``; a path given to ``--db`` is now exactly that file, on both
    read paths."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"role": "user", "content": "hello"}) + "\n")
    imported = run_cli("--json", "import", str(transcript), db=name, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    ref = json.loads(imported.stdout)["ref"]
    assert (tmp_path / name).is_file()
    for fast in ("", "1"):
        env = clean_env(THREADLOOM_NO_FAST=fast)
        listed = run_cli("--json", "ls", db=name, cwd=tmp_path, env=env)
        assert [t["ref"] for t in json.loads(listed.stdout)] == [ref], listed.stderr
