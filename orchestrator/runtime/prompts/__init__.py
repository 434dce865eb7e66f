"""The lead's and the readers' system prompts (the text files beside this module: package data)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any


@cache
def _template(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.md").read_text("utf-8")


def lead_system_prompt() -> str:
    return _template("lead")


def reader_system_prompt(target_ref: str) -> str:
    return _template("reader").format(target=target_ref)


ORIGINS = {"claude-code": "Claude Code", "codex": "the Codex CLI"}


def imported_system_prompt(
    *, thread_ref: str, source: dict[str, Any], workspace: Path, tools: Sequence[str]
) -> str:
    """The system prompt of an imported thread (``source``: its ``task.source``) that runs in
    threadloom with ``tools`` in ``workspace``."""
    from workers import project_notes

    fmt = str(source.get("format") or "")
    cwd = source.get("cwd")
    return _template("imported").format(
        origin=ORIGINS.get(fmt, fmt or "another agent"),
        where=f", working in {cwd}" if isinstance(cwd, str) and cwd else "",
        thread_ref=thread_ref,
        workspace=workspace,
        tools=", ".join(tools),
        project_notes=project_notes(workspace),
    )
