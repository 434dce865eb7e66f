"""The job's ledger (SPEC "Jobs larger than one context"): what a successor lead is told, as its
first and only user message, when the lead before it hands off.

It is the job's state as the store already holds it — every task with its status, its worker's
ref, its check verdict and its result summary; worker threads no dispatch names (forks);
the tasks still running; open questions; the previous lead's last words with their ref — never a
summary a model wrote. Nothing is lost by it: every entry names a thread that stays whole, one
``read_thread`` away.

Rendered deterministically: the same store state gives the same bytes (no clock, tasks in the
order of their dispatch rows, other threads by id, no set or dict order; running, queued and
interrupted all read ``running``, so a lease expiring between two renders changes nothing), so a
re-rendered successor keeps a byte-identical prefix for the provider's cache. Bounded: the
entries start detailed and the oldest collapse to one line (``- [id] done ✓ T-…``) until the
whole fits the budget; a ledger that does not fit even in its minimal form (goal plus one line
per task) raises ``LedgerTooLarge`` naming the smallest ``lead_context_tokens`` that works.
``minimum_lead_context`` renders that minimal form for a job file's tasks with the same code,
before anything is stored.

Two reads of the store (the job's threads and its dispatch rows) and a few of the previous
lead's newest messages: no query per task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from store import Dispatch, Kind, Status, Store, ThreadInfo, format_ref, new_id
from workers import BYTES_PER_TOKEN, estimate_tokens

from ..errors import LedgerTooLarge
from ..jobs import JobSpec
from ..views import VERDICT_MARKS
from .lead_tools import lead_prefix_tokens
from .threads import lead_tool_names

TITLE_CHARS = 100
"""A task's title in a detailed entry."""
SUMMARY_CHARS = 600
"""A result's summary in a detailed entry (the whole is one ``read_thread`` away)."""
ERROR_CHARS = 300
QUESTION_CHARS = 300
MAX_QUESTIONS = 10
"""Open questions listed (the newest results' first); each result keeps them all."""
LAST_WORDS_CHARS = 2_000
"""The previous lead's last words, cut at this many characters."""

STILL_RUNNING = frozenset({Status.RUNNING, Status.QUEUED, Status.INTERRUPTED})
"""A task whose newest worker is in one of these still runs: its result reaches the current
lead when it ends. All three read ``running`` (whether a runner lives is not the store's state)."""

CLOSING = (
    "Nothing was summarized: every thread named here is whole, one read_thread away by its ref."
    " You are this job's lead now (the previous lead's context was full). Continue the job:"
    " dispatch what remains, review the results, then write the report. Do not dispatch again"
    " a task that is done."
)

_ID_CHARS = len(new_id())
_PLACEHOLDER_SEQ = 9_999_999
"""A placeholder message number for the minimum: longer than any lead's."""


@dataclass(frozen=True, slots=True)
class Ledger:
    text: str
    """The successor lead's first (and only) user message."""
    tokens: int
    """``estimate_tokens(text)``."""
    tasks: int
    """Entries listed: one per dispatch row, and one per worker thread no dispatch names."""
    collapsed: int
    """How many of those were collapsed to one line."""


class _Entry:
    """One task (or undispatched worker thread): its one line, and its detailed form (the line,
    its title, and the lines below it), rendered when first asked for — only the newest
    entries of a long job are ever shown detailed."""

    __slots__ = ("_detailed", "_info", "key", "line", "questions", "running")

    def __init__(
        self,
        key: str,
        status: str,
        mark: str,
        ref: str,
        info: ThreadInfo | None = None,
    ) -> None:
        self.key = key
        self.running = status == "running"
        self.line = f"- [{key}] {status}{f' {mark}' if mark else ''} {ref}"
        self._info = info
        result = info.result if info is not None else None
        self.questions = tuple(
            _one_line(q, QUESTION_CHARS) for q in (result.open_questions if result else ())
        )
        self._detailed: str | None = None if info is not None else self.line

    @property
    def detailed(self) -> str:
        if self._detailed is None:
            assert self._info is not None
            self._detailed = _details(self.key, self.line, self._info)
        return self._detailed


@dataclass(frozen=True, slots=True)
class _State:
    """What the ledger says, before it is rendered at a level of detail."""

    head: tuple[str, ...]
    tasks: tuple[_Entry, ...]
    others: tuple[_Entry, ...] = ()
    leads: tuple[str, ...] = ()
    last_words: tuple[str, str] | None = None  # (ref, text)

    @property
    def entries(self) -> tuple[_Entry, ...]:
        """Every entry, oldest first: the order they collapse in."""
        return self.tasks + self.others


def _render(state: _State, collapsed: int, *, minimal: bool = False) -> str:
    """The ledger with its ``collapsed`` oldest entries in one line; ``minimal``: without the
    parts that are not one line per task (lead chain, still-running list, open questions, the
    last words' text — their refs stay)."""
    out = list(state.head)
    if state.leads and not minimal:
        out.append(f"Leads so far, oldest first: {', '.join(state.leads)}")
    n = len(state.tasks)
    out.append(
        f"Tasks ({n}, in the order dispatched; older ones may be one line: read_thread"
        " their ref for the rest):"
    )
    entries = state.entries
    out += (e.line if i < collapsed else e.detailed for i, e in enumerate(entries[:n]))
    if state.others:
        out.append("Other worker threads of the job (forks, and their successors):")
        out += (e.line if i < collapsed else e.detailed for i, e in enumerate(entries[n:], n))
    if not minimal:
        out += _running_lines(entries) + _question_lines(entries)
    if state.last_words is not None:
        ref, text = state.last_words
        if minimal:
            out.append(f"The previous lead's last words: {ref}")
        else:
            out += [f"The previous lead's last words ({ref}):", text]
    out.append(CLOSING)
    return "\n".join(out)


def _running_lines(entries: Sequence[_Entry]) -> list[str]:
    running = [e.key for e in entries if e.running]
    if not running:
        return []
    return [
        f"Still running ({len(running)}; their results reach you as they end): {', '.join(running)}"
    ]


def _question_lines(entries: Sequence[_Entry]) -> list[str]:
    asked = [(e.key, q) for e in reversed(entries) for q in e.questions]
    if not asked:
        return []
    shown = asked[:MAX_QUESTIONS]
    if len(shown) < len(asked):
        head = f"Open questions ({len(shown)} of {len(asked)}, newest results first):"
    else:
        head = f"Open questions ({len(asked)}):"
    return [head, *(f"- {key}: {q}" for key, q in shown)]


def _fit(state: _State, budget: int, prefix_tokens: int) -> Ledger:
    """The most detailed rendering within ``budget``: the fewest oldest entries collapsed, else
    the minimal form. The estimate is of bytes (``BYTES_PER_TOKEN`` a token), and a detailed
    entry adds exactly its extra bytes to the text, so the newest entries are expanded one by
    one from the all-collapsed rendering: only those shown detailed are ever rendered so."""
    n = len(state.entries)
    collapsed = _render(state, n)
    if estimate_tokens(collapsed) > budget:
        text = _render(state, n, minimal=True)
        needed = estimate_tokens(text)
        if needed <= budget:
            return Ledger(text, needed, n, n)
        raise LedgerTooLarge(needed, budget=budget, tasks=n, minimum=prefix_tokens + 2 * needed)
    room = budget * BYTES_PER_TOKEN - len(collapsed.encode("utf-8", "surrogatepass"))
    keep = n  # entries [0, keep) stay one line
    for entry in reversed(state.entries):
        extra = len(entry.detailed.encode("utf-8", "surrogatepass")) - len(entry.line.encode())
        if extra > room:
            break
        room -= extra
        keep -= 1
    text = collapsed if keep == n else _render(state, keep)
    return Ledger(text, estimate_tokens(text), n, keep)


def _one_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters with "…".
    Only as much of a long text's head is flattened as it takes (a head's flattening is a
    prefix of the whole's): a thousand summaries cost little."""
    size = limit + 1
    while True:
        flat = " ".join(text[:size].split())
        if len(flat) > limit or size >= len(text):
            break
        size *= 2
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _shown_status(status: Status | str) -> str:
    return "running" if status in STILL_RUNNING else str(status)


def _entry(key: str, info: ThreadInfo | None, status: str, ref: str) -> _Entry:
    """A task's entry from its newest worker thread (``info``; None: only its dispatch row
    is known, ``status`` and ``ref`` are the row's)."""
    if info is None:
        return _Entry(key, _shown_status(status), "", ref)
    check = info.result.check if info.result is not None else None
    mark = "" if check is None else VERDICT_MARKS.get(check.verdict, "?")
    return _Entry(key, _shown_status(info.status), mark, info.ref, info)


def _details(key: str, line: str, info: ThreadInfo) -> str:
    """An entry's detailed form: its line with the title, then its result, error and origin."""
    result, details = info.result, []
    if result is not None:
        details.append(f"  {result.status}: {_one_line(result.summary, SUMMARY_CHARS)}")
        if result.branch:
            details.append(f"  branch: {result.branch}")
    elif info.status.terminal and info.status not in STILL_RUNNING:
        details.append("  no result was stored")
    if info.error:
        details.append(f"  error: {_one_line(info.error, ERROR_CHARS)}")
    if info.forked_from is not None:
        details.append(f"  fork of {format_ref(info.forked_from.thread_id, info.forked_from.at)}")
    if info.continues is not None:
        details.append(f"  continues {format_ref(info.continues)} (its earlier turns)")
    title = _one_line(info.title, TITLE_CHARS)
    head = line if title == key or not title else f"{line} {title}"
    return "\n".join([head, *details])


def _task_key(row: Dispatch, info: ThreadInfo | None) -> str:
    if row.task_key:
        return row.task_key
    task_id = (info.task or {}).get("id") if info is not None else None
    return str(task_id) if task_id else f"task-{row.task_index + 1}"


def _header(job: JobSpec, job_id: str) -> tuple[str, ...]:
    lines = [
        f"Job ledger: {job.name} ({format_ref(job_id)})",
        f"Goal: {job.goal}",
        f"Workspace: {job.workspace_path}",
    ]
    if job.isolation == "worktree":
        lines.append(
            "Isolation: each worker has its own git worktree and branch; merge combines them."
        )
    return tuple(lines)


def _lead_chain(by_id: dict[str, ThreadInfo], job_id: str) -> tuple[str, ...]:
    """The job's leads from the first along ``continued_by`` (each handed off to the next)."""
    chain: list[str] = []
    tid = job_id
    while tid in by_id and len(chain) <= len(by_id):
        chain.append(format_ref(tid))
        nxt = by_id[tid].continued_by
        if nxt is None:
            break
        tid = nxt
    return tuple(chain)


LAST_WORDS_LOOKBACK = 64
"""How far back a lead's last words are looked for, in messages: text older than that is not its
last words (a lead that only dispatched for a while has none), and a long transcript of dispatch
results is not read for them."""


async def _last_words(store: Store, lead: ThreadInfo) -> tuple[str, str] | None:
    """The lead's newest assistant message that has text, among its last
    ``LAST_WORDS_LOOKBACK``: (its ref, the text cut at ``LAST_WORDS_CHARS``), read backwards a
    few messages at a time."""
    end, window = lead.head_seq, 8
    floor = max(1, lead.head_seq - LAST_WORDS_LOOKBACK + 1)
    while end >= floor:
        start = max(floor, end - window + 1)
        for m in reversed(await store.messages(lead.id, start=start, end=end)):
            text = m.text.strip() if m.role == "assistant" else ""
            if text:
                ref = format_ref(lead.id, m.seq)
                if len(text) > LAST_WORDS_CHARS:
                    text = text[:LAST_WORDS_CHARS] + f"… (cut: read_thread {ref} for the rest)"
                return ref, text
        end, window = start - 1, window * 4
    return None


async def job_ledger(
    store: Store,
    job: JobSpec,
    job_id: str,
    *,
    budget: int,
    previous: ThreadInfo | None,
    prefix_tokens: int = 0,
) -> Ledger:
    """The ledger of job ``job_id`` within ``budget`` tokens (half the lead's
    ``lead_context_tokens``), ``previous`` the lead handing off (its last words are quoted).
    ``LedgerTooLarge`` when even every entry in one line does not fit; its ``minimum`` counts
    ``prefix_tokens`` (the successor's system prompt and tools) as ``minimum_lead_context``
    does."""
    # the rows first: a row and its worker are written together, so every row's worker is
    # among the threads read after it
    rows = await store.dispatches.of_job(job_id)
    threads = await store.list_threads(job_id=job_id, oldest_first=True, prompts=False)
    by_id = {t.id: t for t in threads}
    tasks = []
    for row in rows:
        info = by_id.get(row.worker_id)
        tasks.append(_entry(_task_key(row, info), info, row.status, format_ref(row.worker_id)))
    named = {row.worker_id for row in rows}
    others = [
        _entry(str((t.task or {}).get("id") or "-"), t, t.status, t.ref)
        for t in threads
        if t.kind == Kind.WORKER and t.id not in named and t.continued_by is None
    ]
    words = None
    if previous is not None:
        words = await _last_words(store, by_id.get(previous.id, previous))
    state = _State(
        head=_header(job, job_id),
        tasks=tuple(tasks),
        others=tuple(others),
        leads=_lead_chain(by_id, job_id),
        last_words=words,
    )
    return _fit(state, budget, prefix_tokens)


def _placeholder(job: JobSpec) -> _State:
    """The ledger of a job file's tasks before any ran, each line as long as it can get: a
    full-length ref, the longest status shown, a verdict mark; and a previous lead's ref."""
    status = max(sorted({_shown_status(s) for s in Status}), key=len)
    mark = max(sorted(VERDICT_MARKS.values()), key=lambda m: len(m.encode()))
    ref = format_ref("0" * _ID_CHARS)
    return _State(
        head=_header(job, "0" * _ID_CHARS),
        tasks=tuple(_Entry(t.id, status, mark, ref) for t in job.tasks),
        last_words=(format_ref("0" * _ID_CHARS, _PLACEHOLDER_SEQ), ""),
    )


def _minimal_placeholder_tokens(job: JobSpec) -> int:
    state = _placeholder(job)
    return estimate_tokens(_render(state, len(state.entries), minimal=True))


def minimum_lead_context(job: JobSpec, *, prefix_tokens: int) -> int:
    """The smallest ``lead_context_tokens`` the job can run with, known before anything is
    stored: the successor's prefix (``prefix_tokens``: system prompt and tools) and twice the
    minimal ledger of the job file's tasks (the ledger must fit in half the budget, and the
    successor's first request holds the prefix and the ledger)."""
    return prefix_tokens + 2 * _minimal_placeholder_tokens(job)


def check_lead_context(job: JobSpec, *, prefix_tokens: int | None = None) -> int:
    """``minimum_lead_context``, or ``LedgerTooLarge`` (exit 2) when the job's
    ``lead_ceiling`` is below it: the refusal before anything is stored. ``prefix_tokens``:
    the lead's system prompt and tools (default: those a new lead of ``job`` gets)."""
    if prefix_tokens is None:
        prefix_tokens = lead_prefix_tokens(tuple(lead_tool_names(job.isolation == "worktree")))
    needed = _minimal_placeholder_tokens(job)
    minimum = prefix_tokens + 2 * needed
    if job.lead_ceiling < minimum:
        budget = job.lead_ceiling // 2
        raise LedgerTooLarge(needed, budget=budget, tasks=len(job.tasks), minimum=minimum)
    return minimum


async def handoff_ledger(store: Store, job: JobSpec, job_id: str, lead: ThreadInfo) -> Ledger:
    """The ledger the lead ``lead`` of job ``job_id`` hands off with: within half its
    ``lead_context_tokens`` (SPEC), and never more than its system prompt and tools leave of
    them — the successor's first request holds both."""
    ceiling, prefix = job.lead_ceiling, lead_prefix_tokens(tuple(lead.tools))
    return await job_ledger(
        store,
        job,
        job_id,
        budget=min(ceiling // 2, ceiling - prefix),
        previous=lead,
        prefix_tokens=prefix,
    )
