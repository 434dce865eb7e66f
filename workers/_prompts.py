"""System prompts, kept as text files under ``workers/prompts/`` and filled in here."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path

PROJECT_NOTE_FILES = ("AGENTS.md", "CLAUDE.md")
PROJECT_NOTES_MAX_CHARS = 20_000


@cache
def prompt_template(name: str) -> str:
    return resources.files("workers").joinpath("prompts", f"{name}.md").read_text("utf-8")


def project_notes(workspace: Path) -> str:
    """The workspace's own AGENTS.md (or CLAUDE.md), as text: it is read, never executed, and
    only a regular file inside the workspace counts (not a symlink pointing elsewhere)."""
    root = workspace.resolve()
    for name in PROJECT_NOTE_FILES:
        path = root / name
        try:
            if path.is_symlink() or not path.is_file():
                continue
            text = path.read_text("utf-8", errors="replace")
        except OSError:
            continue
        if len(text) > PROJECT_NOTES_MAX_CHARS:
            text = text[:PROJECT_NOTES_MAX_CHARS] + "\n[… truncated]"
        return f"\nThe project's own notes ({name}), as written by its maintainers:\n\n{text}\n"
    return ""


_HOW = {
    "native": (
        "Call tools through the API's tool calls. If you must write a call as text, write one JSON"
        ' object, {"name": "<tool>", "arguments": {…}}, and nothing else.'
    ),
    "constrained": 'Each reply is one JSON object: {"name": "<tool>", "arguments": {…}}.',
}


def tool_use_section(*, model: str, tool_calls: str, thread_ref: str, tools: Sequence[str]) -> str:
    """Short, explicit tool-use steps for a worker on an OpenAI-compatible endpoint (``openai:``
    specs: local, often small models that answer in prose, invent results or call no tool);
    empty for the others. It depends on the spec's provider and ``tool_calls`` alone, so the
    system prompt, the start of the prefix a server caches, is the same bytes for the same
    model (``auto`` reads as ``native``: a turn starts native)."""
    if not model.startswith("openai:"):
        return ""
    return prompt_template("worker_tool_use").format(
        tools=", ".join(tools),
        how=_HOW.get(tool_calls, _HOW["native"]),
        thread_ref=thread_ref,
    )


def worker_system_prompt(
    *,
    thread_ref: str,
    workspace: Path,
    tools: Sequence[str],
    notes_from: Path | None = None,
    model: str = "",
    tool_calls: str = "native",
) -> str:
    """The worker's system prompt. ``notes_from`` is where the project notes are read when the
    workspace does not exist yet (a git worktree, created when the worker first runs). ``model``
    (the worker's spec) and ``tool_calls`` (the job's) choose the tool-use steps
    (``tool_use_section``)."""
    return prompt_template("worker").format(
        thread_ref=thread_ref,
        workspace=workspace,
        tools=", ".join(tools),
        tool_use=tool_use_section(
            model=model, tool_calls=tool_calls, thread_ref=thread_ref, tools=tools
        ),
        project_notes=project_notes(notes_from or workspace),
    )
