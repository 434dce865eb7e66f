"""The lead's and the readers' system prompts (text files under ``orchestrator/prompts/``)."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def _template(name: str) -> str:
    return resources.files("orchestrator").joinpath("prompts", f"{name}.md").read_text("utf-8")


def lead_system_prompt() -> str:
    return _template("lead")


def reader_system_prompt(target_ref: str) -> str:
    return _template("reader").format(target=target_ref)
