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


def worker_system_prompt(
    *, thread_ref: str, workspace: Path, tools: Sequence[str], notes_from: Path | None = None
) -> str:
    """The worker's system prompt. ``notes_from`` is where the project notes are read when the
    workspace does not exist yet (a git worktree, created when the worker first runs)."""
    return prompt_template("worker").format(
        thread_ref=thread_ref,
        workspace=workspace,
        tools=", ".join(tools),
        project_notes=project_notes(notes_from or workspace),
    )
