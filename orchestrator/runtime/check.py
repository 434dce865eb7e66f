"""The result check (SPEC "Checked results"): a worker's distilled result against its own
transcript, before anyone reads it. Deterministic, no model call, one pass over the history.

Each claim gets a verdict with the refs that decided it (``store.ClaimCheck``):

- **finding** i — verified when one of its evidence refs names a message of the thread (its
  fork lineage included: ``Store.ancestry``); unverified when none does (another thread, past
  the end, not a ref at all, or no evidence).
- **verification** i — the claimed command is looked for among the thread's ``bash`` calls,
  each split into its sub-commands and normalised (``_commands``: quoting, whitespace,
  redirections, ``cd DIR &&``, ``python -m``). Unverified when no call ran it, or when the latest
  call that did came before the worker's last change to the workspace (a file tool's write, or a
  command that changed a path — not one that ran beside another call in a shared directory,
  whose record may hold the other's changes: ``Effects.concurrent``); then, from the call's
  recorded exit status: verified when it agrees with the outcome (pass, fail), contradicted
  when it does not, unverified when the call's status does not say (``a; b``) or the outcome
  says neither.
- **change** i — the path against the worktree diff from the job's base (``diff``, with
  worktree isolation) or else the thread's own changes (file tools and the paths each ``bash``
  call recorded, folded: added then modified is added, added then deleted is nothing): verified
  when that path changed that way, contradicted when it did not change or changed otherwise,
  unverified when a call's changes are not known (an old transcript, a walk cut short).
- **status** — one claim per path that changed but that neither this result nor an earlier
  submission of the thread lists ("unreported change", unverified), and a ``done`` from a thread
  that made no tool call (unverified).

Every contradicted claim names at least one ref: the run or write that shows the contrary, or
the submission itself when the contrary is an absence. A ref, path or command that is malformed,
huge or hostile makes its claim unverified; nothing here raises on bad input, and nothing is
written: the caller stores the ``Check`` with the result (the loop's ``check_result`` hook, in
``job.JobRuntime.run``; ``check_thread`` for a result made outside the loop).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from store import (
    Change,
    Check,
    ClaimCheck,
    Message,
    Result,
    Store,
    ThreadRef,
    ToolResultBlock,
    ToolUseBlock,
    Verdict,
    format_ref,
)

from ._commands import MAX_COMMAND_CHARS, Segment, block_status, claimed_outcome, segments

SUBMIT = "submit_result"
READ_ONLY = frozenset({"read_file", "list_files", "grep"})
"""Tools that never change the workspace (any other call without a record may have)."""
WRITERS = frozenset({"write_file", "edit_file"})
INTERRUPTED = "interrupted; effect unknown"
MAX_CLAIMS = 500
"""Claims of one kind checked at most; the rest are one unverified claim."""
MAX_UNREPORTED = 20
"""Unreported paths given a claim each; the rest are counted in one more."""
MAX_REF_CHARS = 200
MAX_PATH_CHARS = 4096
_EXIT = re.compile(r"\[exit code: (-?\d+)[^\]\n]*\]\s*$")
_TIMED_OUT = re.compile(r"\[timed out after [^\]\n]*\]\s*$")
_ORDER: dict[Verdict, int] = {"verified": 0, "unverified": 1, "contradicted": 2}
UNKNOWN: Any = object()


@dataclass(slots=True)
class _Call:
    """One tool call of the thread, in order, with what its result recorded."""

    order: int
    use_seq: int
    result_seq: int | None
    name: str
    input: dict[str, Any]
    changed: list[Change] | None  # None: not known (the call may have changed anything)
    exit_code: Any = UNKNOWN  # int, None (did not exit on its own) or UNKNOWN
    concurrent: bool = False  # its record may hold changes another call made meanwhile
    segs: list[Segment] | None = None

    @property
    def seq(self) -> int:
        return self.result_seq if self.result_seq is not None else self.use_seq


@dataclass(slots=True)
class _Thread:
    """What the check reads of the transcript, indexed once."""

    thread_id: str
    calls: list[_Call] = field(default_factory=list)
    submission_seq: int = 0
    reported_before: set[str] = field(default_factory=set)
    last_change: _Call | None = None
    net: dict[str, list[Any]] = field(default_factory=dict)  # path → [net action, last seqs]
    tool_calls: int = 0
    own: set[str] = field(default_factory=set)  # paths a call changed with nobody else around
    unknown: list[_Call] = field(default_factory=list)

    def ref(self, seq: int) -> str:
        return format_ref(self.thread_id, seq)


def check_result(
    result: Result,
    *,
    thread_id: str,
    history: Sequence[Message],
    ancestry: Sequence[tuple[str, int]] = (),
    diff: Mapping[str, str] | None = None,
    workspace: str | None = None,
) -> Check:
    """The check of ``result`` against the thread's visible ``history`` (inherited messages
    included). ``ancestry``: ``Store.ancestry(thread_id)`` (default: the thread alone);
    ``diff``: path → action from the job's base, with worktree isolation; ``workspace``: the
    directory the worker's paths are relative to (an absolute claimed path inside it is read
    relative). ``rounds`` is left at 1: the loop counts the correction round."""
    t = _index(thread_id, history)
    head = history[-1].seq if history else 0
    lineage = [(o, max(b, head) if o == thread_id else b) for o, b in ancestry] or [
        (thread_id, head)
    ]
    claims: list[ClaimCheck] = []
    claims += _limited("finding", result.findings, lambda i, f: _finding(t, lineage, i, f.evidence))
    claims += _limited(
        "verification", result.verification, lambda i, v: _verification(t, i, v.command, v.outcome)
    )
    changes = diff if diff is not None else {p: e[0] for p, e in t.net.items()}
    claims += _limited(
        "change",
        result.changes,
        lambda i, c: _change(t, i, _path(c.path, workspace), c.action, changes, diff is not None),
    )
    reported = {_path(c.path, workspace) for c in result.changes} | t.reported_before
    # without a worktree, a path only a concurrent call saw change may be another's doing
    mine = changes if diff is not None else {p: a for p, a in changes.items() if p in t.own}
    claims += _unreported(t, mine, reported)
    if result.status == "done" and not t.tool_calls:
        claims.append(
            _claim(
                "status",
                None,
                "unverified",
                "status done, but the thread made no tool call",
                [t.ref(t.submission_seq)],
            )
        )
    verdict = max((c.verdict for c in claims), key=_ORDER.__getitem__, default="verified")
    return Check(verdict=verdict, claims=claims)


async def check_thread(
    store: Store,
    thread_id: str,
    result: Result,
    *,
    diff: Mapping[str, str] | None = None,
    workspace: str | None = None,
) -> Check:
    """``check_result`` with the history and lineage read from the store (a result made
    outside the worker loop: an imported thread's, a re-check)."""
    history = await store.messages(thread_id)
    ancestry = await store.ancestry(thread_id)
    return check_result(
        result,
        thread_id=thread_id,
        history=history,
        ancestry=ancestry,
        diff=diff,
        workspace=workspace,
    )


# ----------------------------------------------------------------- the transcript, indexed


def _index(thread_id: str, history: Sequence[Message]) -> _Thread:
    """One pass: every call with its answer (answers come in the message after their calls,
    so they are looked up when that message is reached), folded into the thread's changes. A
    read-only call is only counted: it changes nothing and verifies nothing."""
    t = _Thread(thread_id)
    pending: dict[str, tuple[int, ToolUseBlock]] = {}
    order = 0
    for m in history:
        if m.role == "assistant":
            for b in m.content:
                if type(b) is ToolUseBlock:
                    pending[b.id] = (m.seq, b)
            continue
        if not pending:
            continue
        for b in m.content:
            if type(b) is not ToolResultBlock:
                continue
            found = pending.pop(b.tool_use_id, None)
            if found is not None:
                order = _take(t, order, found[0], found[1], (m.seq, b))
    for seq, use in sorted(pending.values(), key=lambda p: p[0]):  # never answered
        order = _take(t, order, seq, use, None)
    t.calls.sort(key=lambda c: c.order)
    if not t.submission_seq and history:
        t.submission_seq = history[-1].seq
    return t


def _take(
    t: _Thread,
    order: int,
    seq: int,
    use: ToolUseBlock,
    answer: tuple[int, ToolResultBlock] | None,
) -> int:
    if use.name == SUBMIT:
        # the newest submission (the one checked) is not answered yet; an earlier one that was
        # recorded told the lead what it changed
        if seq >= t.submission_seq:
            t.submission_seq = seq
        if answer is not None and not answer[1].is_error:
            t.reported_before |= _submitted_paths(use.input)
        return order
    t.tool_calls += 1
    if use.name in READ_ONLY and answer is not None:
        return order + 1
    call = _call(order, seq, use, answer)
    if call.name == "bash" or call.changed != []:
        t.calls.append(call)
    _fold(t, call)
    return order + 1


def _call(
    order: int, seq: int, use: ToolUseBlock, answer: tuple[int, ToolResultBlock] | None
) -> _Call:
    if answer is None:
        changed: list[Change] | None = None if use.name not in READ_ONLY else []
        return _Call(order, seq, None, use.name, use.input, changed)
    result_seq, block = answer
    call = _Call(order, seq, result_seq, use.name, use.input, None)
    effects = block.effects
    if effects is not None:
        call.changed = effects.changed if effects.complete else None
        call.concurrent = effects.concurrent
        if use.name == "bash" and not block.text.startswith(INTERRUPTED):
            call.exit_code = effects.exit_code
        return call
    text = block.text
    if use.name in WRITERS and block.is_error:
        call.changed = []
    elif text.startswith(INTERRUPTED):
        pass  # the effect is unknown: a change may have happened
    elif use.name in WRITERS:
        path = _path(str(use.input.get("path", "")), None)
        made = use.name == "write_file" and text.startswith("Created")
        call.changed = [Change(path=path, action="added" if made else "modified")] if path else None
    elif use.name == "bash":  # recorded before bash kept its effects: read its footer
        tail = text[-200:]
        if (found := _EXIT.search(tail)) is not None:
            call.exit_code = int(found.group(1))
        elif _TIMED_OUT.search(tail):
            call.exit_code = None
    return call


def _fold(t: _Thread, call: _Call) -> None:
    """The call's changes into the thread's net changes and its last change."""
    changed = call.changed
    if changed is None:
        t.unknown.append(call)
        if t.last_change is None or call.order > t.last_change.order:
            t.last_change = call
        return
    if not changed:
        return
    # a command that ran beside another in a shared directory may hold that one's changes:
    # they are not taken for this worker's last change (only its own writes and commands are)
    if not call.concurrent and (t.last_change is None or call.order > t.last_change.order):
        t.last_change = call
    net, seq = t.net, call.seq
    for c in changed:
        entry = net.get(c.path)
        if entry is None:
            net[c.path] = [c.action, [seq]]
        else:
            entry[0] = _then(entry[0], c.action)
            seqs = entry[1]
            seqs.append(seq)
            if len(seqs) > 3:
                del seqs[0]
        if not call.concurrent:
            t.own.add(c.path)


def _then(before: str | None, now: str) -> str:
    """The net action of ``before`` followed by ``now`` (``gone``: added, then deleted)."""
    if before is None or before == "gone":
        return "added" if before == "gone" and now != "deleted" else now
    if before == "added":
        return "gone" if now == "deleted" else "added"
    if before == "deleted":
        return "deleted" if now == "deleted" else "modified"
    return "deleted" if now == "deleted" else "modified"


def _submitted_paths(raw: Any) -> set[str]:
    out: set[str] = set()
    changes = raw.get("changes") if isinstance(raw, dict) else None
    if isinstance(changes, list):
        for c in changes[:MAX_CLAIMS]:
            if isinstance(c, dict) and isinstance(c.get("path"), str):
                out.add(_path(c["path"], None))
    return out


# ----------------------------------------------------------------- the claims


def _claim(
    kind: Literal["status", "finding", "verification", "change"],
    index: int | None,
    verdict: Verdict,
    reason: str,
    refs: Iterable[str] = (),
) -> ClaimCheck:
    return ClaimCheck(kind=kind, index=index, verdict=verdict, reason=reason, refs=list(refs))


def _limited(kind: Any, items: Sequence[Any], one: Any) -> list[ClaimCheck]:
    out = [one(i, item) for i, item in enumerate(items[:MAX_CLAIMS])]
    if len(items) > MAX_CLAIMS:
        out.append(
            _claim(
                kind,
                MAX_CLAIMS,
                "unverified",
                f"{len(items) - MAX_CLAIMS} more {kind} claims were not checked",
            )
        )
    return out


def _finding(
    t: _Thread, lineage: Sequence[tuple[str, int]], index: int, evidence: Sequence[str]
) -> ClaimCheck:
    if not evidence:
        return _claim(
            "finding", index, "unverified", "it cites no evidence ref", [t.ref(t.submission_seq)]
        )
    good: list[str] = []
    bad: list[str] = []
    for raw in evidence[:50]:
        why = _resolve(raw, t.thread_id, lineage, good)
        if why:
            bad.append(why)
    if good:
        return _claim(
            "finding",
            index,
            "verified",
            f"its evidence {', '.join(good[:3])} names this thread's messages",
            good[:5],
        )
    shown = "; ".join(bad[:2]) + (f"; +{len(bad) - 2} more" if len(bad) > 2 else "")
    return _claim(
        "finding",
        index,
        "unverified",
        f"no evidence ref names a message of this thread ({shown})",
        [t.ref(t.submission_seq)],
    )


def _resolve(raw: Any, self_id: str, lineage: Sequence[tuple[str, int]], good: list[str]) -> str:
    """'' when ``raw`` names messages of the thread's lineage (appended to ``good`` as
    ``T-<self>#n``), else why not."""
    if not isinstance(raw, str) or len(raw) > MAX_REF_CHARS:
        return "a malformed ref"
    shown = _printable(raw)
    try:
        ref = ThreadRef.parse(raw)
    except Exception:
        return f"{shown!r} is not a ref"
    if ref.start is None:
        return f"{shown} names no message"
    last = ref.start if ref.end is None or ref.open_end else ref.end
    owners = [(o, b) for o, b in lineage if o.startswith(ref.id)]
    if not owners:
        return f"{shown} is another thread"
    if ref.start < 1 or last is None or not any(last <= b for _, b in owners):
        return f"{shown} is past the end (#{max(b for _, b in owners)})"
    head = lineage[0][1]
    end = min(ref.end, head) if ref.end is not None and not ref.open_end else None
    good.append(format_ref(self_id, ref.start, end))
    return ""


def _verification(t: _Thread, index: int, command: str, outcome: str) -> ClaimCheck:
    wanted = [s.text for s in segments(command)]
    if not wanted:
        why = "it is too long to compare" if len(command) > MAX_COMMAND_CHARS else "it is empty"
        return _claim(
            "verification", index, "unverified", f"the command {why}", [t.ref(t.submission_seq)]
        )
    shown = _short(command)
    program = wanted[0].split(" ", 1)[0]
    for call in reversed(t.calls):
        if call.name != "bash":
            continue
        line = call.input.get("command")
        if not isinstance(line, str) or program not in line:
            continue
        if call.segs is None:
            call.segs = segments(line)
        at = _find(call.segs, wanted)
        if at is not None:
            return _judged(t, index, call, at, shown, outcome)
    return _claim(
        "verification",
        index,
        "unverified",
        f"no bash call of this thread ran `{shown}`",
        [t.ref(t.submission_seq)],
    )


def _judged(
    t: _Thread, index: int, call: _Call, at: tuple[int, int], shown: str, outcome: str
) -> ClaimCheck:
    run = t.ref(call.seq)
    last = t.last_change
    if last is not None and last.order > call.order:
        what = "a change" if last.changed else "a call whose changes are not known"
        return _claim(
            "verification",
            index,
            "unverified",
            f"`{shown}` last ran at {run}, before {what} at {t.ref(last.seq)}",
            [run, t.ref(last.seq)],
        )
    if call.exit_code is UNKNOWN:
        return _claim(
            "verification",
            index,
            "unverified",
            f"`{shown}` ran at {run}, but its exit status was not recorded",
            [run],
        )
    status = block_status(call.segs or [], at[0], at[1], call.exit_code)
    code = "did not exit (timed out)" if call.exit_code is None else f"exited {call.exit_code}"
    said = claimed_outcome(outcome)
    if status == "unknown":
        return _claim(
            "verification",
            index,
            "unverified",
            f"`{shown}` ran at {run} among other commands; the line {code}, which does"
            " not say how it alone ended",
            [run],
        )
    if said == "unknown":
        verdict: Verdict = "verified" if status == "passed" else "unverified"
        note = "" if status == "passed" else "; the outcome does not say it failed"
        return _claim(
            "verification", index, verdict, f"`{shown}` ran at {run} and {code}{note}", [run]
        )
    agrees = (said == "pass") == (status == "passed")
    if agrees:
        return _claim(
            "verification",
            index,
            "verified",
            f"`{shown}` ran at {run}, after the last change, and {code}",
            [run],
        )
    claimed = "passing" if said == "pass" else "failing"
    return _claim(
        "verification",
        index,
        "contradicted",
        f"claimed {claimed}, but `{shown}` {code} at {run}",
        [run],
    )


def _find(run: list[Segment], wanted: list[str]) -> tuple[int, int] | None:
    """The last place ``wanted`` occurs in ``run`` as consecutive sub-commands."""
    texts = [s.text for s in run]
    n = len(wanted)
    for start in range(len(texts) - n, -1, -1):
        if texts[start : start + n] == wanted:
            return start, start + n
    return None


def _change(
    t: _Thread,
    index: int,
    path: str,
    action: str,
    changes: Mapping[str, str],
    from_diff: bool,
) -> ClaimCheck:
    submission = [t.ref(t.submission_seq)]

    def said(verdict: Verdict, reason: str, refs: list[str]) -> ClaimCheck:
        return _claim("change", index, verdict, reason, refs or submission)

    if not path:
        return said("unverified", "the path is empty or malformed", submission)
    where = "the worktree diff" if from_diff else "this thread's record of its changes"
    shown = _short(path)
    found = changes.get(path)
    if found is None:  # a directory: what changed below it
        inside = [a for p, a in changes.items() if p.startswith(path + "/") and a != "gone"]
        if inside:
            found = action if action in inside else inside[0]
    entry = t.net.get(path)
    refs = [t.ref(s) for s in entry[1]] if entry else []
    if found == action:
        return said("verified", f"{where} shows {shown} {action}", refs)
    if found is not None and found != "gone":
        return said("contradicted", f"claimed {action}, but {where} shows {shown} {found}", refs)
    if t.unknown and not from_diff:
        unknown = [t.ref(c.seq) for c in t.unknown[-3:]]
        why = (
            f"no recorded change to {shown}, but the changes of {', '.join(unknown)} are not known"
        )
        return said("unverified", why, unknown)
    gone = " (added, then deleted)" if found == "gone" else ""
    return said(
        "contradicted", f"claimed {action}, but {where} shows no change to {shown}{gone}", refs
    )


def _unreported(t: _Thread, changes: Mapping[str, str], reported: set[str]) -> list[ClaimCheck]:
    dirs = tuple(p + "/" for p in reported if p)
    missing = sorted(
        p
        for p, a in changes.items()
        if a != "gone" and p not in reported and not p.startswith(dirs)
    )
    out = []
    for p in missing[:MAX_UNREPORTED]:
        entry = t.net.get(p)
        refs = [t.ref(s) for s in entry[1]] if entry else [t.ref(t.submission_seq)]
        out.append(
            _claim(
                "status",
                None,
                "unverified",
                f"unreported change: {_short(p)} {changes[p]}, not listed in changes",
                refs,
            )
        )
    if len(missing) > MAX_UNREPORTED:
        out.append(
            _claim(
                "status",
                None,
                "unverified",
                f"unreported changes: {len(missing) - MAX_UNREPORTED} more paths",
                [t.ref(t.submission_seq)],
            )
        )
    return out


# ----------------------------------------------------------------- small pieces


def _path(raw: str, workspace: str | None) -> str:
    """A claimed path as the records name it: relative to the workspace, normalised; '' when
    it is empty, huge or leaves the workspace."""
    if not isinstance(raw, str) or len(raw) > MAX_PATH_CHARS:
        return ""
    p = raw.strip().replace("\\", "/")
    if workspace and p.startswith(workspace.rstrip("/") + "/"):
        p = p[len(workspace.rstrip("/")) + 1 :]
    p = posixpath.normpath(p) if p else ""
    if p in (".", "") or p.startswith("../") or p == ".." or p.startswith("/"):
        return ""
    return p


def _short(text: str, limit: int = 120) -> str:
    text = _printable(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text[:MAX_REF_CHARS])
