"""The SPEC JSON shapes (SPEC §Command line, ``--json``) of threads, messages, results and
usage: what every front door — the CLI, the MCP server, the web viewer — returns, built in one
place (``orchestrator.api`` computes them; the CLI's read-only fast path builds them from the
same models, read through ``store.rawread``).

Pure functions over the store's models. No click, no rich, and nothing heavy at import — the
fast path's start-up time is the point.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store import Message, Result, ThreadInfo, Usage, UsageTotal


LS_LIMIT = 50
"""How many threads ``ls`` (and ``api.list_threads``) lists unless told: the newest."""


def iso(when: datetime) -> str:
    """A timestamp as JSON carries it: ISO 8601, UTC when the database gave no zone."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.isoformat()


def usage_json(usage: Usage) -> dict[str, int]:
    return usage.model_dump(mode="json")


def cache_share(usage: Usage) -> float | None:
    """cache_read / (input + cache_read + cache_creation): how much input came from the cache."""
    total = usage.total_input
    return None if total == 0 else usage.cache_read_input_tokens / total


def fork_json(info: ThreadInfo) -> dict[str, Any] | None:
    f = info.forked_from
    return None if f is None else {"ref": f.ref, "at": f.at}


def thread_json(info: ThreadInfo) -> dict[str, Any]:
    """A thread's metadata as ``ls`` lists it (and ``show`` starts it); ``source``: where an
    imported thread came from (``source_json``), None for any other; ``continues`` and
    ``continued_by``: the thread it took over from in a handoff and the one that took over
    from it (SPEC "Jobs larger than one context"), refs or None."""
    return {
        "ref": info.ref,
        "kind": str(info.kind),
        "status": str(info.status),
        "title": info.title,
        "parent": _ref(info.parent_id),
        "forked_from": fork_json(info),
        "created_at": iso(info.created_at),
        "messages": info.head_seq,
        "job": _ref(info.job_id),
        "model": info.model,
        "updated_at": iso(info.updated_at),
        "source": source_json(info.task),
        "continues": _ref(info.continues),
        "continued_by": _ref(info.continued_by),
    }


WholeText = Callable[[Any, Any], "str | None"]
"""``whole(message, block)``: the whole text of a tool output stored apart (``show --raw``), or
None to keep the block as stored (its preview)."""


def message_json(msg: Message, thread_id: str, *, whole: WholeText | None = None) -> dict[str, Any]:
    # the blocks as stored, without the fields left None
    content = [b.model_dump(mode="json", exclude_none=True) for b in msg.content]
    if whole is not None:  # outputs stored apart, whole instead of their preview
        for block, dumped in zip(msg.content, content, strict=True):
            text = whole(msg, block) if getattr(block, "stored", None) is not None else None
            if text is not None:
                dumped["content"] = text
    out: dict[str, Any] = {"seq": msg.seq, "role": msg.role, "content": content}
    if msg.thread_id != thread_id:
        out["from"] = _ref(msg.thread_id)
    out["created_at"] = iso(msg.created_at)
    return out


def source_json(task: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where an imported thread came from (``{"format", "session_id", "path", …}``, SPEC
    §Importing other agents' sessions), without the importer's bookkeeping; None otherwise."""
    src = (task or {}).get("source")
    if not isinstance(src, dict):
        return None
    return {k: v for k, v in src.items() if k != "imported"}


def result_json(result: Result | None) -> dict[str, Any] | None:
    """A result's SPEC JSON; its ``check`` whole (a ``status`` claim's ``index`` is null)."""
    if result is None:
        return None
    data: dict[str, Any] = result.model_dump(mode="json", exclude_none=True)
    if result.check is not None:
        data["check"] = result.model_dump(mode="json")["check"]
    return data


VERDICT_MARKS = {"verified": "✓", "unverified": "?", "contradicted": "✗"}
"""How a claim's verdict is shown in text (``show``, ``run``, ``tree``, the lead's results)."""


def check_summary(check: Any) -> dict[str, Any] | None:
    """A result check in brief: its verdict, rounds and how many claims got each verdict."""
    if check is None:
        return None
    counts = {v: 0 for v in VERDICT_MARKS}
    for c in check.claims:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    return {"verdict": check.verdict, "rounds": check.rounds, "claims": len(check.claims), **counts}


def claim_lines(check: Any) -> list[str]:
    """Each claim of a result check as one line: ``✓ verification 0: <reason> (T-…#7)``."""
    out = []
    for c in check.claims:
        where = c.kind if c.index is None else f"{c.kind} {c.index}"
        refs = f" ({', '.join(c.refs)})" if c.refs else ""
        out.append(f"{VERDICT_MARKS.get(c.verdict, '?')} {where}: {c.reason}{refs}")
    return out


def _ref(thread_id: str | None) -> str | None:
    return None if thread_id is None else f"T-{thread_id}"


def hit_json(hit: Any) -> dict[str, Any]:
    """One search hit (a ``SearchHit``), SPEC ``search``, and
    ``marks``: the ``[start, end)`` offsets (in characters) of each match in ``snippet``,
    which is the text as written, with no marker in it."""
    return {
        "ref": hit.ref,
        "thread": f"T-{hit.thread_id}",
        "seq": hit.seq,
        "role": hit.role,
        "snippet": hit.snippet,
        "marks": [[start, end] for start, end in hit.marks],
    }


HIT_OPEN, HIT_CLOSE = "⟦", "⟧"
"""How a match is marked where it cannot be styled (piped output, a model's tool output)."""


def snippet_parts(
    snippet: str, marks: Sequence[Sequence[int]], width: int | None = None
) -> list[tuple[str, bool]]:
    """``snippet`` cut at its ``marks`` (a hit's): (text, is_match) parts, in order; with
    ``width``, the parts of its first ``width`` characters, the last cut ending in "…"."""
    cut = width is not None and len(snippet) > width
    end = max((width or 0) - 1, 0) if cut else len(snippet)
    parts: list[tuple[str, bool]] = []
    pos = 0
    for start, stop in sorted((int(a), int(b)) for a, b in marks):
        start, stop = max(start, pos), min(stop, end)
        if start >= stop:
            continue
        parts += [(snippet[pos:start], False), (snippet[start:stop], True)]
        pos = stop
    parts.append((snippet[pos:end] + ("…" if cut else ""), False))
    return [p for p in parts if p[0]]


def marked(part: str, is_match: bool) -> str:
    """One of ``snippet_parts`` as plain text that cannot be misread: a match between
    ``HIT_OPEN`` and ``HIT_CLOSE``, and those two characters, where the text itself holds
    them, spelt ``\\u27e6`` and ``\\u27e7`` — so every ⟦ ⟧ printed is a mark."""
    text = part.replace(HIT_OPEN, "\\u27e6").replace(HIT_CLOSE, "\\u27e7")
    return f"{HIT_OPEN}{text}{HIT_CLOSE}" if is_match else text


def marked_snippet(hit: Any, width: int | None = None) -> str:
    """A hit's snippet as plain text, its matches marked (``marked``)."""
    return "".join(marked(t, m) for t, m in snippet_parts(hit.snippet, hit.marks, width))


# ----------------------------------------------------------------- tool outputs

_EXIT_FOOTER = re.compile(r"\[exit code: (-?[0-9]+)[^\]\n]*\]\s*\Z")
_TELLS = re.compile(
    r"(?i)\b(?:error|errors|failed|failure|failures|fatal|panic|traceback|exception)\b"
)


def output_summary(text: str, *, is_error: bool) -> tuple[str, str]:
    """How a tool output is summed up on one line: (state, the line that tells).

    ``state`` is ``ok``, ``error`` (the tool failed: a timeout, a refused path), or ``exit N``
    for a command that exited non-zero (``bash`` ends its output with ``[exit code: N]``): a
    failed test run is not "ok". The line that tells: for a command that failed, its last line
    when that one says so (``FAILED (errors=1)``, ``1 failed in 0.2s``), else its first line
    that names an error, else its last; for one that succeeded, its last line (``OK``, ``Ran 12
    tests``); for anything else, its first line. Blank lines and the exit footer never count."""
    footer = _EXIT_FOOTER.search(text)
    code = int(footer.group(1)) if footer else None
    lines = [ln for ln in (text[: footer.start()] if footer else text).splitlines() if ln.strip()]
    state = "error" if is_error else f"exit {code}" if code else "ok"
    if not lines:
        return state, ""
    if code is None and not is_error:
        return state, lines[0]
    if code == 0:
        return state, lines[-1]
    if _TELLS.search(lines[-1]):
        return state, lines[-1]
    return state, next((ln for ln in lines if _TELLS.search(ln)), lines[-1])


# ----------------------------------------------------------------- show


class ThreadView:
    """One thread as ``show`` sees it, read by either path: its metadata, usage and cost, and
    its messages — the whole visible history or the range ``start``..``end`` the ref named
    (``start`` None: the whole thread), or None when they were not asked for. ``before`` is
    the message preceding a range (its tool calls name the results that open the range).

    A plain class rather than a dataclass: building one at import costs the fast path ~1 ms."""

    __slots__ = ("before", "cost", "end", "info", "messages", "start", "usage")

    def __init__(
        self,
        info: ThreadInfo,
        messages: Sequence[Message] | None,
        *,
        usage: Usage,
        cost: float,
        start: int | None = None,
        end: int | None = None,
        before: Message | None = None,
    ) -> None:
        self.info = info
        self.messages = messages
        self.usage = usage
        self.cost = cost
        self.start = start
        self.end = end
        self.before = before

    @property
    def shown(self) -> tuple[int, int] | None:
        """The range shown, (first, last); None for the whole thread."""
        return None if self.start is None else (self.start, self.end or self.info.head_seq)

    def to_json(self, *, whole: WholeText | None = None) -> dict[str, Any]:
        """SPEC ``show --json`` (without ``messages`` when they were not asked for); with
        ``whole``, each tool output stored apart carries its whole text (``show --raw``)
        instead of its preview, its ``stored`` entry kept to say it was."""
        info, shown = self.info, self.shown
        data: dict[str, Any] = {
            **thread_json(info),
            "result": result_json(info.result),
            "usage": usage_json(self.usage),
            "cost_usd": self.cost,
            "range": None if shown is None else {"start": shown[0], "end": shown[1]},
            "task": info.task,
            "error": info.error,
        }
        if self.messages is None:
            del data["messages"]  # ``ls``'s count: one key, one meaning (here: the list)
        else:
            data["messages"] = [message_json(m, info.id, whole=whole) for m in self.messages]
        return data


# ----------------------------------------------------------------- tree


def tree_json(
    focus: ThreadInfo,
    threads: Sequence[ThreadInfo],
    totals: Mapping[str, Any],
    *,
    empty: Usage,
) -> dict[str, Any]:
    """SPEC ``tree --json``: the job's lead node, nested — a spawned thread under the thread
    that spawned it, a fork under the thread it was forked from — with ``focus`` naming the
    ref asked about. ``threads``: the job's, oldest first; ``totals``: the usage total
    (``UsageTotal``) per thread id; ``empty``: the usage of a thread with none.

    A handoff's chain (SPEC "Jobs larger than one context") stays together: each node names
    the thread it ``continues`` and the one it is ``continued_by``; a successor is listed right
    after its predecessor, in the predecessor's list (a worker's successor follows it among
    its lead's ``children``), and the first lead's successors — the job's later leads, each
    with the workers it spawned — are ``successors``, in chain order. The chain is laid out
    flat, not nested, so a job of many handoffs is no deeper than a job of one."""
    by_id = {t.id: t for t in threads}
    root = by_id.get(focus.job_id, threads[0] if threads else focus)
    by_id.setdefault(root.id, root)
    # each thread's successor within the job; a successor hangs where its chain begins
    successor = {
        t.continues: t.id
        for t in threads
        if t.continues is not None and t.continues in by_id and t.id != root.id
    }
    successors = set(successor.values())
    children: dict[str, list[str]] = {t: [] for t in by_id}
    forks: dict[str, list[str]] = {t: [] for t in by_id}
    for t in threads:
        if t.id == root.id or t.id in successors:
            continue
        if t.forked_from and t.forked_from.thread_id in by_id:
            forks[t.forked_from.thread_id].append(t.id)
        elif t.parent_id and t.parent_id in by_id:
            children[t.parent_id].append(t.id)
        else:
            children[root.id].append(t.id)

    def chain(tid: str) -> list[str]:
        """``tid``'s successors, in order (never a thread twice)."""
        out: list[str] = []
        while (tid := successor.get(tid, "")) and tid not in out:
            out.append(tid)
        return out

    def chained(ids: list[str]) -> list[str]:
        return [x for tid in ids for x in (tid, *chain(tid))]

    def node(tid: str) -> dict[str, Any]:
        t = by_id[tid]
        usage = totals[tid].usage if tid in totals else empty
        return {
            "ref": t.ref,
            "kind": str(t.kind),
            "status": str(t.status),
            "title": t.title,
            "usage": usage_json(usage),
            "tokens": usage.total_tokens,
            "cost_usd": totals[tid].cost_usd if tid in totals else 0.0,
            "check": check_summary(t.result.check) if t.result is not None else None,
            "parent": _ref(t.parent_id),
            "forked_from": fork_json(t),
            "continues": _ref(t.continues),
            "continued_by": _ref(t.continued_by),
            "children": [node(c) for c in chained(children[tid])],
            "forks": [node(f) for f in chained(forks[tid])],
        }

    data = node(root.id)
    data["successors"] = [node(s) for s in chain(root.id)]
    data["focus"] = focus.ref
    return data


# ----------------------------------------------------------------- stats


def stats_json(
    threads: Sequence[ThreadInfo],
    totals: Mapping[str, UsageTotal],
    leads: Mapping[str, ThreadInfo | None],
) -> dict[str, Any]:
    """SPEC ``stats --json``: ``threads`` (one row each, in the order given), ``jobs`` (one row
    per job among them, with its lead's title: ``leads`` maps job id → lead) and ``total``.
    ``totals``: the usage total per thread id (a thread without one used nothing)."""
    from store import Usage  # the store path only: the fast path has no ``stats``

    def usage_of(tid: str) -> Usage:
        return totals[tid].usage if tid in totals else Usage()

    def cost_of(tid: str) -> float:
        return totals[tid].cost_usd if tid in totals else 0.0

    def summed(members: Sequence[ThreadInfo]) -> dict[str, Any]:
        usage = Usage()
        for t in members:
            usage = usage + usage_of(t.id)
        return {
            "usage": usage_json(usage),
            "cost_usd": sum(cost_of(t.id) for t in members),
            "cache_read_share": cache_share(usage),
            "checked_claims": checked_share(members),
        }

    jobs: dict[str, list[ThreadInfo]] = {}
    for t in threads:
        jobs.setdefault(t.job_id, []).append(t)
    return {
        "threads": [
            {
                "ref": t.ref,
                "kind": str(t.kind),
                "title": t.title,
                "job": f"T-{t.job_id}",
                "usage": usage_json(usage_of(t.id)),
                "cost_usd": cost_of(t.id),
                "responses": totals[t.id].responses if t.id in totals else 0,
                "cache_read_share": cache_share(usage_of(t.id)),
                "check": check_summary(t.result.check) if t.result is not None else None,
                "checked_claims": checked_share([t]),
            }
            for t in threads
        ],
        "jobs": [
            {
                "ref": f"T-{j}",
                "title": lead.title if (lead := leads.get(j)) is not None else "",
                "threads": len(members),
                **summed(members),
            }
            for j, members in jobs.items()
        ],
        "total": summed(threads),
    }


def checked_share(threads: Sequence[ThreadInfo]) -> dict[str, Any]:
    """The claims of the threads' checked results: how many, how many verified, the share."""
    claims = verified = 0
    for t in threads:
        check = t.result.check if t.result is not None else None
        if check is not None:
            claims += len(check.claims)
            verified += sum(c.verdict == "verified" for c in check.claims)
    return {
        "claims": claims,
        "verified": verified,
        "share": round(verified / claims, 4) if claims else None,
    }
