"""The lead's and the readers' system prompts (the text files beside this module: package data)."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def _template(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.md").read_text("utf-8")


def lead_system_prompt() -> str:
    return _template("lead")


def reader_system_prompt(target_ref: str) -> str:
    return _template("reader").format(target=target_ref)
