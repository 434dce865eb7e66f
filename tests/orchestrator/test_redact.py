"""Secret redaction: configured keys and secret-looking values are masked in logs, terminal
output and error text; transcripts are shown as stored unless ``--redact``."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator._errors import one_line
from orchestrator.logging import configure_logging, get_logger, set_job_log_dir
from store import redact, redact_data, refresh_secrets
from tests.e2e.conftest import Env

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
