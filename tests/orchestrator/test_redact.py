"""Secret redaction: configured keys and secret-looking values are masked in logs, terminal
output and error text; transcripts are shown as stored unless ``--redact``."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import one_line
from orchestrator.logging import configure_logging, get_logger, set_job_log_dir
from store import NewMessage, Status, Store
from tests.e2e.conftest import Env
from tests.fakes._messages_rules import InvalidRequest
from tests.fakes._server import RecordedRequest, Reply
from tests.fakes.chat_api import FakeChatAPI, _error as _chat_error
from tests.fakes.messages_api import FakeMessagesAPI
from tests.orchestrator.test_cli_helpers import clean_env, run_cli
from workers import Model, redact, redact_data, refresh_secrets, run_thread
from workers._protocol import ModelRequest
from workers.providers.anthropic import AnthropicModel
from workers.providers.openai import OpenAIChatModel

ANT = "sk-ant-api03-" + "A1b2C3d4" * 8
OPENAI = "sk-" + "Z9y8X7w6" * 6
PROJ = "sk-proj-" + "q1W2e3R4" * 6
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GH = "ghp_" + "a" * 36
GH_PAT = "github_pat_" + "11ABCDEFG0" * 8
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "plain-configured-key-123")
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("SHORT_TOKEN", "abc")
    refresh_secrets()
    yield
    refresh_secrets()


@pytest.mark.parametrize(
    ("secret", "shown"),
    [
        (ANT, "sk-ant-…[REDACTED]"),
        (OPENAI, "sk-…[REDACTED]"),
        (PROJ, "sk-proj-…[REDACTED]"),
        (AWS_ID, "AKIA…[REDACTED]"),
        (GH, "ghp_…[REDACTED]"),
        (GH_PAT, "github_pat_…[REDACTED]"),
        ("gho_" + "B" * 36, "gho_…[REDACTED]"),
        ("plain-configured-key-123", "[REDACTED]"),
        ("hunter2hunter2", "[REDACTED]"),
    ],
)
def test_each_secret_format_is_masked(secret: str, shown: str) -> None:
    out = redact(f"before {secret} after")
    assert secret not in out and out == f"before {shown} after"


def test_aws_secret_after_its_name_and_private_key_blocks_are_masked() -> None:
    out = redact(f"aws_secret_access_key = {AWS_SECRET}\n{PEM}\nrest")
    assert AWS_SECRET not in out and "MIIEpAIBAAKCAQEA" not in out
    assert "aws_secret_access_key = [REDACTED]" in out
    assert "-----BEGIN RSA PRIVATE KEY-----…[REDACTED]…-----END RSA PRIVATE KEY-----" in out
    assert out.endswith("rest")


def test_ordinary_text_and_short_values_are_left_alone() -> None:
    text = "task-runner abc sk-short ghp_x AKIA123 the risk-ant tokens=12"
    assert redact(text) == text


def test_redact_data_masks_nested_strings_and_keeps_keys() -> None:
    data = {"ANTHROPIC_API_KEY": ANT, "list": [GH, 3, {"x": PEM}]}
    out = redact_data(data)
    assert json.dumps(out).count("[REDACTED]") == 3 and "ANTHROPIC_API_KEY" in out
    assert data["ANTHROPIC_API_KEY"] == ANT  # the input is untouched


def test_exception_text_is_redacted() -> None:
    assert ANT not in one_line(ValueError(f"bad key {ANT}"))
    assert "[REDACTED]" in one_line(ValueError("auth plain-configured-key-123 refused"))


def test_log_lines_console_stdlib_and_job_log_are_redacted(tmp_path: Path) -> None:
    stream = io.StringIO()
    configure_logging(1, json_lines=True, stream=stream)
    set_job_log_dir(tmp_path)
    try:
        get_logger("t").warning("x.failed", error=f"key {ANT}", job="T-abcd")
        logging.getLogger("other").warning("stdlib says %s", GH)
        try:
            raise RuntimeError(f"boom {OPENAI}")
        except RuntimeError:
            get_logger("t").exception("x.crashed")
    finally:
        set_job_log_dir(None)
        configure_logging(0)
    console = stream.getvalue()
    job_log = (tmp_path / "T-abcd.jsonl").read_text()
    for text in (console, job_log):
        assert ANT not in text and "[REDACTED]" in text
    assert GH not in console and OPENAI not in console


@pytest.fixture
def env(tmp_path: Path) -> Env:
    (tmp_path / "ws").mkdir()
    return Env(tmp_path, tmp_path / "threads.db", tmp_path / "ws")


def test_show_and_export_keep_the_record_unless_redact(env: Env) -> None:
    path = env.root / "t.jsonl"
    path.write_text(
        json.dumps({"role": "user", "content": f"my key is {ANT}"})
        + "\n"
        + json.dumps({"role": "assistant", "content": "noted"})
        + "\n"
    )
    ref = env.run("--json", "import", str(path)).json["ref"]
    assert ANT in env.run("show", ref).stdout
    assert ANT in env.run("export", ref).stdout
    for cmd in (["show", ref, "--redact"], ["export", ref, "--redact"]):
        out = env.run(*cmd).stdout + env.run("--json", *cmd).stdout
        assert ANT not in out and "sk-ant-…[REDACTED]" in out
    # the rest of the terminal output is always redacted: ls shows the title masked
    env.run("import", str(path), "--title", f"about {GH}")
    assert GH not in env.run("ls").stdout


@pytest.mark.parametrize("before", ["\n", "\t", "\r", "\u2028", "\x07"])
def test_a_secret_right_after_an_escaped_character_is_masked_in_json(env: Env, before: str) -> None:
    """In a JSON text the character before a token is an escape (``\\n``, ``\\u2028``): the
    token still starts there (it was missed: ``n`` and ``8`` are word characters)."""
    text = f"line one{before}{ANT}{before}{GH} {before}{AWS_ID}{before}end"
    assert ANT not in redact(json.dumps(text)) and GH not in redact(json.dumps(text))
    path = env.root / "t.jsonl"
    path.write_text(json.dumps({"role": "user", "content": text}) + "\n")
    ref = env.run("--json", "import", str(path)).json["ref"]
    for cmd in (["export", ref, "--redact"], ["--json", "export", ref, "--redact"]):
        out = env.run(*cmd).stdout
        assert ANT not in out and GH not in out and AWS_ID not in out, out
        assert out.count("[REDACTED]") == 3
    # a word that merely ends in the escape's letter is still a word: not a token's start
    assert redact("vanillask-ant-" + "x" * 20) == "vanillask-ant-" + "x" * 20


# ----------------------------------------------------------------- a provider's 401 echoing the key

ECHOED_KEY = "plain-echoed-key-4f9a8b7c6d5e"  # no secret format: only "our own key" can catch it


class _EchoingChatAPI(FakeChatAPI):
    """The fake Chat Completions API answering 401 the way OpenAI does: naming the key it got."""

    def handle(self, recorded: RecordedRequest) -> Reply | object:
        key = recorded.headers.get("authorization", "").removeprefix("Bearer ")
        self.reject(recorded, 401, "invalid_request_error", "echoed key")
        return Reply.json(
            401, _chat_error(f"Incorrect API key provided: {key}.", "invalid_api_key")
        )


def _refuse_echoing_the_key(request: dict[str, Any]) -> dict[str, Any]:
    raise InvalidRequest(
        f"invalid x-api-key: {ECHOED_KEY}", status=401, error_type="authentication_error"
    )


async def _fail_a_thread_with(db: Path, model: Model) -> str:
    """A worker run by the real loop whose model call fails: its error is what the run stores
    (an error that is no provider's is stored, then raised: the run crashed)."""
    store = await Store.open(str(db))
    try:
        thread = await store.create_thread(
            kind="worker", title="t", messages=[NewMessage.user("hi")]
        )
        try:
            await run_thread(
                store, thread.id, model=model, tools=[], workspace=db.parent, thread=thread
            )
        except RuntimeError:
            pass
        assert (await store.get_thread(thread.id)).status == Status.FAILED
        return f"T-{thread.id}"
    finally:
        await model.aclose()
        await store.close()


def _assert_key_nowhere(db: Path, ref: str, key: str) -> None:
    with closing(sqlite3.connect(db)) as conn:
        (stored,) = conn.execute("SELECT error FROM threads").fetchone()
    assert stored and "401" in stored and key not in stored
    # the commands run without the key in their environment: only the stored text is shown
    env = clean_env()
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        env.pop(name, None)
    human = run_cli("show", ref, db=db, env=env)
    assert human.returncode == 0, human.stderr
    assert "401" in human.stdout and key not in human.stdout + human.stderr
    as_json = run_cli("--json", "show", ref, db=db, env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert key not in as_json.stdout + as_json.stderr


def test_an_anthropic_401_echoing_the_key_is_stored_and_shown_masked(tmp_path: Path) -> None:
    with FakeMessagesAPI() as api:
        api.respond_with(_refuse_echoing_the_key)
        model = AnthropicModel(
            "claude-sonnet-4-5", api_key=ECHOED_KEY, base_url=api.base_url, max_retries=0
        )
        ref = asyncio.run(_fail_a_thread_with(tmp_path / "threads.db", model))
    _assert_key_nowhere(tmp_path / "threads.db", ref, ECHOED_KEY)


def test_an_openai_401_echoing_the_key_is_stored_and_shown_masked(tmp_path: Path) -> None:
    with _EchoingChatAPI(api_key="the-right-key") as api:
        model = OpenAIChatModel("m", api.base_url, api_key=ECHOED_KEY, max_retries=0)
        ref = asyncio.run(_fail_a_thread_with(tmp_path / "threads.db", model))
    _assert_key_nowhere(tmp_path / "threads.db", ref, ECHOED_KEY)


def test_every_error_a_run_stores_is_redacted(tmp_path: Path) -> None:
    """Whatever raises in a run (here a model whose failure is no provider's, so nothing masked
    it on the way), the loop masks its secrets before it stores the error (``workers._finish``)."""

    class Leaky:
        spec = "leaky:model"

        async def complete(self, request: ModelRequest) -> Any:
            raise RuntimeError(f"HTTP 401: bad key {ANT} / plain-configured-key-123")

        def cost_usd(self, usage: Any) -> float:
            return 0.0

        async def aclose(self) -> None:
            pass

    ref = asyncio.run(_fail_a_thread_with(tmp_path / "threads.db", Leaky()))
    with closing(sqlite3.connect(tmp_path / "threads.db")) as conn:
        (stored, result) = conn.execute("SELECT error, result FROM threads").fetchone()
    for text in (stored, result):  # the error, and the failed result's summary made of it
        assert ANT not in text and "plain-configured-key-123" not in text
    assert "sk-ant-…[REDACTED]" in stored and "HTTP 401: bad key" in stored
    proc = run_cli("show", ref, db=tmp_path / "threads.db")
    assert ANT not in proc.stdout
