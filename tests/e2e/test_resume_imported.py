"""Every real Claude Code and Codex session file, imported, then resumed and forked against the
loopback Messages API (which refuses what the real API refuses: tool blocks without ``tools``,
an unanswered ``tool_use``, a result not first in the turn after its call): each request is
accepted, the model's call of ``bash`` runs, and the stored transcript is left as the import
wrote it.

The files are the ones the real CLIs wrote (``../shared/realsessions``, see its SOURCES.md);
``THREADLOOM_REALSESSIONS`` points elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator
from orchestrator.importers import import_sessions
from store import Status, Store, ThreadInfo, ToolResultBlock
from tests.fakes.chat_api import FakeChatAPI
from tests.fakes.messages_api import FakeMessagesAPI
from tests.realsessions import REAL, require
from workers.providers.anthropic import AnthropicModel
from workers.providers.openai import OpenAIChatModel

SESSIONS = sorted(
    p
    for p in require(REAL).rglob("*.jsonl")
    if p.parent.name != "subagents"  # read with the session that spawned them
)
MODEL = "anthropic:claude-sonnet-4-5"


def _ids(path: Path) -> str:
    return str(path.relative_to(REAL))


def _ran(request: dict[str, Any], marker: str) -> bool:
    """Whether the request's last message answers the call that echoed ``marker``."""
    content = request["messages"][-1]["content"]
    return isinstance(content, list) and any(
        b.get("type") == "tool_result" and marker in json.dumps(b.get("content")) for b in content
    )


def _responder(marker: str) -> Any:
    """The model: ``bash`` once (echoing ``marker``), then a reply in text."""

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        if _ran(request, marker):
            return {"content": [{"type": "text", "text": "Resumed and ran bash."}]}
        call = {"type": "tool_use", "name": "bash", "input": {"command": f"echo {marker}"}}
        return {"content": [{"type": "text", "text": "Checking."}, call]}

    return respond


def _check_requests(api: FakeMessagesAPI) -> None:
    assert not api.rejections, api.rejections[0]
    for request in api.message_requests:
        tools = {t["name"] for t in request["tools"]}
        assert "bash" in tools
        assert request["messages"][0]["role"] == "user"
        for m in request["messages"]:
            for b in m["content"]:
                if b["type"] == "tool_use":  # every call kept is one of the thread's tools
                    assert b["name"] in tools, b["name"]


def _calls_seen(request: dict[str, Any]) -> int:
    """The calls a request shows: kept as ``tool_use`` blocks, or as text."""
    n = 0
    for m in request["messages"]:
        for b in m["content"]:
            n += b["type"] == "tool_use"
            n += b["type"] == "text" and b["text"].count("[earlier call of ")
    return n


async def _resumed(
    orch: Orchestrator,
    store: Store,
    api: FakeMessagesAPI,
    ref: str,
    marker: str,
    *,
    fork: bool,
) -> None:
    info = (await store.resolve(ref)).thread
    before = await store.messages(info.id)
    sent = len(api.message_requests)
    api.respond_with(_responder(marker))
    if fork:
        forked = await orch.fork(ref, f"Go on, please ({marker})", model=MODEL, run=False)
        assert isinstance(forked, ThreadInfo)
        outcome = await orch.resume(forked.ref, model=MODEL)
        info = forked
    else:
        outcome = await orch.resume(ref, f"Go on, please ({marker})", model=MODEL)
    assert outcome.status == Status.DONE, (ref, outcome.error)
    after = await store.messages(info.id)
    assert after[: len(before)] == before  # append-only: the import's messages as they were
    outputs = [
        b.text for m in after[len(before) :] for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert any(marker in o and not o.startswith("unknown tool") for o in outputs), outputs
    got = await store.get_thread(info.id)
    assert "bash" in got.tools and got.system_prompt
    # the first request shows every call the history holds, under its tool's name or as text
    stored = sum(len(m.tool_uses()) for m in before)
    assert _calls_seen(api.message_requests[sent]) == stored


@pytest.mark.parametrize("path", SESSIONS, ids=_ids)
async def test_every_real_session_resumes_and_forks_with_threadloom_tools(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a thread outside any job works
    store = await Store.open(str(tmp_path / "threads.db"))
    try:
        report = await import_sessions(store, path)
        if not report.threads:
            # a file without a conversation (Claude Code's summary-only files): nothing to resume
            types = {json.loads(line).get("type") for line in path.read_text().splitlines()}
            assert not types & {"user", "assistant", "response_item"}, types
            return
        # the whole history is sent: the length of a long session is not what this checks
        with FakeMessagesAPI(context_window=10**9) as api:

            def factory(spec: str, **options: Any) -> AnthropicModel:
                assert spec == MODEL
                return AnthropicModel(
                    spec.split(":", 1)[1], api_key="test", base_url=api.base_url, max_retries=0
                )

            orch = Orchestrator(store, model_factory=factory)
            for i, written in enumerate(report.threads):
                await _resumed(orch, store, api, written.info.ref, f"resumed-{i}", fork=False)
            await _resumed(orch, store, api, report.threads[0].info.ref, "forked-0", fork=True)
            _check_requests(api)
    finally:
        await store.close()


CHAT_MODEL = "openai:qwen@http://fake/v1"


def _chat_responder(marker: str) -> Any:
    def respond(request: dict[str, Any]) -> dict[str, Any]:
        last = request["messages"][-1]
        if last["role"] == "tool" and marker in str(last["content"]):
            return {"content": "Resumed and ran bash."}
        return {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {marker}"}}]}

    return respond


@pytest.mark.parametrize("path", SESSIONS, ids=_ids)
async def test_every_real_session_resumes_on_an_openai_compatible_server(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same history in the chat-completions format (the fake checks that every
    ``tool_calls`` entry is answered by its ``tool`` message and no ``tool`` message answers
    nothing): each session's main thread resumes and runs ``bash``."""
    monkeypatch.chdir(tmp_path)
    store = await Store.open(str(tmp_path / "threads.db"))
    try:
        report = await import_sessions(store, path)
        if not report.threads:
            return  # the summary-only file: the test above says why
        with FakeChatAPI() as api:

            def factory(spec: str, **options: Any) -> OpenAIChatModel:
                assert spec == CHAT_MODEL
                return OpenAIChatModel("qwen", api.base_url, max_retries=0)

            orch = Orchestrator(store, model_factory=factory)
            ref = report.threads[0].info.ref
            api.respond_with(_chat_responder("chat-0"))
            outcome = await orch.resume(ref, "Go on, please (chat-0)", model=CHAT_MODEL)
            assert outcome.status == Status.DONE, outcome.error
            assert not api.rejections, api.rejections[0]
            for request in api.chat_requests:
                tools = {t["function"]["name"] for t in request["tools"]}
                assert "bash" in tools
                called = {
                    c["function"]["name"]
                    for m in request["messages"]
                    for c in m.get("tool_calls") or []
                }
                assert called <= tools, called - tools
            last = (await store.messages(report.threads[0].info.id))[-2]
            assert "chat-0" in last.tool_results()[0].text
    finally:
        await store.close()
