"""Another agent's history as this runner's model may see it: an imported thread (Claude Code,
Codex) called tools by their source's names (``Bash``, ``Read``, ``shell``, ``exec_command``,
``apply_patch``, ``TodoWrite`` …), which the thread, now run with threadloom's tools, does not
have. The request of an imported thread (``RequestBuilder(foreign=True)``) shows each such call:

- under threadloom's name, with its input translated, when one of the thread's tools means the
  same (``SOURCE_TOOLS``): ``Bash {command, timeout}`` is ``bash {command, timeout_s}``, ``Read
  {file_path, offset, limit}`` is ``read_file {path, offset, limit}``, Codex's ``shell`` argv
  (``["bash", "-lc", cmd]``) is ``bash {command: cmd}``, and so on. A call whose input says
  something the mapped tool cannot (a backgrounded command, grep context lines, several edits
  at once) is not the same call: it stays text, as below;
- otherwise as text the model can read, never call: the call as ``[earlier call of NAME, a
  tool this thread does not have now: {input}]`` in its assistant message, its result as ``[NAME
  result: …]`` in the next user message, after that message's remaining tool results (which
  must come first).

The stored transcript is never rewritten (it is append-only): this is the request's view, a pure
function of what is stored and of the thread's tool names, so a resumed thread's prefix is the
same on every request. Every ``tool_use`` the request keeps is still answered by its
``tool_result`` in the next message, and no message is left empty (a call turned into text
leaves its text).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Collection
from typing import Any

from store import ContentBlock, NewMessage, TextBlock, ToolResultBlock, ToolUseBlock

Translate = Callable[[dict[str, Any]], dict[str, Any] | None]
"""A source call's input as the mapped tool's input, or None when it does not mean the same."""


def _only(given: dict[str, Any], allowed: Collection[str]) -> bool:
    return all(k in allowed for k in given)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _seconds(ms: Any) -> dict[str, float]:
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms > 0:
        return {"timeout_s": ms / 1000}
    return {}


def _lines(given: dict[str, Any], *keys: str) -> dict[str, int]:
    out = {}
    for key in keys:
        v = given.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            out[key] = v
    return out


def _claude_bash(given: dict[str, Any]) -> dict[str, Any] | None:
    command = _str(given.get("command"))
    if command is None or given.get("run_in_background"):
        return None  # a command left running in the background is not a bash call
    if not _only(given, {"command", "description", "timeout", "dangerouslyDisableSandbox"}):
        return None
    return {"command": command, **_seconds(given.get("timeout"))}


def _argv_command(argv: Any) -> str | None:
    """A Codex ``shell`` argv as one bash command line: ``bash -lc CMD`` is CMD."""
    if isinstance(argv, str):
        return argv or None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    if (
        len(argv) == 3
        and argv[0] in ("bash", "sh", "zsh", "/bin/bash", "/bin/sh")
        and argv[1] in ("-lc", "-c")
    ):
        return argv[2] or None
    return shlex.join(argv)


def _codex_shell(given: dict[str, Any]) -> dict[str, Any] | None:
    command = _argv_command(given.get("command"))
    if command is None:
        return None
    allowed = {"command", "workdir", "timeout_ms", "timeout", "with_escalated_permissions"}
    if not _only(given, allowed | {"justification", "sandbox_permissions", "prefix_rule"}):
        return None
    return {"command": command, **_seconds(given.get("timeout_ms") or given.get("timeout"))}


def _codex_exec(given: dict[str, Any]) -> dict[str, Any] | None:
    command = _argv_command(given.get("cmd"))
    if command is None:
        return None
    allowed = {"cmd", "workdir", "yield_time_ms", "max_output_tokens", "shell", "login"}
    if not _only(given, allowed | {"justification", "sandbox_permissions", "prefix_rule", "tty"}):
        return None
    if given.get("tty"):
        return None  # an interactive session, read on with write_stdin: not one bash call
    return {"command": command}


def _read(given: dict[str, Any]) -> dict[str, Any] | None:
    path = _str(given.get("file_path"))
    if path is None or not _only(given, {"file_path", "offset", "limit"}):
        return None
    return {"path": path, **_lines(given, "offset", "limit")}


def _write(given: dict[str, Any]) -> dict[str, Any] | None:
    path, content = _str(given.get("file_path")), given.get("content")
    if path is None or not isinstance(content, str) or not _only(given, {"file_path", "content"}):
        return None
    return {"path": path, "content": content}


def _edit(given: dict[str, Any]) -> dict[str, Any] | None:
    path, old, new = _str(given.get("file_path")), given.get("old_string"), given.get("new_string")
    if path is None or not isinstance(old, str) or not old or not isinstance(new, str):
        return None
    if not _only(given, {"file_path", "old_string", "new_string", "replace_all"}):
        return None
    return {"path": path, "old": old, "new": new, "replace_all": given.get("replace_all") is True}


def _glob(given: dict[str, Any]) -> dict[str, Any] | None:
    pattern = _str(given.get("pattern"))
    if pattern is None or not _only(given, {"pattern", "path"}):
        return None
    return {"path": _str(given.get("path")) or ".", "pattern": pattern}


def _ls(given: dict[str, Any]) -> dict[str, Any] | None:
    path = _str(given.get("path"))
    if path is None or not _only(given, {"path"}):
        return None  # ``ignore`` patterns have no list_files counterpart
    return {"path": path}


_GREP_SHOWN = {"pattern", "path", "glob", "-i", "-n", "output_mode", "head_limit"}


def _grep(given: dict[str, Any]) -> dict[str, Any] | None:
    pattern = _str(given.get("pattern"))
    if pattern is None or not _only(given, _GREP_SHOWN):
        return None  # context lines, file types, multiline: not what grep(pattern, path) does
    out: dict[str, Any] = {"pattern": f"(?i){pattern}" if given.get("-i") is True else pattern}
    if _str(given.get("path")):
        out["path"] = given["path"]
    if _str(given.get("glob")):
        out["glob"] = given["glob"]
    return out


SOURCE_TOOLS: dict[str, tuple[str, Translate]] = {
    # Claude Code
    "Bash": ("bash", _claude_bash),
    "Read": ("read_file", _read),
    "Write": ("write_file", _write),
    "Edit": ("edit_file", _edit),
    "Glob": ("list_files", _glob),
    "LS": ("list_files", _ls),
    "Grep": ("grep", _grep),
    # Codex CLI
    "shell": ("bash", _codex_shell),
    "container.exec": ("bash", _codex_shell),
    "local_shell": ("bash", _codex_shell),
    "exec_command": ("bash", _codex_exec),
}
"""Source tool name → (threadloom tool, input translation). ``apply_patch``, ``write_stdin``,
``update_plan``, ``TodoWrite``, ``Task``, ``MultiEdit``, web and MCP tools … have no tool here that
means the same: they stay text."""


class ForeignHistory:
    """The request views of one imported thread's messages, in order (``view`` each message
    once, as ``RequestBuilder`` does): remembers which calls became text so their results do
    too."""

    def __init__(self, tools: Collection[str], *, shorten: Callable[[str, str], str]) -> None:
        """``shorten(text, ref)``: a call's input shown as text, capped as an output is (the
        request builder's cap, naming ``ref``, the message that stores it whole)."""
        self.tools = frozenset(tools)
        self.shorten = shorten
        self._as_text: dict[str, str] = {}  # tool_use id → the source tool's name

    def view(self, message: NewMessage, ref: str) -> NewMessage:
        """``message`` (the model's view of the stored message ``ref``) as this thread's model
        may see it."""
        if message.role == "assistant":
            if not any(isinstance(b, ToolUseBlock) for b in message.content):
                return message
            calls = [self._call(b, ref) for b in message.content]
            return NewMessage.trusted({"role": "assistant", "content": calls})
        if not self._as_text or not any(
            isinstance(b, ToolResultBlock) and b.tool_use_id in self._as_text
            for b in message.content
        ):
            return message
        results: list[ContentBlock] = []
        texts: list[ContentBlock] = []
        rest: list[ContentBlock] = []
        for b in message.content:
            if isinstance(b, ToolResultBlock):
                name = self._as_text.pop(b.tool_use_id, None)
                if name is None:
                    results.append(b)
                else:
                    error = " (an error)" if b.is_error else ""
                    texts.append(TextBlock(text=f"[{name} result{error}:]\n{b.text}"))
            else:
                rest.append(b)
        content = [*results, *texts, *rest]
        return NewMessage.trusted({"role": "user", "content": content})

    def _call(self, block: ContentBlock, ref: str) -> ContentBlock:
        if not isinstance(block, ToolUseBlock) or block.name in self.tools:
            return block
        mapped = SOURCE_TOOLS.get(block.name)
        if mapped is not None and mapped[0] in self.tools:
            target, translate = mapped
            given = translate(block.input)
            if given is not None:
                return ToolUseBlock(id=block.id, name=target, input=given)
        self._as_text[block.id] = block.name
        shown = self.shorten(json.dumps(block.input, ensure_ascii=False), ref)
        return TextBlock(
            text=f"[earlier call of {block.name}, a tool this thread does not have now: {shown}]"
        )
