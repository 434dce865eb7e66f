"""Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``, one session
(Codex: a thread) a file; a fork or a subagent is a file of its own, linked from its first line.

Every line is ``{"timestamp", "type", "payload"}`` (Codex's ``RolloutLine``). What is read here,
defensively (the format is Codex's own and changes between versions):

- ``session_meta``: ``id``, ``forked_from_id`` (the main line becomes a fork of that session's
  thread at the history both share), ``source.subagent.thread_spawn.parent_thread_id`` (a
  subagent: a worker thread whose parent is that session's thread), ``timestamp``;
- ``turn_context``: the ``model`` of the turns that follow (for usage rows);
- ``response_item``: ``message`` (user/assistant text; developer and system messages are kept
  as marked user text), ``reasoning`` (its summary and any plain content: thinking; encrypted
  content is not kept), ``function_call`` (``arguments`` is JSON inside a string),
  ``custom_tool_call``, ``local_shell_call`` and their ``*_output`` by ``call_id``;
- ``event_msg``: ``token_count`` (each new ``last_token_usage`` a usage row of the assistant
  turn before it; a repeated count is one row), ``exec_command_end`` (the result of a call only
  when no ``function_call_output`` answers it: one result per call), ``thread_rolled_back``
  (the last ``num_turns`` user turns leave the main line and become a fork); the events that
  repeat response items (``user_message``, ``agent_message``, ``agent_reasoning``) are skipped;
- ``compacted``: its ``message`` is kept as a marked user message; the history before it stays.

Anything else is counted in ``source.unmodeled``; a line that is not JSON is skipped and counted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from store import Effects, Kind, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage

from ._draft import (
    COMPACTION_MARK,
    CONTEXT_PREFIXES,
    Block,
    Branch,
    Builder,
    Session,
    request_title,
    usage_record,
)
from ._lines import (
    JsonLines,
    confine,
    head_objects,
    iso_ms,
    placeholder,
    read_lines,
)

FORMAT = "codex"
_KINDS = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
_ECHO_EVENTS = frozenset(
    {"user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content"}
)


def looks_like(obj: dict[str, Any]) -> bool:
    """A Codex rollout line (for ``auto``)."""
    return obj.get("type") in _KINDS and "payload" in obj


def parse_file(path: Path, lines: Iterable[str] | None = None) -> list[Session]:
    data = read_lines(path) if lines is None else JsonLines.of(lines)
    return [_Rollout(path, data).session()]


class _Rollout:
    def __init__(self, path: Path, data: JsonLines) -> None:
        self.path = path
        self.data = data
        self.unmodeled: Counter[str] = Counter()
        self.meta: dict[str, Any] = {}
        self.model: str | None = None
        self.b = Builder()
        self.abandoned: list[Branch] = []
        self.answered: set[str] = set()
        self.exec_results: dict[str, dict[str, Any]] = {}
        self.last_total: Any = None
        self.name: str | None = None
        self.user_items = False

    def session(self) -> Session:
        objs = self.data.objects
        for o in objs:  # which calls have a real output (an exec_command_end is then a copy)
            p = o.get("payload")
            if o.get("type") != "response_item" or not isinstance(p, dict):
                continue
            if str(p.get("type", "")).endswith("_output") and isinstance(p.get("call_id"), str):
                self.answered.add(p["call_id"])
            elif p.get("type") == "message" and p.get("role") == "user":
                self.user_items = True
        for o in objs:
            p = o.get("payload")
            self.b.at = iso_ms(o.get("timestamp"))
            if not isinstance(p, dict):
                self.unmodeled[f"line:{o.get('type')}"] += 1
                continue
            handler = getattr(self, f"_on_{o.get('type')}", None)
            if handler is None:
                self.unmodeled[f"line:{o.get('type')}"] += 1
                continue
            handler(p)
        sid = self.meta.get("id") if isinstance(self.meta.get("id"), str) else self.path.stem
        main = self.b.branch()
        branches = [main, *self.abandoned]
        source: dict[str, Any] = {"format": FORMAT, "session_id": sid, "path": str(self.path)}
        spawn = _thread_spawn(self.meta.get("source"))
        parent = spawn.get("parent_thread_id") if spawn else None
        kind = Kind.WORKER if isinstance(parent, str) else Kind.LEAD
        for k in ("agent_nickname", "agent_role"):
            v = (spawn or {}).get(k) or self.meta.get(k)
            if isinstance(v, str):
                source[k] = v
        for k in ("cwd", "cli_version", "originator"):
            if isinstance(self.meta.get(k), str):
                source[k] = self.meta[k]
        if self.model:  # an OpenAI model name, not a threadloom spec (which needs an endpoint)
            source["model"] = self.model
        if self.unmodeled:
            source["unmodeled"] = dict(sorted(self.unmodeled.items()))
        forked = self.meta.get("forked_from_id")
        title = self.name or request_title(self.b.requests()) or f"codex {sid}"
        if self.name:
            source["thread_name"] = self.name
        if kind == Kind.WORKER and isinstance(source.get("agent_nickname"), str):
            title = f"{source['agent_nickname']}: {title}"
        created = iso_ms(self.meta.get("timestamp")) or (
            iso_ms(objs[0].get("timestamp")) if objs else None
        )
        return Session(
            key=f"{FORMAT}:{sid}",
            kind=kind,
            title=title,
            source=source,
            branches=[b for b in branches if b.messages],
            parent_key=f"{FORMAT}:{parent}" if isinstance(parent, str) else None,
            fork_parent_key=f"{FORMAT}:{forked}" if isinstance(forked, str) else None,
            created_ms=created,
            skipped=self.data.skipped,
            stat=self.data.stat,
        )

    # ----------------------------------------------------------------- line kinds

    def _on_session_meta(self, p: dict[str, Any]) -> None:
        if not self.meta:
            self.meta = p
        else:
            self.unmodeled["line:session_meta (again)"] += 1

    def _on_turn_context(self, p: dict[str, Any]) -> None:
        if isinstance(p.get("model"), str):
            self.model = p["model"]

    def _on_compacted(self, p: dict[str, Any]) -> None:
        text = p.get("message") if isinstance(p.get("message"), str) else ""
        self.b.user([TextBlock(text=f"{COMPACTION_MARK}\n{text}")], turn=False, alone=True)
        if p.get("replacement_history"):
            self.unmodeled["compacted replacement_history"] += 1

    def _on_event_msg(self, p: dict[str, Any]) -> None:
        t = p.get("type")
        if t == "token_count":
            self._token_count(p)
        elif t == "exec_command_end":
            call = p.get("call_id")
            if isinstance(call, str) and call not in self.answered:
                self.answered.add(call)
                out = p.get("aggregated_output") or p.get("formatted_output") or ""
                if not out:
                    out = "".join(str(p.get(k) or "") for k in ("stdout", "stderr"))
                code = p.get("exit_code")
                self.b.user([_result(call, str(out), False, _int(code))])
        elif t == "user_message" and not self.user_items:
            # Codex Desktop (0.128) writes a person's prompt only as this event: no
            # response_item repeats it, so it is the turn itself
            text = p.get("message")
            if isinstance(text, str) and text.strip():
                self.b.user(
                    [TextBlock(text=text)], turn=not text.lstrip().startswith(CONTEXT_PREFIXES)
                )
        elif t == "thread_rolled_back":
            self._rolled_back(p.get("num_turns"))
        elif t == "thread_name_updated":
            name = p.get("thread_name") or p.get("name")
            if isinstance(name, str) and name.strip():
                self.name = name.strip()
        elif t not in _ECHO_EVENTS:
            self.unmodeled[f"event:{t}"] += 1

    def _token_count(self, p: dict[str, Any]) -> None:
        info = p.get("info")
        if not isinstance(info, dict):
            return
        total = info.get("total_token_usage")
        last = info.get("last_token_usage")
        if not isinstance(last, dict) or total == self.last_total:
            return  # Codex repeats the count after a turn: one row per new count
        self.last_total = total

        def n(k: str) -> int:
            v = last.get(k)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

        cached = n("cached_input_tokens")
        usage = Usage(
            input_tokens=max(n("input_tokens") - cached, 0),  # OpenAI counts cached in input
            output_tokens=n("output_tokens"),
            cache_read_input_tokens=cached,
        )
        if usage.total_tokens and not self.b.usage_for_last_assistant(
            usage_record(self.model, usage)
        ):
            self.unmodeled["token_count before any reply"] += 1

    def _rolled_back(self, turns: Any) -> None:
        if not isinstance(turns, int) or turns <= 0:
            return
        starts = self.b.user_turn_starts()
        if not starts:
            return
        cut = starts[-min(turns, len(starts))]
        abandoned = self.b.snapshot().branch("rolled-back turns")
        self.abandoned.append(abandoned)
        self.b.truncate(cut)

    def _on_response_item(self, p: dict[str, Any]) -> None:
        t = p.get("type")
        if t == "message":
            self._message(p)
        elif t == "reasoning":
            parts = [
                str(s.get("text", ""))
                for key in ("summary", "content")
                for s in (p.get(key) or [])
                if isinstance(s, dict) and s.get("text")
            ]
            if p.get("encrypted_content"):
                self.unmodeled["reasoning encrypted_content"] += 1
            if parts:
                self.b.assistant([ThinkingBlock(thinking="\n\n".join(parts))])
        elif t in ("function_call", "custom_tool_call", "local_shell_call"):
            self._call(t, p)
        elif t in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            call = p.get("call_id")
            if isinstance(call, str) and call:
                self.b.user([_result(call, *_output(p.get("output")))])
        else:
            self.unmodeled[f"item:{t}"] += 1
            self.b.assistant([placeholder(p)])

    def _message(self, p: dict[str, Any]) -> None:
        role = p.get("role")
        blocks: list[Block] = []
        content = p.get("content")
        for c in content if isinstance(content, list) else [content]:
            if isinstance(c, dict) and isinstance(c.get("text"), str):
                if c["text"]:
                    blocks.append(TextBlock(text=c["text"]))
            elif isinstance(c, str) and c:
                blocks.append(TextBlock(text=c))
            elif c is not None:
                blocks.append(placeholder(c))
        if role == "assistant":
            self.b.assistant(blocks)
        elif role == "user":
            text = "".join(b.text for b in blocks if isinstance(b, TextBlock)).lstrip()
            self.b.user(blocks, turn=bool(text) and not text.startswith(CONTEXT_PREFIXES))
        else:  # developer / system instructions the model saw: kept, marked
            text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
            if text:
                self.b.user([TextBlock(text=f"[{role} message]\n{text}")], turn=False)

    def _call(self, t: str, p: dict[str, Any]) -> None:
        call = p.get("call_id") or p.get("id")
        if not isinstance(call, str) or not call:
            self.unmodeled[f"item:{t} without call_id"] += 1
            return
        name = p.get("name") if isinstance(p.get("name"), str) and p["name"] else None
        args: dict[str, Any]
        if t == "function_call":
            raw = p.get("arguments")
            try:
                parsed = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                parsed = None
            args = parsed if isinstance(parsed, dict) else {"arguments": raw}
        elif t == "custom_tool_call":
            args = {"input": p.get("input")}
        else:
            action = p.get("action")
            args = action if isinstance(action, dict) else {"action": action}
            name = name or "local_shell"
        self.b.assistant([ToolUseBlock(id=call, name=name or "tool", input=args)])


INDEX = "session_index.jsonl"
"""Codex's sidecar of thread names (``$CODEX_HOME/session_index.jsonl``: ``{"id",
"thread_name", "updated_at"}`` a line, the newest line of an id wins)."""


def name_sessions(sessions: list[Session], root: Path, names: dict[str, str] | None = None) -> None:
    """Title the sessions Codex has a name for in the ``session_index.jsonl`` at ``root`` or
    the nearest of its four parents that has one (``~/.codex`` itself, when importing
    ``~/.codex/sessions`` or a day's folder of it), unless the rollout renamed its thread
    (``names``: that index, read already)."""
    names = index_names(root) if names is None else names
    for s in sessions:
        name = names.get(str(s.source.get("session_id")))
        if s.source.get("format") == FORMAT and name and not s.source.get("thread_name"):
            s.source["thread_name"] = name
            s.title = (
                f"{s.source['agent_nickname']}: {name}"
                if s.kind == Kind.WORKER and s.source.get("agent_nickname")
                else name
            )


def index_names(root: Path) -> dict[str, str]:
    """Session id → thread name, from the ``session_index.jsonl`` ``name_sessions`` reads (a
    regular file really in the folder it is found in, read with the import's bounds)."""
    names: dict[str, str] = {}
    for folder in [root, *root.parents][:5]:
        if (folder / INDEX).is_file():
            for o in read_lines(folder / INDEX, within=confine().within(folder)).objects:
                if isinstance(o.get("id"), str) and isinstance(o.get("thread_name"), str):
                    names[o["id"]] = o["thread_name"]
            break
    return names


def session_id(path: Path) -> str:
    """A rollout's session id, from its first line (the file's name without it)."""
    for o in head_objects(path, 1):
        p = o.get("payload")
        if o.get("type") == "session_meta" and isinstance(p, dict) and isinstance(p.get("id"), str):
            return str(p["id"])
    return path.stem


_UNIFIED_EXIT = re.compile(r"^Process exited with code (-?[0-9]+)$", re.MULTILINE)
"""The exit line of a unified-exec output (``exec_command``, ``write_stdin``: Codex 0.125 on),
among the header lines before ``Output:``."""


def _output(out: Any) -> tuple[str, bool, int | None]:
    """A call's output as text, whether the tool failed, and the command's exit status (None:
    not a command, or it did not say): a string — the JSON ``{"output", "metadata":
    {"exit_code"}}`` Codex writes for shell calls and ``apply_patch``, unified exec's text with
    its ``Process exited with code N`` header, or plain text — a legacy ``{"content",
    "success"}`` object, or a list of content items."""
    if isinstance(out, str):
        if out.startswith('{"output"'):
            try:
                parsed = json.loads(out)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("output"), str):
                meta = parsed.get("metadata")
                code = _int(meta.get("exit_code")) if isinstance(meta, dict) else None
                return parsed["output"], False, code
        if out.startswith(("Chunk ID: ", "Wall time: ")):
            head = out.split("\nOutput:\n", 1)[0]
            found = _UNIFIED_EXIT.search(head) if len(head) < len(out) else None
            return out, False, int(found.group(1)) if found else None
        return out, False, None
    if isinstance(out, dict):
        text, _, code = _output(out.get("content", out.get("output", "")))
        return text, out.get("success") is False, code
    if isinstance(out, list):
        parts = [
            str(c.get("text", "")) if isinstance(c, dict) and "text" in c else placeholder(c).text
            for c in out
        ]
        return "\n".join(parts), False, None
    return ("" if out is None else json.dumps(out)), False, None


def _result(call: str, text: str, error: bool, code: int | None) -> ToolResultBlock:
    """A call's result stored as threadloom's own ``bash`` stores one: a command's exit status
    in ``effects`` and as the ``[exit code: N]`` line its output ends with (what ``show`` and
    the model read) — a non-zero exit is a result, not a tool error. What the command changed
    in its workspace is unknown here (``complete=False``: no claim rests on it)."""
    if code is None:
        return ToolResultBlock(tool_use_id=call, content=text, is_error=error)
    text = f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}[exit code: {code}]"
    effects = Effects(exit_code=code, complete=False)
    return ToolResultBlock(tool_use_id=call, content=text, is_error=error, effects=effects)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _thread_spawn(source: Any) -> dict[str, Any] | None:
    if not isinstance(source, dict):
        return None
    sub = source.get("subagent") or source.get("sub_agent") or source.get("subAgent")
    if isinstance(sub, dict):
        spawn = sub.get("thread_spawn")
        if isinstance(spawn, dict):
            return spawn
    return None
