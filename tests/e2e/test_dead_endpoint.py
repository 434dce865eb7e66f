"""A job pointed at an endpoint nobody can connect to (issue 26 item 3): the real ``threadloom
run`` in a subprocess. The endpoint is asked once, before anything is stored: exit 4, one error
line naming the URL, no retry, no thread. An endpoint that answers keeps its retries for errors
mid-job (a 500 is retried), and the check itself sends the server no request."""

from __future__ import annotations

import socket

from tests.fakes.chat_api import FakeChatAPI
from tests.fakes.messages_api import FakeMessagesAPI

from .conftest import Env


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released: nothing is accepted there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nothing_stored(env: Env) -> None:
    listed = env.run("--json", "ls")
    assert listed.code == 0, listed.stderr
    assert listed.json == []


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr  # no retry warnings, no traceback
    assert lines[0].startswith("threadloom: error: "), stderr
    return lines[0]


def test_a_closed_port_fails_at_once_with_one_line_naming_the_url(env: Env) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    path = env.job("dead", [], [{"id": "a", "title": "t", "prompt": "p"}], model=f"openai:m@{url}")
    res = env.run("run", str(path))
    assert res.code == 4, res.stderr
    line = _one_error_line(res.stderr)
    assert f"{url}/chat/completions cannot be reached" in line
    assert "connection refused" in line
    assert "retry" not in res.stderr.lower() and "attempts" not in line
    _nothing_stored(env)


def test_a_dead_anthropic_base_url_fails_at_once_the_same_way(env: Env) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    path = env.job("adead", [], [{"id": "a", "title": "t", "prompt": "p"}], model="anthropic:m")
    res = env.run(
        "run", str(path), env={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test"}
    )
    assert res.code == 4, res.stderr
    line = _one_error_line(res.stderr)
    assert f"anthropic:m: {url} cannot be reached" in line and "connection refused" in line
    assert "sk-ant-test" not in res.stderr
    _nothing_stored(env)


def test_a_live_anthropic_endpoint_hears_only_the_jobs_requests(env: Env) -> None:
    with FakeMessagesAPI() as api:
        api.enqueue({"content": "the report"})
        res = env.run(
            "--json",
            "run",
            str(env.job("alive_a", [], model="anthropic:m")),
            env={"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        )
        paths = [r.path for r in api.requests]
    assert res.code == 0, res.stderr
    assert res.json["report"] == "the report"
    assert paths == ["/v1/messages"]  # the preflight connected, and sent nothing


def test_the_json_error_of_a_dead_worker_endpoint_is_exit_4(env: Env) -> None:
    """The lead's endpoint answers; the workers' does not: refused all the same, before the
    lead is stored and before the lead's server hears of it."""
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    with FakeChatAPI() as api:
        path = env.job("deadworker", [], model=f"openai:m@{api.base_url}")
        res = env.run("--json", "run", str(path), "--worker-model", f"openai:w@{dead}")
        requests = len(api.requests)
    assert res.code == 4, res.stderr
    assert dead in _one_error_line(res.stderr)
    assert res.json["error"]["code"] == 4 and dead in res.json["error"]["message"]
    assert requests == 0
    _nothing_stored(env)


def test_a_tls_handshake_that_fails_is_refused_the_same_way(env: Env) -> None:
    """``https`` to a server that speaks plain HTTP: the handshake fails, one line."""
    with FakeChatAPI() as api:
        url = f"https://127.0.0.1:{api.port}/v1"
        res = env.run("run", str(env.job("tls", [], model=f"openai:m@{url}")))
        requests = len(api.requests)
    assert res.code == 4, res.stderr
    line = _one_error_line(res.stderr)
    assert url in line and "TLS handshake" in line
    assert requests == 0
    _nothing_stored(env)


def test_a_live_endpoint_keeps_its_retries_mid_job_and_hears_no_extra_request(env: Env) -> None:
    with FakeChatAPI() as api:
        api.inject("500")
        api.enqueue({"content": "the report"})
        res = env.run("--json", "run", str(env.job("alive", [], model=f"openai:m@{api.base_url}")))
        outcomes = [r.outcome for r in api.requests]
    assert res.code == 0, res.stderr
    assert res.json["report"] == "the report"
    assert outcomes == ["fault:500", "ok"]  # retried once; the preflight sent no request


def test_resume_and_fork_after_the_server_went_away_change_nothing(env: Env) -> None:
    with FakeChatAPI() as api:
        api.enqueue({"content": "the report"})
        url = api.base_url
        res = env.run("--json", "run", str(env.job("later", [], model=f"openai:m@{url}")))
    assert res.code == 0, res.stderr  # the server is closed now: its port refuses
    lead = res.json["lead"]
    before = env.run("--json", "show", lead).json
    for cmd in ("resume", "fork"):
        got = env.run(cmd, lead, "go on")
        assert got.code == 4, (cmd, got.stderr)
        line = _one_error_line(got.stderr)
        assert url in line and "connection refused" in line
    assert env.run("--json", "show", lead).json == before
    assert [t["ref"] for t in env.run("--json", "ls").json] == [lead]
