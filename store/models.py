"""The persisted shapes: content blocks, messages, thread info, usage and the distilled result.

Content blocks follow the Anthropic Messages format, discriminated by ``type``. Every model is
frozen and forbids unknown keys: what is stored is exactly what was validated. Cache-control
markers are a request-time concern of the providers and never reach these models.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from .refs import format_ref

__all__ = [
    "Change",
    "Check",
    "ClaimCheck",
    "ContentBlock",
    "Effects",
    "Finding",
    "ForkOrigin",
    "Kind",
    "Message",
    "NewMessage",
    "Result",
    "Role",
    "SearchHit",
    "Status",
    "StoredOutput",
    "TextBlock",
    "ThinkingBlock",
    "ThreadInfo",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "UsageRecord",
    "Verdict",
    "Verification",
]


CONTENT_FORMAT = 1
"""Schema version of the content-block JSON stored in ``messages.content``."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Frozen):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Frozen):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class ToolUseBlock(_Frozen):
    type: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class StoredOutput(_Frozen):
    """Set on a tool_result whose output was too large to keep inline (``store._outputs``): the
    block's ``content`` is then a preview — the output's first ``head`` characters, a marker line,
    its last ``tail`` characters — and the whole output, ``chars`` characters (``bytes`` bytes of
    UTF-8, SHA-256 ``sha256``), is stored apart in ``chunks`` rows of the ``outputs`` table, keyed
    by the message that owns the block. Only the store sets it; no model request carries it."""

    chars: int = Field(ge=0)
    bytes: int = Field(ge=0)
    chunks: int = Field(ge=0)
    head: int = Field(ge=0)
    tail: int = Field(ge=0)
    sha256: str


class Change(_Frozen):
    path: str = Field(min_length=1)
    action: Literal["added", "modified", "deleted"]


class Effects(_Frozen):
    """What a tool call did to its workspace, recorded by the tool that ran it (``bash``,
    ``write_file``, ``edit_file``) and stored with its result for the result check
    (``orchestrator.runtime.check``). Like ``stored``, no model request ever carries it: the
    model reads ``[exit code: N]`` in the output, as it always did.

    ``exit_code``: the shell's exit status (None: it did not exit on its own — timed out,
    killed, never started — or the tool is not a command). ``changed``: the workspace paths the
    call added, modified or deleted (paths a ``.gitignore`` rule matches, ``.git``,
    ``.threadloom``, ``__pycache__`` and ``*.pyc`` aside), relative to the workspace, sorted.
    ``complete`` False: the workspace was too large to compare whole, so ``changed`` may miss
    paths (a claim that rests on it is left unverified). ``concurrent`` True: another call ran
    in the same workspace meanwhile (a parallel call of the turn, or another worker sharing the
    directory), so ``changed`` may hold its changes too."""

    exit_code: int | None = None
    changed: list[Change] = Field(default_factory=list)
    complete: bool = True
    concurrent: bool = False


class ToolResultBlock(_Frozen):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str = Field(min_length=1)
    content: str | list[TextBlock] = ""
    is_error: bool = False
    stored: StoredOutput | None = None
    """None for an output kept inline (the usual case, and then absent from the stored JSON)."""
    effects: Effects | None = None
    """What the call did to the workspace (``Effects``); None for a tool that records nothing
    (and then absent from the stored JSON). Never sent to a model."""

    @property
    def text(self) -> str:
        """The output as stored inline: the whole output, or its preview when ``stored`` is set
        (``Store.output_text`` reads the whole one)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content)


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")
]
Role = Literal["user", "assistant"]

CONTENT_ADAPTER: TypeAdapter[list[ContentBlock]] = TypeAdapter(list[ContentBlock])


class NewMessage(_Frozen):
    """A message to append: the store numbers it."""

    role: Role
    content: list[ContentBlock] = Field(min_length=1)

    @field_validator("content", mode="before")
    @classmethod
    def _text_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [{"type": "text", "text": value}]
        return value

    @classmethod
    def user(cls, text: str) -> NewMessage:
        return cls(role="user", content=[TextBlock(text=text)])

    @classmethod
    def assistant(cls, text: str) -> NewMessage:
        return cls(role="assistant", content=[TextBlock(text=text)])

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class Message(NewMessage):
    """A stored message. ``thread_id`` is the thread that owns the row: for an inherited message
    of a fork it is the ancestor's id, while ``seq`` is the same in both."""

    seq: int
    thread_id: str
    created_at: datetime


class Status(StrEnum):
    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({Status.DONE, Status.FAILED, Status.INTERRUPTED, Status.CANCELLED})
TERMINAL_STATUSES: frozenset[Status] = _TERMINAL


class Kind(StrEnum):
    LEAD = "lead"
    WORKER = "worker"
    READER = "reader"


class Usage(_Frozen):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_creation_input_tokens
        )

    @property
    def total_input(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


class Finding(_Frozen):
    claim: str = Field(min_length=1)
    evidence: list[str] = Field(default_factory=list)


class Verification(_Frozen):
    command: str = Field(min_length=1)
    outcome: str


Verdict = Literal["verified", "unverified", "contradicted"]


class ClaimCheck(_Frozen):
    """The verdict on one claim of a result: which claim (``kind`` and its 0-based ``index`` in
    its list; None for ``status``), what was looked for and found (``reason``, one line), and
    the messages that decided it (``refs``)."""

    kind: Literal["status", "finding", "verification", "change"]
    index: int | None = None
    verdict: Verdict
    reason: str
    refs: list[str] = Field(default_factory=list)


class Check(_Frozen):
    """A result's check (SPEC "Checked results"): the worst verdict of its claims, each claim's,
    and ``rounds``: how many submissions were checked (2 after the one correction round)."""

    verdict: Verdict
    claims: list[ClaimCheck] = Field(default_factory=list)
    rounds: int = 1


class Result(_Frozen):
    """The distilled result a worker submits (SPEC §Distilled result), plus what the orchestrator
    adds. ``extra`` keeps additions of later versions (branch, diff stat, …) without a migration."""

    status: Literal["done", "partial", "failed", "blocked"]
    summary: str = Field(max_length=2000)
    findings: list[Finding] = Field(default_factory=list)
    changes: list[Change] = Field(default_factory=list)
    verification: list[Verification] = Field(default_factory=list)
    negative_results: list[str] = Field(default_factory=list)
    open_questions: list[str] = Field(default_factory=list)
    ref: str | None = None
    task: str | None = None
    turns: int | None = None
    usage: Usage | None = None
    duration_s: float | None = None
    dropped_evidence: int = 0
    branch: str | None = None
    diff_stat: str | None = None
    check: Check | None = None
    """The result checked against the worker's own transcript before anyone read it (SPEC
    "Checked results"); None for a result stored before checks existed."""


class ForkOrigin(_Frozen):
    thread_id: str
    at: int

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id)


class ThreadInfo(_Frozen):
    """A thread's metadata row (never its messages)."""

    id: str
    kind: Kind
    title: str
    status: Status
    parent_id: str | None
    forked_from: ForkOrigin | None
    job_id: str
    task: dict[str, Any] | None
    system_prompt: str | None
    tools: list[str]
    model: str | None
    result: Result | None
    error: str | None
    version: int
    head_seq: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    continues: str | None = None
    """The thread this one took over from in a handoff (SPEC "Jobs larger than one context")."""
    continued_by: str | None = None
    """The thread that took over from this one (it ended ``done`` handing off), or None."""

    @property
    def ref(self) -> str:
        return format_ref(self.id)

    @property
    def own_messages(self) -> int:
        """Messages stored in this thread's own rows (a fork's inherited ones excluded)."""
        return self.head_seq - (self.forked_from.at if self.forked_from else 0)


class SearchHit(_Frozen):
    """One hit: ``snippet`` the text around the matches as written (on one line), ``marks``
    the ``[start, end)`` character offsets of each match in it."""

    thread_id: str
    seq: int
    snippet: str
    role: Role
    marks: list[tuple[int, int]] = Field(default_factory=list)

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id, self.seq)


class UsageRecord(_Frozen):
    """What one model response cost, recorded with the assistant message it produced."""

    model: str
    usage: Usage
    cost_usd: float = 0.0


M = TypeVar("M", bound=BaseModel)

# The slots ``model_construct`` fills, set through their descriptors.
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def construct_model(cls: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """``cls.model_construct(**values)`` for values already valid, without its loop over the
    fields: ``values`` holds every field, in the model's order (its JSON's order), and
    ``fields_set`` (shared, never changed) those the caller gave. For the read path's hot loops
    (``_stored``, ``_threads``, the model views of ``workers._request``); public as
    ``store.construct_model``."""
    m: M = _new(cls)
    _set_dict(m, values)
    _set_fields(m, fields_set)
    _set_extra(m, None)
    _set_private(m, None)
    return m
