"""``ModelPolicy``: which models a client of the MCP server may have built — a key only to the
endpoints the server was configured for, scripted models only the server's own unless allowed —
checked where every model is built (``guard`` around the model factory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ModelRefused, UsageError
from orchestrator.model_policy import ModelPolicy, endpoint
from workers import ModelSpecError

GOOD = "http://127.0.0.1:8000/v1"


def policy(tmp_path: Path, **kw: Any) -> ModelPolicy:
    own = (f"openai:llama@{GOOD}", "scripted:script.json")
    return ModelPolicy.of(own, base_dir=tmp_path, **kw)


@pytest.mark.parametrize(
    ("url", "same"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("HTTP://LocalHost/v1/", "http://localhost:80/v1"),
        ("https://h.example/v1", "https://h.example:443/v1"),
        ("http://[::1]:9/v1", "http://[::1]:9/v1"),
        ("http://u:p@h.example/v1", "http://u:p@h.example/v1"),  # kept as written
        ("http://h.example/v1?x=1", "http://h.example/v1?x=1"),
    ],
)
def test_endpoints_compare_by_scheme_host_port_and_path(url: str, same: str) -> None:
    assert endpoint(url) == same


@pytest.mark.parametrize(
    "spec",
    [
        f"openai:other-model@{GOOD}",  # another model at the same endpoint
        f"openai:llama@{GOOD}/",
        "openai:llama@http://127.0.0.1:8000/v1",
        "anthropic:claude-haiku-4-5",  # the key goes to the Anthropic endpoint configured
        "scripted:script.json",  # the server's own, however it is spelt
    ],
)
def test_what_a_client_may_name(tmp_path: Path, spec: str) -> None:
    policy(tmp_path).check(spec)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("openai:m@http://127.0.0.1:9999/v1", "not an endpoint this server was configured for"),
        ("openai:m@http://evil.example/v1", "OPENAI_API_KEY would go there"),
        ("openai:m@http://127.0.0.1:8000@evil.example/v1", "not an endpoint"),
        ("openai:m@http://127.0.0.1:8000/v2", "not an endpoint"),
        (f"openai:m@http://evil.example/v1?{GOOD}", "not an endpoint"),
        ("scripted:/etc/other.json", "a scripted model replays the turns its file chooses"),
        ("scripted:../script.json", "--allow-scripted"),
    ],
)
def test_what_a_client_may_not_name_is_refused_saying_why(
    tmp_path: Path, spec: str, says: str
) -> None:
    with pytest.raises(ModelRefused) as refused:
        policy(tmp_path).check(spec)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_user_may_allow_endpoints_and_scripted_models(tmp_path: Path) -> None:
    allowed = policy(tmp_path, endpoints=["http://10.0.0.5:11434/v1/"], scripted=True)
    allowed.check("openai:m@http://10.0.0.5:11434/v1")
    allowed.check("scripted:/elsewhere/other.json")
    with pytest.raises(ModelRefused):
        allowed.check("openai:m@http://10.0.0.6:11434/v1")
    with pytest.raises(UsageError, match="--allow-endpoint 'ftp://x'"):
        policy(tmp_path, endpoints=["ftp://x"])
    with pytest.raises(ModelSpecError):
        allowed.check("function:reply")


def test_the_guard_builds_only_what_the_policy_allows(tmp_path: Path) -> None:
    built: list[str] = []

    def factory(spec: str, **options: Any) -> Any:
        built.append(spec)
        return object()

    guarded = policy(tmp_path).guard(factory)
    guarded("anthropic:claude-haiku-4-5", max_tokens=10)
    with pytest.raises(ModelRefused):
        guarded("openai:m@http://evil.example/v1")
    assert built == ["anthropic:claude-haiku-4-5"]
