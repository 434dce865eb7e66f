"""The persisted shapes: content blocks, messages, thread info, usage and the distilled result.

One family of plain classes, the only one: the store writes them, reads them back, and every
package above passes them on. Content blocks follow the Anthropic Messages format, told apart by
``type``. Each class declares each field once (``name: type = field(check, default)``, in the
order its JSON is written), and is built one of two ways:

- **validated**, where data enters: ``Cls(**values)`` or ``Cls.model_validate(obj)`` check every
  field (unknown keys, missing ones, types, bounds) and raise ``ValidationError`` naming each
  bad one by its path — appends, imports, a model's reply, a row of a shape the reader does not
  know;
- **trusted**, from what the store itself wrote (``trusted``): the parsed JSON object becomes the
  instance's ``__dict__`` as it is, with a field the JSON leaves out read from the class's
  default. Building 40,000 blocks of a long history this way is one allocation each.

Instances are frozen (``__setattr__`` refuses) and compare by their fields. ``model_dump``,
``model_copy`` and ``model_validate`` keep the names the edges use; pydantic itself stays at
the edges (tool inputs, job files, the result a worker submits), so importing this module costs
no pydantic — the CLI's read-only fast path reads through the same classes. Cache-control markers
are a request-time concern of the providers and never reach these models.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from . import _record as rec
from ._record import DICT, LIST, Loc, Model, ValidationError, field
from .refs import format_ref

__all__ = [
    "TERMINAL_STATUSES",
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
    "ValidationError",
    "Verdict",
    "Verification",
    "validate_blocks",
]

CONTENT_FORMAT = 1
"""Schema version of the content-block JSON stored in ``messages.content``."""


# ----------------------------------------------------------------- content blocks


class TextBlock(Model):
    type: Literal["text"] = field(rec.one_of("text"), "text")
    text: str = field(rec.text())


class ThinkingBlock(Model):
    type: Literal["thinking"] = field(rec.one_of("thinking"), "thinking")
    thinking: str = field(rec.text())
    signature: str | None = field(rec.optional(rec.text()), None)


class ToolUseBlock(Model):
    type: Literal["tool_use"] = field(rec.one_of("tool_use"), "tool_use")
    id: str = field(rec.text(1))
    name: str = field(rec.text(1))
    input: dict[str, Any] = field(rec.mapping, DICT)


class StoredOutput(Model):
    """Set on a tool_result whose output was too large to keep inline (``store._outputs``): the
    block's ``content`` is then a preview — the output's first ``head`` characters, a marker line,
    its last ``tail`` characters — and the whole output, ``chars`` characters (``bytes`` bytes of
    UTF-8, SHA-256 ``sha256``), is stored apart in ``chunks`` rows of the ``outputs`` table, keyed
    by the message that owns the block. Only the store sets it; no model request carries it."""

    chars: int = field(rec.count)
    bytes: int = field(rec.count)
    chunks: int = field(rec.count)
    head: int = field(rec.count)
    tail: int = field(rec.count)
    sha256: str = field(rec.text())


class Change(Model):
    path: str = field(rec.text(1))
    action: Literal["added", "modified", "deleted"] = field(
        rec.one_of("added", "modified", "deleted")
    )


class Effects(Model):
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

    exit_code: int | None = field(rec.optional(rec.integer), None)
    changed: list[Change] = field(rec.list_of(rec.model(Change)), LIST)
    complete: bool = field(rec.flag, True)
    concurrent: bool = field(rec.flag, False)


def _result_content(v: Any, loc: Loc) -> str | list[TextBlock]:
    if isinstance(v, str):
        return v
    return rec.list_of(rec.model(TextBlock))(v, loc)  # type: ignore[no-any-return]


class ToolResultBlock(Model):
    type: Literal["tool_result"] = field(rec.one_of("tool_result"), "tool_result")
    tool_use_id: str = field(rec.text(1))
    content: str | list[TextBlock] = field(_result_content, "")
    is_error: bool = field(rec.flag, False)
    stored: StoredOutput | None = field(rec.optional(rec.model(StoredOutput)), None)
    """None for an output kept inline (the usual case, and then absent from the stored JSON)."""
    effects: Effects | None = field(rec.optional(rec.model(Effects)), None)
    """What the call did to the workspace (``Effects``); None for a tool that records nothing
    (and then absent from the stored JSON). Never sent to a model."""

    @property
    def text(self) -> str:
        """The output as stored inline: the whole output, or its preview when ``stored`` is set
        (``Store.output_text`` reads the whole one)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content)


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock
Role = Literal["user", "assistant"]

BLOCK_CLASSES: dict[str, type[Model]] = {
    "text": TextBlock,
    "thinking": ThinkingBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
}
"""Each content block's class by its ``type``."""
_BLOCK_TYPES = tuple(BLOCK_CLASSES.values())


def _block(v: Any, loc: Loc) -> ContentBlock:
    if isinstance(v, _BLOCK_TYPES):
        return v  # type: ignore[return-value]
    if not isinstance(v, dict):
        raise rec.bad(loc, "Input should be a valid dictionary or content block")
    cls = BLOCK_CLASSES.get(v.get("type"))  # type: ignore[arg-type]
    if cls is None:
        if "type" not in v:
            raise rec.bad(loc, "Unable to extract tag using discriminator 'type'")
        tags = ", ".join(repr(t) for t in BLOCK_CLASSES)
        raise rec.bad(
            loc,
            f"Input tag {v['type']!r} found using 'type' does not match any of the expected"
            f" tags: {tags}",
        )
    return cls.model_validate(v, _loc=(*loc, v["type"]))  # type: ignore[return-value]


def validate_blocks(value: Any) -> list[ContentBlock]:
    """Content blocks (objects or JSON-decoded dicts), each validated by its ``type``."""
    try:
        return rec.list_of(_block)(value, ())  # type: ignore[no-any-return]
    except ValidationError as err:
        raise ValidationError("content blocks", err._errors) from None


def _content(v: Any, loc: Loc) -> list[ContentBlock]:
    if isinstance(v, str):
        return [TextBlock.trusted({"type": "text", "text": v})]
    return rec.list_of(_block, 1)(v, loc)  # type: ignore[no-any-return]


class NewMessage(Model):
    """A message to append: the store numbers it."""

    role: Role = field(rec.one_of("user", "assistant"))
    content: list[ContentBlock] = field(_content)

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

    seq: int = field(rec.integer)
    thread_id: str = field(rec.text())
    created_at: datetime = field(rec.moment)


# ----------------------------------------------------------------- threads and results


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


class Usage(Model):
    input_tokens: int = field(rec.integer, 0)
    output_tokens: int = field(rec.integer, 0)
    cache_read_input_tokens: int = field(rec.integer, 0)
    cache_creation_input_tokens: int = field(rec.integer, 0)

    def __add__(self, other: Usage) -> Usage:
        return Usage.trusted(
            {
                "input_tokens": self.input_tokens + other.input_tokens,
                "output_tokens": self.output_tokens + other.output_tokens,
                "cache_read_input_tokens": self.cache_read_input_tokens
                + other.cache_read_input_tokens,
                "cache_creation_input_tokens": self.cache_creation_input_tokens
                + other.cache_creation_input_tokens,
            }
        )

    @property
    def total_tokens(self) -> int:
        return self.total_input + self.output_tokens

    @property
    def total_input(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


class Finding(Model):
    claim: str = field(rec.text(1))
    evidence: list[str] = field(rec.strs, LIST)


class Verification(Model):
    command: str = field(rec.text(1))
    outcome: str = field(rec.text())


Verdict = Literal["verified", "unverified", "contradicted"]
_VERDICT = rec.one_of("verified", "unverified", "contradicted")


class ClaimCheck(Model):
    """The verdict on one claim of a result: which claim (``kind`` and its 0-based ``index`` in
    its list; None for ``status``), what was looked for and found (``reason``, one line), and
    the messages that decided it (``refs``)."""

    kind: Literal["status", "finding", "verification", "change"] = field(
        rec.one_of("status", "finding", "verification", "change")
    )
    index: int | None = field(rec.optional(rec.integer), None)
    verdict: Verdict = field(_VERDICT)
    reason: str = field(rec.text())
    refs: list[str] = field(rec.strs, LIST)


class Check(Model):
    """A result's check (SPEC "Checked results"): the worst verdict of its claims, each claim's,
    and ``rounds``: how many submissions were checked (2 after the one correction round)."""

    verdict: Verdict = field(_VERDICT)
    claims: list[ClaimCheck] = field(rec.list_of(rec.model(ClaimCheck)), LIST)
    rounds: int = field(rec.integer, 1)


class Result(Model):
    """The distilled result a worker submits (SPEC §Distilled result), plus what the orchestrator
    adds. ``extra`` keeps additions of later versions (branch, diff stat, …) without a migration.
    ``check``: the result checked against the worker's own transcript before anyone read it (SPEC
    "Checked results"); None for a result stored before checks existed."""

    status: Literal["done", "partial", "failed", "blocked"] = field(
        rec.one_of("done", "partial", "failed", "blocked")
    )
    summary: str = field(rec.text(0, 2000))
    findings: list[Finding] = field(rec.list_of(rec.model(Finding)), LIST)
    changes: list[Change] = field(rec.list_of(rec.model(Change)), LIST)
    verification: list[Verification] = field(rec.list_of(rec.model(Verification)), LIST)
    negative_results: list[str] = field(rec.strs, LIST)
    open_questions: list[str] = field(rec.strs, LIST)
    ref: str | None = field(rec.optional(rec.text()), None)
    task: str | None = field(rec.optional(rec.text()), None)
    turns: int | None = field(rec.optional(rec.integer), None)
    usage: Usage | None = field(rec.optional(rec.model(Usage)), None)
    duration_s: float | None = field(rec.optional(rec.number), None)
    dropped_evidence: int = field(rec.integer, 0)
    branch: str | None = field(rec.optional(rec.text()), None)
    diff_stat: str | None = field(rec.optional(rec.text()), None)
    check: Check | None = field(rec.optional(rec.model(Check)), None)


class ForkOrigin(Model):
    thread_id: str = field(rec.text())
    at: int = field(rec.integer)

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id)


def _opt_text() -> rec.Check_:
    return rec.optional(rec.text())


class ThreadInfo(Model):
    """A thread's metadata row (never its messages). ``continues``: the thread this one took
    over from in a handoff (SPEC "Jobs larger than one context"); ``continued_by``: the thread
    that took over from this one (it ended ``done`` handing off), or None."""

    id: str = field(rec.text())
    kind: Kind = field(rec.enum(Kind))
    title: str = field(rec.text())
    status: Status = field(rec.enum(Status))
    parent_id: str | None = field(_opt_text())
    forked_from: ForkOrigin | None = field(rec.optional(rec.model(ForkOrigin)))
    job_id: str = field(rec.text())
    task: dict[str, Any] | None = field(rec.optional(rec.mapping))
    system_prompt: str | None = field(_opt_text())
    tools: list[str] = field(rec.strs)
    model: str | None = field(_opt_text())
    result: Result | None = field(rec.optional(rec.model(Result)))
    error: str | None = field(_opt_text())
    version: int = field(rec.integer)
    head_seq: int = field(rec.integer)
    lease_owner: str | None = field(_opt_text())
    lease_expires_at: datetime | None = field(rec.optional(rec.moment))
    created_at: datetime = field(rec.moment)
    updated_at: datetime = field(rec.moment)
    continues: str | None = field(_opt_text(), None)
    continued_by: str | None = field(_opt_text(), None)

    @property
    def ref(self) -> str:
        return format_ref(self.id)

    @property
    def own_messages(self) -> int:
        """Messages stored in this thread's own rows (a fork's inherited ones excluded)."""
        return self.head_seq - (self.forked_from.at if self.forked_from else 0)


class SearchHit(Model):
    """One hit: ``snippet`` the text around the matches as written (on one line), ``marks``
    the ``[start, end)`` character offsets of each match in it."""

    thread_id: str = field(rec.text())
    seq: int = field(rec.integer)
    snippet: str = field(rec.text())
    role: Role = field(rec.one_of("user", "assistant"))
    marks: list[tuple[int, int]] = field(rec.list_of(rec.span), LIST)

    @property
    def ref(self) -> str:
        return format_ref(self.thread_id, self.seq)


class UsageRecord(Model):
    """What one model response cost, recorded with the assistant message it produced."""

    model: str = field(rec.text())
    usage: Usage = field(rec.model(Usage))
    cost_usd: float = field(rec.number, 0.0)
