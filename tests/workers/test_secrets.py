"""``workers._secrets``: the secrets leave the process's environment at start and are read from one
place (issue 22 item 14). Each case runs in a fresh interpreter started with the secrets in its
environment, as the ``threadloom`` command is: taking them changes the process for good."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.orchestrator.test_cli_helpers import run_cli

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """A start-up environment holding no secret but ``extra`` (whatever the test run's holds)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), **extra}


def run(code: str, env: dict[str, str]) -> Any:
    """``code`` in a new interpreter started with ``env`` (and no other secret); it prints one
    JSON document."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_env(**env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


KEY = f"sk-ant-api03-{uuid.uuid4().hex}"
SECRETS = {
    "ANTHROPIC_API_KEY": KEY,
    "my_service_password": "hunter2-but-longer",
    "UPSTREAM": "postgresql://app:s3cr3t-pw@db.internal/app",
    "CUSTOM_HEADERS": f"x-api-key: {KEY}",
}
PLAIN = {"TL_HARMLESS": "just-a-value", "TL_URL": "https://example.com/a?b=c"}


def test_taking_moves_every_secret_out_of_every_copy_of_the_environment() -> None:
    doc = run(
        """
        import json, os, posix, subprocess
        from workers._secrets import env_var, take_secrets, taken_secrets
        names = take_secrets()
        block = open("/proc/self/environ", "rb").read()
        child = subprocess.run(["env"], capture_output=True, text=True).stdout
        print(json.dumps({
            "names": names,
            "again": take_secrets(),
            "block": block.decode("utf-8", "replace"),
            "environ": dict(os.environ),
            "posix": [k.decode() for k in posix.environ],
            "child": child,
            "read": {k: env_var(k) for k in taken_secrets()},
            "plain": env_var("TL_HARMLESS"),
        }))
        """,
        {**SECRETS, **PLAIN},
    )
    assert doc["names"] == sorted(SECRETS)
    assert doc["again"] == []
    for name, value in SECRETS.items():
        for where in ("block", "child"):
            assert value not in doc[where] and f"{name}=" not in doc[where], (name, where)
        assert name not in doc["environ"] and name not in doc["posix"]
        assert doc["read"][name] == value
    for name, value in PLAIN.items():
        assert f"{name}={value}" in doc["block"] and doc["environ"][name] == value
        assert f"{name}={value}" in doc["child"]
    assert doc["plain"] == "just-a-value"


def test_no_secret_set_takes_nothing_and_leaves_the_block_as_it_was() -> None:
    doc = run(
        """
        import json
        before = open("/proc/self/environ", "rb").read()
        from workers._secrets import take_secrets
        names = take_secrets()
        after = open("/proc/self/environ", "rb").read()
        print(json.dumps({"names": names, "same": before == after}))
        """,
        {},
    )
    assert doc == {"names": [], "same": True}


def test_the_redaction_and_the_bash_scrub_still_know_the_taken_secrets() -> None:
    doc = run(
        """
        import json
        from workers._secrets import take_secrets
        take_secrets()
        from workers import redact
        from workers.tools import scrubbed_environment
        from workers import env_var
        key = env_var("ANTHROPIC_API_KEY")
        print(json.dumps({
            "redacted": redact(f"the key is {key} and hunter2-but-longer"),
            "scrubbed": scrubbed_environment({"PATH": "/bin"}, {"ECHO": f"token={key}"}),
        }))
        """,
        SECRETS,
    )
    assert KEY not in doc["redacted"] and "hunter2-but-longer" not in doc["redacted"]
    assert doc["scrubbed"] == {"PATH": "/bin"}


def test_a_taken_database_url_still_names_the_database(tmp_path: Path) -> None:
    """``THREADLOOM_DB`` with a password is a secret: taken, yet ``--db`` still defaults to it
    (otherwise ``ls`` would quietly read ``.threadloom/threads.db`` of the current directory)."""
    pg.require()
    db = pg.create_database_sync()
    try:
        url = pg.store_url_for(db.name).replace("postgres@", "postgres:any-password@", 1)
        listed = run_cli("--json", "ls", cwd=tmp_path, env=clean_env(THREADLOOM_DB=url))
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == []
        assert not (tmp_path / ".threadloom").exists(), "ls opened a SQLite file, not the URL"
        doc = run(
            f"""
            import asyncio, json, os
            from workers._secrets import take_secrets
            take_secrets()
            from orchestrator.api import Orchestrator

            async def main():
                async with await Orchestrator.open({pg.store_url_for(db.name)!r}) as orch:
                    password = orch.store.db.url.password
                print(json.dumps({{"password": password, "in_env": "PGPASSWORD" in os.environ}}))

            asyncio.run(main())
            """,
            {"PGPASSWORD": "pg-secret-123"},
        )
        # asyncpg would have read PGPASSWORD from the environment: the command hands it to the
        # store it opens, whose URL carries it
        assert doc == {"password": "pg-secret-123", "in_env": False}
    finally:
        pg.drop_database_sync(db.name)


@pytest.mark.parametrize("name", ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN"])
def test_the_providers_read_their_key_from_the_taken_secrets(name: str) -> None:
    doc = run(
        f"""
        import json, os
        from workers._secrets import take_secrets
        take_secrets()
        from workers.providers.anthropic import AnthropicModel
        from workers.providers.openai import OpenAIChatModel
        found = {{}}
        if {name!r} == "OPENAI_API_KEY":
            found["key"] = OpenAIChatModel("m", "http://127.0.0.1:9/v1")._api_key
        else:
            m = AnthropicModel("claude-sonnet-4-5")
            found["key"] = m._api_key or m._auth_token
        found["in_env"] = {name!r} in os.environ
        print(json.dumps(found))
        """,
        {name: "k-" + uuid.uuid4().hex},
    )
    assert doc["key"].startswith("k-") and doc["in_env"] is False
