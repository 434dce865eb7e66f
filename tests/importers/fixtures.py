"""Builders of synthetic Claude Code sessions and Codex rollouts, in the on-disk shapes those
tools write (constructed here from their documented structure; no real user's session)."""

from __future__ import annotations

import json
import uuid as _uuid
from pathlib import Path
from typing import Any

LAST: Any = object()
"""``parent=LAST``: chain to the line written before (Claude Code's usual ``parentUuid``)."""


def _ts(n: int) -> str:
    return f"2026-01-02T10:{n // 60 % 60:02d}:{n % 60:02d}.000Z"


class ClaudeSession:
    """One Claude Code session file (and its subagents, tool-results) under ``project``."""

    def __init__(
        self,
        project: Path,
        session_id: str = "0f7a6b8c-1111-4222-8333-944455556666",
        *,
        file: Path | None = None,
    ):
        self.project = project
        self.session_id = session_id
        self.path = file or project / f"{session_id}.jsonl"
        self.lines: list[str] = []
        self.last: str | None = None
        self.n = 0
        self.subs: list[ClaudeSession] = []

    @property
    def dir(self) -> Path:
        return self.project / self.session_id

    def raw(self, obj: Any) -> None:
        self.lines.append(obj if isinstance(obj, str) else json.dumps(obj))

    def entry(self, kind: str, *, parent: Any = LAST, **fields: Any) -> str:
        self.n += 1
        uid = str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"{self.path}#{self.n}"))
        obj = {
            "parentUuid": self.last if parent is LAST else parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": "/home/someone/project",
            "sessionId": self.session_id,
            "version": "2.0.0",
            "type": kind,
            "uuid": uid,
            "timestamp": _ts(self.n),
            **fields,
        }
        self.raw(obj)
        self.last = uid
        return uid

    def user(self, content: Any, *, parent: Any = LAST, **fields: Any) -> str:
        return self.entry(
            "user", parent=parent, message={"role": "user", "content": content}, **fields
        )

    def assistant(
        self,
        blocks: list[dict[str, Any]],
        *,
        msg_id: str,
        usage: dict[str, int] | None = None,
        parent: Any = LAST,
        model: str = "claude-sonnet-4-5-20250929",
    ) -> str:
        message = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": None,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        }
        return self.entry("assistant", parent=parent, message=message, requestId="req_1")

    def text(self, text: str, *, msg_id: str, **kw: Any) -> str:
        return self.assistant([{"type": "text", "text": text}], msg_id=msg_id, **kw)

    def call(self, call_id: str, name: str, inp: dict[str, Any], *, msg_id: str, **kw: Any) -> str:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": inp}
        return self.assistant([block], msg_id=msg_id, **kw)

    def result(self, call_id: str, text: str, *, parent: Any = LAST, error: bool = False) -> str:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if error:
            block["is_error"] = True
        return self.user([block], parent=parent, toolUseResult={"stdout": text, "stderr": ""})

    def compact(self, summary: str) -> str:
        boundary = self.entry(
            "system",
            parent=None,
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid=self.last,
            compactMetadata={"trigger": "auto", "preTokens": 155000},
        )
        self.user(summary, isCompactSummary=True, isVisibleInTranscriptOnly=True)
        return boundary

    def subagent(self, agent_id: str, tool_use_id: str, **meta: Any) -> ClaudeSession:
        """A subagent file (``<session>/subagents/agent-<id>.jsonl``) and its meta.json."""
        file = self.dir / "subagents" / f"agent-{agent_id}.jsonl"
        sub = ClaudeSession(self.project, self.session_id, file=file)
        file.parent.mkdir(parents=True, exist_ok=True)
        meta_doc = {"toolUseId": tool_use_id, "agentType": "general-purpose", **meta}
        file.with_name(f"agent-{agent_id}.meta.json").write_text(json.dumps(meta_doc))
        self.subs.append(sub)
        return sub

    def tool_output(self, call_id: str, text: str) -> str:
        """Save a large output under tool-results/ and return the marker Claude Code writes."""
        folder = self.dir / "tool-results"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{call_id}.txt").write_text(text)
        return (
            f"<persisted-output>\nOutput too large ({len(text) // 1024}KB). Full output saved"
            f" to: {folder / (call_id + '.txt')}\n\nPreview (first 2KB):\n{text[:2048]}\n"
            "</persisted-output>"
        )

    def write(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(line + "\n" for line in self.lines))
        for sub in self.subs:
            sub.write()
        return self.path


class CodexRollout:
    """One Codex rollout file under ``sessions/YYYY/MM/DD``."""

    def __init__(
        self,
        root: Path,
        session_id: str = "019a0000-aaaa-7bbb-8ccc-000000000001",
        *,
        forked_from: str | None = None,
        parent_thread: str | None = None,
        model: str = "gpt-5-codex",
    ):
        self.root = root
        self.session_id = session_id
        self.lines: list[str] = []
        self.n = 0
        source: Any = "cli"
        if parent_thread is not None:
            source = {
                "subagent": {
                    "thread_spawn": {
                        "parent_thread_id": parent_thread,
                        "depth": 1,
                        "agent_nickname": "scout",
                        "agent_role": "explorer",
                    }
                }
            }
        meta = {
            "id": session_id,
            "forked_from_id": forked_from,
            "timestamp": _ts(0),
            "cwd": "/home/someone/project",
            "originator": "codex_cli_rs",
            "cli_version": "0.60.0",
            "source": source,
            "model_provider": "openai",
            "base_instructions": {"text": "You are Codex."},
        }
        self.line("session_meta", {**meta, "git": {"branch": "main"}})
        self.line("turn_context", {"cwd": "/home/someone/project", "model": model})

    @property
    def path(self) -> Path:
        return (
            self.root
            / "2026"
            / "01"
            / "02"
            / f"rollout-2026-01-02T10-00-00-{self.session_id}.jsonl"
        )

    def line(self, kind: str, payload: Any) -> None:
        self.n += 1
        self.lines.append(json.dumps({"timestamp": _ts(self.n), "type": kind, "payload": payload}))

    def item(self, **payload: Any) -> None:
        self.line("response_item", payload)

    def event(self, **payload: Any) -> None:
        self.line("event_msg", payload)

    def user(self, text: str) -> None:
        self.item(type="message", role="user", content=[{"type": "input_text", "text": text}])
        self.event(type="user_message", message=text, images=[])

    def say(self, text: str) -> None:
        self.item(type="message", role="assistant", content=[{"type": "output_text", "text": text}])
        self.event(type="agent_message", message=text)

    def call(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        self.item(type="function_call", name=name, arguments=json.dumps(args), call_id=call_id)

    def output(self, call_id: str, text: str) -> None:
        self.item(type="function_call_output", call_id=call_id, output=text)

    def tokens(self, inp: int, out: int, cached: int = 0, total: int | None = None) -> None:
        last = {
            "input_tokens": inp,
            "cached_input_tokens": cached,
            "output_tokens": out,
            "reasoning_output_tokens": 0,
            "total_tokens": inp + out,
        }
        self.event(
            type="token_count",
            info={
                "total_token_usage": {**last, "total_tokens": total or inp + out},
                "last_token_usage": last,
                "model_context_window": 272000,
            },
            rate_limits=None,
        )

    def write(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(line + "\n" for line in self.lines))
        return self.path
