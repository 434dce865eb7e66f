"""The tool contract: what a tool receives, what it returns, and how bad input is answered.

A tool is called by the worker loop with the model's raw ``input`` dict. ``Tool.invoke`` is the one
boundary: it validates the input against the tool's pydantic ``Input`` model, runs the tool, and
turns every domain problem (bad input, a refused path, a missing file, an ``OSError``) into an
error ``ToolOutput`` the model can read and correct. It never raises for those; only programming
errors and ``asyncio.CancelledError`` propagate (cancellation must, so that a stopped worker stops).
"""

from __future__ import annotations

import abc
import asyncio
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

import pydantic

from store import Effects
from workers._protocol import ToolSpec

from ._errors import ToolFailure

RAW_ARGUMENTS_KEY = "_raw_arguments"
"""A provider puts the model's arguments under this key when they were not valid JSON."""

_ECHO_LIMIT = 500


@dataclass(frozen=True)
class ToolContext:
    """What a tool run may use. ``workspace`` is the absolute, already resolved root that confines
    every file tool; ``env`` is extra environment for ``bash`` (filtered like the rest)."""

    workspace: Path
    thread_ref: str = ""
    env: Mapping[str, str] | None = None
    default_timeout_s: float = 120.0
    tool_use_id: str = ""
    """The id of the ``tool_use`` being answered (tools that must be idempotent per call key
    their effects on it, e.g. ``dispatch``)."""
    sandbox: Literal["auto", "required", "none"] = "none"
    """How ``bash`` isolates a command (``workers.tools._sandbox``). ``none`` here, for code
    that builds a context by hand; jobs default to ``auto`` and pass their setting down."""
    network: bool = False
    """Under the sandbox: whether a command may use the network."""
    hidden: tuple[Path, ...] = ()
    """Paths no tool may reach, whatever the sandbox mode: threadloom's database (and its
    ``-wal``/``-shm``/``-journal``), the job logs. The file tools refuse them by resolved path and
    (for the files in them) by device and inode, ``list_files``/``grep`` never show them, and the
    sandbox mounts them empty. The workspace's ``.threadloom/`` is always added by the file tools
    (``workers.tools._paths.Guard``), even when this is empty."""


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result as stored in the transcript (whole; the loop caps what the model sees).
    ``effects``: what the call did to the workspace (``store.Effects``), stored with the result
    and never shown to the model; None for a tool that changes nothing. Not part of equality:
    two outputs are equal when they say the same to the model."""

    text: str
    is_error: bool = False
    effects: Effects | None = field(default=None, compare=False)


class ToolInput(pydantic.BaseModel):
    """Base of every tool's ``Input``: immutable, and unknown fields are an error the model sees."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


InputT = TypeVar("InputT", bound=ToolInput)


class Tool(abc.ABC, Generic[InputT]):
    """A coding tool. Subclasses set ``name``, ``description`` and ``Input`` and implement
    ``run``; callers use ``spec()`` for the model and ``invoke()`` to call it."""

    name: ClassVar[str]
    description: ClassVar[str]
    Input: type[InputT]
    replay_safe: ClassVar[bool] = False
    """True when running the same call twice is harmless (reads; ``dispatch``, whose dispatch
    rows make a replay reuse its workers). After a crash such calls are run again on resume;
    every other unanswered call gets the "interrupted; effect unknown" result instead."""

    @abc.abstractmethod
    async def run(self, args: InputT, ctx: ToolContext) -> ToolOutput:
        """Do the work. May raise ``ToolFailure`` or ``OSError``; ``invoke`` reports them."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=clean_schema(self.Input.model_json_schema()),
        )

    async def invoke(self, raw_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Validate ``raw_input`` and run; domain failures come back as error outputs."""
        if isinstance(raw_input, Mapping) and RAW_ARGUMENTS_KEY in raw_input:
            received = str(raw_input[RAW_ARGUMENTS_KEY])
            if len(received) > _ECHO_LIMIT:
                received = received[:_ECHO_LIMIT] + f"… [{len(received) - _ECHO_LIMIT} more chars]"
            return ToolOutput(
                f"{self.name}: the arguments were not valid JSON, so the tool did not run. "
                f"Send a JSON object matching the tool's input schema. Received: {received}",
                is_error=True,
            )
        try:
            args = self.Input.model_validate(raw_input)
        except pydantic.ValidationError as exc:
            return ToolOutput(self._describe_invalid(exc), is_error=True)
        try:
            return await self.run(args, ctx)
        except ToolFailure as exc:
            return ToolOutput(f"{self.name}: {exc}", is_error=True)
        except UnicodeError as exc:
            return ToolOutput(f"{self.name}: cannot decode text: {exc}", is_error=True)
        except OSError as exc:
            message = describe_os_error(exc, ctx.workspace)
            return ToolOutput(f"{self.name}: {message}", is_error=True)

    def _describe_invalid(self, exc: pydantic.ValidationError) -> str:
        problems = []
        for err in exc.errors(include_url=False)[:10]:
            where = ".".join(str(part) for part in err["loc"]) or "input"
            message = "unexpected field" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{where}: {message}")
        fields = ", ".join(
            f"{key}{'' if info.is_required() else '?'}"
            for key, info in self.Input.model_fields.items()
        )
        return (
            f"{self.name}: invalid input, the tool did not run ({'; '.join(problems)}). "
            f"Expected fields: {fields}."
        )


class BlockingTool(Tool[InputT]):
    """A tool whose work is blocking filesystem calls. It runs on a worker thread so that walking
    a large tree or reading a large file does not stall every other thread's worker sharing the
    event loop. (A cancelled call returns at once; the thread finishes its current step.)"""

    async def run(self, args: InputT, ctx: ToolContext) -> ToolOutput:
        return await asyncio.to_thread(self.run_blocking, args, ctx)

    @abc.abstractmethod
    def run_blocking(self, args: InputT, ctx: ToolContext) -> ToolOutput: ...


def workspace_root(ctx: ToolContext) -> Path:
    """The workspace as a real path (``ToolContext`` promises it resolved; this makes it so)."""
    return Path(os.path.realpath(ctx.workspace))


def describe_os_error(exc: OSError, workspace: Path) -> str:
    """``No such file or directory: src/x.py`` — the path shown relative to the workspace."""
    reason = exc.strerror or (errno.errorcode.get(exc.errno or 0) if exc.errno else None)
    reason = reason or str(exc) or type(exc).__name__
    if exc.filename is None:
        return reason
    return f"{reason}: {display_path(workspace, os.fsdecode(exc.filename))}"


def display_path(workspace: Path, path: str | os.PathLike[str]) -> str:
    """``path`` relative to the workspace when it lies inside it (``.`` for the root)."""
    candidate = Path(path)
    for root in (workspace, Path(os.path.realpath(workspace))):
        if candidate.is_absolute() and candidate.is_relative_to(root):
            rel = candidate.relative_to(root).as_posix()
            return printable(rel if rel else ".")
    return printable(str(path))


def printable(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (surrogate-escaped) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema the model sees: no pydantic ``title`` noise, and ``X | None`` shown as ``X``
    (``null`` is still accepted; the field is simply not required)."""
    return _clean_node(schema)  # type: ignore[no-any-return]


def _clean_node(node: Any) -> Any:
    if isinstance(node, list):
        return [_clean_node(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _clean_node(sub) for name, sub in value.items()}
        else:
            out[key] = _clean_node(value)
    variants = out.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        (kept,) = [v for v in variants if v != {"type": "null"}]
        del out["anyOf"]
        if out.get("default", 0) is None:
            del out["default"]
        out = {**kept, **out}
    return out
