"""One thread seen from the command line: its text view (``threadloom show``) and its Markdown
document (``threadloom export --format md``). Its JSON shapes are ``orchestrator.views``'.

Text view of the messages, by mode:

- ``brief`` (default): text whole; thinking as ``[thinking · N chars]``; a tool call as one line
  ``→ name(key=value, …)`` with values shortened; a tool result as one line
  ``← name · ok|error · N lines · M chars — first line``.
- ``tools``: as brief, plus the full value of every shortened tool input and each tool output,
  indented, capped at ``CAP_LINES`` lines / ``CAP_CHARS`` characters (head and tail kept) with a
  marker naming the omitted size and the ref ``T-…#n`` to read it whole.
- ``raw``: as tools, but nothing capped or indented: tool inputs and outputs verbatim, thinking
  whole. A tool output stored apart (too large to keep inline: ``store._outputs``) is printed
  whole from a ``WholeOutputs`` spooled before the store closed; without one, its preview.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, Literal

from ..humanize import age, count, timestamp
from ..views import cache_share, claim_lines, output_summary
from ._render import STATUS_STYLES, Printer, json_value, one_line, percent, plural, usd

if TYPE_CHECKING:
    from store import Message, Result, Store, ThreadInfo, Usage

Mode = Literal["brief", "tools", "raw"]

SPOOL_CHARS = 1 << 20


class WholeOutputs:
    """The whole text of every tool output stored apart in some messages, copied from the store
    into anonymous temporary files (bounded memory) while it is open, for printing afterwards
    (``show --raw``, ``export``). Keyed by the message's owner thread, seq and tool_use_id."""

    def __init__(self) -> None:
        self._files: dict[tuple[str, int, str], tuple[IO[str], int, int]] = {}

    @classmethod
    async def spool(cls, store: Store, msgs: Sequence[Any]) -> WholeOutputs:
        whole = cls()
        for m in msgs:
            for b in m.content:
                if b.type != "tool_result" or getattr(b, "stored", None) is None:
                    continue
                import tempfile  # here: the fast read path never spools, and pays nothing

                f = tempfile.TemporaryFile("w+", encoding="utf-8", newline="")  # noqa: SIM115
                newlines = longest = run = 0
                async for piece in store.output_pieces(m.thread_id, m.seq, b.tool_use_id):
                    f.write(piece)
                    newlines += piece.count("\n")
                    # the longest run of backticks, across pieces (Markdown fences it)
                    if "`" not in piece:
                        run = 0
                        continue
                    for chunk in re.findall(r"`+|[^`]+", piece):
                        run = run + len(chunk) if chunk[0] == "`" else 0
                        longest = max(longest, run)
                f.seek(0)
                whole._files[(m.thread_id, m.seq, b.tool_use_id)] = (f, newlines, longest)
        return whole

    def get(self, msg: Any, block: Any) -> tuple[IO[str], int, int] | None:
        """(file at its start, newlines, longest backtick run) of ``block``'s whole output."""
        found = self._files.get((msg.thread_id, msg.seq, block.tool_use_id))
        if found is not None:
            found[0].seek(0)
        return found

    def text(self, msg: Any, block: Any) -> str | None:
        """The whole output of ``block`` as one string (``show --json --raw``: the document
        holds it), or None when it is not here."""
        found = self.get(msg, block)
        return None if found is None else found[0].read()

    def pieces(self, msg: Any, block: Any) -> Iterator[str] | None:
        """The whole output of ``block`` without its trailing newlines, in pieces; None when it
        is not here (an inline output: use ``block.text``)."""
        found = self.get(msg, block)
        if found is None:
            return None
        return _without_trailing_newlines(found[0])

    def close(self) -> None:
        for f, _, _ in self._files.values():
            f.close()
        self._files.clear()


def _without_trailing_newlines(f: IO[str]) -> Iterator[str]:
    held = ""
    while piece := f.read(SPOOL_CHARS):
        body = piece.rstrip("\n")
        if not body:
            held += piece
            continue
        yield held + body
        held = piece[len(body) :]


CAP_LINES = 40
CAP_CHARS = 6000
ARG_WIDTH = 48
CALL_WIDTH = 160


# ----------------------------------------------------------------- text: header, result, usage


def render_header(
    p: Printer,
    info: ThreadInfo,
    *,
    shown: tuple[int, int] | None,
    usage: Usage,
    cost: float,
) -> None:
    p.parts(
        [
            (info.ref, "bold"),
            ("  ", None),
            (str(info.kind), None),
            ("  ", None),
            (str(info.status), STATUS_STYLES.get(str(info.status))),
        ]
    )
    rows: list[tuple[str, str]] = [("title", info.title or "—")]
    if info.job_id != info.id:
        rows.append(("job", f"T-{info.job_id}"))
    if info.parent_id:
        rows.append(("parent", f"T-{info.parent_id}"))
    if info.forked_from:
        rows.append(("fork of", f"{info.forked_from.ref}#{info.forked_from.at}"))
    handoffs = [f"continues T-{info.continues}"] if info.continues else []
    if info.continued_by:
        handoffs.append(f"continued by T-{info.continued_by}")
    if handoffs:  # the chain of a job larger than one context: a handoff on either side
        rows.append(("chain", " · ".join(handoffs)))
    if info.model:
        rows.append(("model", info.model))
    src = (info.task or {}).get("source")
    if isinstance(src, dict) and src.get("format"):
        where = f"{src['format']} {src.get('session_id', '')}  {src.get('path', '')}"
        rows.append(("source", where))
    rows.append(("created", f"{timestamp(info.created_at)} ({age(info.created_at)} ago)"))
    inherited = info.forked_from.at if info.forked_from else 0
    msgs = count(info.head_seq)
    if inherited:
        msgs += f" ({inherited} inherited)"
    if shown is not None:
        msgs += f", showing #{shown[0]}-{shown[1]}"
    rows.append(("messages", msgs))
    rows.append(("usage", usage_line(usage, cost)))
    if info.error:
        rows.append(("error", one_line(info.error, 300)))
    for key, value in rows:
        p.parts([(f"  {key:<10}", "dim"), (value, "red" if key == "error" else None)])


def usage_line(usage: Usage, cost: float) -> str:
    if usage.total_tokens == 0:
        return "none recorded"
    return (
        f"in {count(usage.input_tokens)} · out {count(usage.output_tokens)}"
        f" · cache read {count(usage.cache_read_input_tokens)}"
        f" · cache write {count(usage.cache_creation_input_tokens)}"
        f" · {percent(cache_share(usage))} of input cached · ~{usd(cost)}"
    )


def render_result(p: Printer, result: Result) -> None:
    style = {"done": "green", "partial": "yellow"}.get(result.status, "red")
    facts = [plural(result.turns, "turn")] if result.turns is not None else []
    if result.duration_s is not None:
        facts.append(f"{result.duration_s:.1f}s")
    if result.task:
        facts.append(f"task {result.task}")
    p.line()
    head: list[tuple[str, str | None]] = [("result  ", "bold"), (result.status, style)]
    if facts:
        head.append(("  " + " · ".join(facts), "dim"))
    p.parts(head)
    for line in result.summary.splitlines() or [""]:
        p.line(f"  {line}")
    if result.findings:
        p.line("  findings", "bold")
        for f in result.findings:
            p.line(f"    • {f.claim}")
            if f.evidence:
                p.line(f"      evidence: {', '.join(f.evidence)}", "dim")
    if result.dropped_evidence:
        p.line(
            f"    ({result.dropped_evidence} evidence refs did not resolve and were dropped)", "dim"
        )
    if result.changes:
        p.line("  changes", "bold")
        for c in result.changes:
            p.line(f"    {c.action:<9} {c.path}")
    if result.verification:
        p.line("  verification", "bold")
        for v in result.verification:
            p.line(f"    $ {v.command}  →  {one_line(v.outcome, 200)}")
    for title, items in (
        ("negative results", result.negative_results),
        ("open questions", result.open_questions),
    ):
        if items:
            p.line(f"  {title}", "bold")
            for item in items:
                p.line(f"    • {item}")
    if result.check is not None:
        render_check(p, result.check)
    if result.branch:
        p.line(f"  branch  {result.branch}")
    if result.diff_stat:
        p.line("  diff stat", "bold")
        for line in result.diff_stat.splitlines():
            p.line(f"    {line}")


def render_check(p: Printer, check: Any, indent: str = "  ") -> None:
    """The result check: its verdict, then each claim as ``✓ / ? / ✗ kind index: reason (ref)``."""
    style = {"verified": "green", "unverified": "yellow"}.get(check.verdict, "red")
    rounds = f"  after a correction round ({check.rounds} submissions)" if check.rounds > 1 else ""
    p.parts([(f"{indent}check  ", "bold"), (check.verdict, style), (rounds, "dim")])
    for line, c in zip(claim_lines(check), check.claims, strict=True):
        mark = {"verified": "green", "unverified": "yellow"}.get(c.verdict, "red")
        p.parts([(f"{indent}  {line[:1]}", mark), (line[1:], None)])


# ----------------------------------------------------------------- text: messages


def render_messages(
    p: Printer,
    info: ThreadInfo,
    msgs: Sequence[Message],
    mode: Mode,
    *,
    before: Message | None = None,
    whole: WholeOutputs | None = None,
) -> None:
    """The messages, each headed ``#seq role``; ``before`` (the message preceding a range) only
    names the tools whose results open the range; ``whole`` has the outputs stored apart, which
    ``raw`` prints whole."""
    names: dict[str, str] = {}
    if before is not None:
        names.update((b.id, b.name) for b in before.content if b.type == "tool_use")
    for m in msgs:
        ref = f"{info.ref}#{m.seq}"
        p.line()
        header: list[tuple[str, str | None]] = [
            (f"#{m.seq} {m.role}", "bold cyan" if m.role == "assistant" else "bold")
        ]
        if m.thread_id != info.id:
            header.append((f"  (from T-{m.thread_id})", "dim"))
        p.parts(header)
        for b in m.content:
            if b.type == "text":
                p.line(b.text)
            elif b.type == "thinking":
                if mode == "raw":
                    p.line("[thinking]", "dim")
                    p.line(b.thinking, "dim")
                else:
                    p.line(f"[thinking · {count(len(b.thinking))} chars]", "dim")
            elif b.type == "tool_use":
                names[b.id] = b.name
                _render_call(p, b.name, b.input, mode, ref)
            elif b.type == "tool_result":
                found = whole.get(m, b) if whole is not None and mode == "raw" else None
                name = names.get(b.tool_use_id, b.tool_use_id)
                if found is not None and whole is not None:
                    _render_whole_output(p, name, b, found[1], whole.pieces(m, b) or iter(()))
                else:
                    _render_output(p, name, b, mode, ref)


def call_line(name: str, args: dict[str, Any]) -> tuple[str, list[str]]:
    """``name(key=value, …)`` with values shortened, and the keys whose value was shortened."""
    parts, cut = [], []
    for key, value in args.items():
        full = json.dumps(value, ensure_ascii=False)
        short = json_value(value, ARG_WIDTH)
        if short != full:
            cut.append(key)
        parts.append(f"{key}={short}")
    line = f"{name}({', '.join(parts)})"
    if len(line) > CALL_WIDTH:
        line = line[: CALL_WIDTH - 2] + "…)"
        cut = list(args)
    return line, cut


def _render_call(p: Printer, name: str, args: dict[str, Any], mode: Mode, ref: str) -> None:
    line, cut = call_line(name, args)
    p.parts([("→ ", "magenta"), (line, None)])
    if mode == "brief":
        return
    for key in cut:
        value = args[key]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
        p.line(f"  {key} =", "dim")
        _body(p, text, mode, ref, "input")


def _state(b: Any) -> tuple[tuple[str, str], str]:
    """The result's state as shown (``ok``, ``error``, ``exit 1``: a failed command is not
    "ok"), styled, and the line that tells (``views.output_summary``)."""
    state, line = output_summary(b.text, is_error=b.is_error)
    return (state, "green" if state == "ok" else "red"), line


def _render_output(p: Printer, name: str, b: Any, mode: Mode, ref: str) -> None:
    text: str = b.text
    state, telling = _state(b)
    size = f" · {plural(len(_lines(text)), 'line')} · {plural(len(text), 'char')}"
    stored = getattr(b, "stored", None)
    if stored is not None:  # the text is a preview: give the whole output's size
        size = f" · {plural(stored.chars, 'char')}, stored apart"
    parts: list[tuple[str, str | None]] = [
        ("← ", "magenta"),
        (f"{name} · ", None),
        state,
        (size, "dim"),
    ]
    if mode == "brief":
        head = one_line(telling, 100)
        if head:
            parts.append((f" — {head}", None))
        p.parts(parts)
        return
    p.parts(parts)
    if text:
        _body(p, text, mode, ref, "output")


def _render_whole_output(
    p: Printer, name: str, b: Any, newlines: int, pieces: Iterator[str]
) -> None:
    """``raw`` of an output stored apart: its header line, then the whole text, streamed."""
    stored = b.stored
    lines = newlines + (0 if b.text.endswith("\n") else 1)
    state = _state(b)[0]
    size = f" · {plural(lines, 'line')} · {plural(stored.chars, 'char')}"
    p.parts([("← ", "magenta"), (f"{name} · ", None), state, (size, "dim")])
    for piece in pieces:
        p.write(piece)
    p.write("\n")


def _body(p: Printer, text: str, mode: Mode, ref: str, what: str) -> None:
    if mode == "raw":
        p.line(text.rstrip("\n"))
        return
    head, marker, tail = cap_text(text, ref=ref, what=what)
    for line in _lines(head):
        p.line(f"    {line}")
    if marker:
        p.line(f"    {marker}", "yellow")
        for line in _lines(tail):
            p.line(f"    {line}")


def _lines(text: str) -> list[str]:
    """The lines of ``text`` split at newlines only (CRLF counts as one): a lone CR, which on a
    terminal would overwrite the line, stays in its line, to be shown as ``^M``."""
    lines = text.replace("\r\n", "\n").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def cap_text(
    text: str,
    *,
    ref: str,
    what: str = "output",
    max_lines: int = CAP_LINES,
    max_chars: int = CAP_CHARS,
) -> tuple[str, str | None, str]:
    """(head, marker, tail): ``text`` within ``max_lines`` lines and ``max_chars`` characters,
    head and tail kept, the marker replacing the middle — or (text, None, "") when it fits."""
    lines = text.splitlines()
    if len(lines) <= max_lines and len(text) <= max_chars:
        return text, None, ""
    half_chars = max_chars // 2
    if len(lines) > max_lines:
        half = max_lines // 2
        head = "\n".join(lines[:half])[:half_chars]
        tail = "\n".join(lines[-half:])[-half_chars:]
    else:
        head, tail = text[:half_chars], text[-half_chars:]
    omitted_chars = max(len(text) - len(head) - len(tail), 0)
    omitted_lines = max(len(lines) - len(head.splitlines()) - len(tail.splitlines()), 0)
    marker = (
        f"[… {count(omitted_lines)} lines, {count(omitted_chars)} chars omitted;"
        f" the whole {what}: threadloom show {ref} --raw]"
    )
    return head, marker, tail


# ----------------------------------------------------------------- Markdown


def markdown(info: ThreadInfo, msgs: Sequence[Message], *, usage: Usage, cost: float) -> str:
    """A readable Markdown document of the thread: title, metadata, result, every message with
    tool calls and outputs in fenced blocks (whole: nothing is capped)."""
    out: list[str] = []
    write_markdown(out.append, info, msgs, usage=usage, cost=cost)
    return "".join(out)


def write_markdown(
    write: Any,
    info: ThreadInfo,
    msgs: Sequence[Message],
    *,
    usage: Usage,
    cost: float,
    whole: WholeOutputs | None = None,
) -> None:
    """``markdown`` written piece by piece through ``write``; the outputs stored apart that
    ``whole`` holds are streamed whole from it (bounded memory), the others are their preview."""
    from store import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

    out: list[Any] = [f"# {info.title or info.ref}", ""]
    meta = [
        ("ref", f"`{info.ref}`"),
        ("kind", str(info.kind)),
        ("status", str(info.status)),
    ]
    if info.job_id != info.id:
        meta.append(("job", f"`T-{info.job_id}`"))
    if info.parent_id:
        meta.append(("parent", f"`T-{info.parent_id}`"))
    if info.forked_from:
        meta.append(("fork of", f"`{info.forked_from.ref}#{info.forked_from.at}`"))
    if info.model:
        meta.append(("model", f"`{info.model}`"))
    meta.append(("created", timestamp(info.created_at)))
    meta.append(("messages", str(info.head_seq)))
    meta.append(("usage", usage_line(usage, cost)))
    if info.error:
        meta.append(("error", one_line(info.error, 500)))
    out += [f"- **{k}**: {v}" for k, v in meta]
    if info.result is not None:
        out += ["", "## Result", "", *_markdown_result(info.result)]
        while out[-1] == "":
            out.pop()
    out += ["", "## Messages", ""]
    names: dict[str, str] = {}
    for m in msgs:
        origin = f" · from `T-{m.thread_id}`" if m.thread_id != info.id else ""
        out += [f"### #{m.seq} · {m.role}{origin}", ""]
        for b in m.content:
            if isinstance(b, TextBlock):
                out += [b.text, ""]
            elif isinstance(b, ThinkingBlock):
                out += [
                    "<details><summary>thinking</summary>",
                    "",
                    b.thinking,
                    "",
                    "</details>",
                    "",
                ]
            elif isinstance(b, ToolUseBlock):
                names[b.id] = b.name
                body = json.dumps(b.input, ensure_ascii=False, indent=2)
                out += [f"**→ `{b.name}`** (`{b.id}`)", "", *_fenced(body, "json"), ""]
            elif isinstance(b, ToolResultBlock):
                state = "error" if b.is_error else "ok"
                name = names.get(b.tool_use_id, b.tool_use_id)
                found = whole.get(m, b) if whole is not None else None
                if found is not None and whole is not None:
                    fence = "`" * max(3, found[2] + 1)
                    fenced: list[Any] = [f"{fence}text", (whole, m, b), fence]
                else:
                    fenced = _fenced(b.text, "text")
                out += [f"**← `{name}`** {state}", "", *fenced, ""]
    while out and out[-1] == "":
        out.pop()
    if out and isinstance(out[-1], str):
        out[-1] = out[-1].rstrip("\n")
    for i, item in enumerate(out):
        if i:
            write("\n")
        if isinstance(item, str):
            write(item)
        else:
            source, m, b = item
            for piece in source.pieces(m, b) or iter(()):
                write(piece)
    write("\n")


def _markdown_result(r: Result) -> list[str]:
    out = [f"**{r.status}**", "", r.summary, ""]
    if r.findings:
        out += ["**Findings**", ""]
        for f in r.findings:
            ev = f" — {', '.join(f'`{e}`' for e in f.evidence)}" if f.evidence else ""
            out.append(f"- {f.claim}{ev}")
        out.append("")
    if r.changes:
        out += ["**Changes**", "", *(f"- {c.action} `{c.path}`" for c in r.changes), ""]
    if r.verification:
        out += ["**Verification**", ""]
        out += [f"- `{v.command}` → {one_line(v.outcome, 300)}" for v in r.verification]
        out.append("")
    for title, items in (
        ("Negative results", r.negative_results),
        ("Open questions", r.open_questions),
    ):
        if items:
            out += [f"**{title}**", "", *(f"- {i}" for i in items), ""]
    if r.branch:
        out += [f"**Branch**: `{r.branch}`", ""]
    if r.diff_stat:
        out += ["**Diff stat**", "", *_fenced(r.diff_stat, "text"), ""]
    return out


def _fenced(text: str, lang: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text.rstrip("\n"), fence]
