"""Claude Code sessions: ``~/.claude/projects/<project>/<session>.jsonl``, each subagent in
``<session>/subagents/agent-<id>.jsonl`` (with ``agent-<id>.meta.json``, whose ``toolUseId``
names the ``tool_use`` that spawned it), large tool outputs in ``<session>/tool-results/``.

The format is Claude Code's own and changes between versions; what is read here, defensively:

- every line is a JSON object; ``user``/``assistant``/``system`` lines carry ``uuid`` and
  ``parentUuid``, and the conversation is that chain, not the file order: an edit or a rewind
  leaves a second child under a message. The branch of the newest leaf is the main line; each
  other leaf's branch becomes a fork (the writer finds the shared history);
- an assistant turn is written as several lines sharing ``message.id`` (thinking, text, each
  ``tool_use``), each tool result as a user line of its own: ``Builder`` folds them back;
- ``system``/``compact_boundary`` starts a new chain (``parentUuid`` null) whose
  ``logicalParentUuid`` is the last message before it: it is followed through, so the history
  before a compaction is imported whole, and the ``isCompactSummary`` user line after it is
  kept as a marked message (``COMPACTION_MARK``);
- a tool result replaced by ``<persisted-output>`` (its whole text saved under
  ``<session>/tool-results/``) is read back whole from that file, when it is there;
- titles: a ``custom-title`` line, else a ``summary`` whose ``leafUuid`` is in the file, else
  the first words of the first prompt.

Lines of other types (``file-history-snapshot``, ``queue-operation``, …) and the fields nothing
here models (``toolUseResult``, ``cwd``, …) are counted in the thread's ``source.unmodeled``;
a line that is not JSON is skipped and counted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store import Kind, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock, Usage

from ._draft import (
    COMPACTION_MARK,
    Block,
    Branch,
    Builder,
    Session,
    request_title,
    usage_record,
)
from ._lines import (
    MAX_OUTPUT,
    JsonLines,
    confine,
    iso_ms,
    placeholder,
    raw_lines,
    read_json,
    read_lines,
    read_text,
)

FORMAT = "claude-code"
_PERSISTED = re.compile(r"<persisted-output>.*?saved to:?\s*(\S+)", re.S)
_MESSAGE_TYPES = ("user", "assistant", "system")


def looks_like(obj: dict[str, Any]) -> bool:
    """A Claude Code line (for ``auto``)."""
    return (
        ("sessionId" in obj or "parentUuid" in obj or "leafUuid" in obj)
        and isinstance(obj.get("type"), str)
        and "payload" not in obj
    )


def parse_file(path: Path, lines: Iterable[str] | None = None) -> list[Session]:
    """The sessions of one file: its own, then each of its subagents' (``<stem>/subagents``).
    A subagent file given alone is parsed as a subagent of its session."""
    if path.parent.name == "subagents":
        return [_subagent(path, session_dir=path.parent.parent)]
    data = read_lines(path) if lines is None else JsonLines.of(lines)
    if path.name.startswith("agent-"):  # older versions: agent-<id>.jsonl beside the sessions
        owner = next(
            (o["sessionId"] for o in data.objects if isinstance(o.get("sessionId"), str)), None
        )
        if owner is not None:
            return [_subagent(path, session_dir=path.parent / owner, data=data)]
    main = _session(data, path=path, kind=Kind.LEAD, session_dir=path.with_suffix(""))
    out = [main]
    sub_dir = path.with_suffix("") / "subagents"
    if lines is None and confine().is_dir(sub_dir):
        titles, agents = _task_titles(main), _task_agents(data)
        for f in confine().files(sub_dir, ".jsonl"):
            out.append(_subagent(f, session_dir=path.with_suffix(""), titles=titles, agents=agents))
    return out


def _subagent(
    path: Path,
    *,
    session_dir: Path,
    titles: dict[str, str] | None = None,
    agents: dict[str, str] | None = None,
    data: JsonLines | None = None,
) -> Session:
    """A subagent's session; ``titles``: Task call id → its description, ``agents``: agent
    id → the Task call that ran it (``_task_agents``), for a subagent without a meta file."""
    loaded = read_json(path.with_name(path.stem + ".meta.json"))
    meta: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
    agent = path.stem.removeprefix("agent-")
    data = read_lines(path) if data is None else data
    parent = session_dir.name
    sess = _session(
        data,
        path=path,
        kind=Kind.WORKER,
        session_dir=session_dir,
        key=f"{FORMAT}:{parent}/{agent}",
        session_id=f"{parent}/{agent}",
    )
    sess.parent_key = f"{FORMAT}:{parent}"
    tool_use = meta.get("toolUseId") or (agents or {}).get(agent)
    if isinstance(tool_use, str):
        sess.source["tool_use_id"] = tool_use
        if titles and tool_use in titles:
            sess.title = titles[tool_use]
    for k in ("agentType", "description"):
        if isinstance(meta.get(k), str):
            sess.source[k] = meta[k]
    if isinstance(meta.get("description"), str) and meta["description"]:
        sess.title = meta["description"]
    return sess


def _task_titles(main: Session) -> dict[str, str]:
    """tool_use id → its ``description`` input, over the main line (a subagent's title)."""
    out: dict[str, str] = {}
    for m in main.branches[0].messages if main.branches else ():
        for b in m.tool_uses():
            desc = b.input.get("description")
            if isinstance(desc, str) and desc:
                out[b.id] = desc
    return out


def _task_agents(data: JsonLines) -> dict[str, str]:
    """agent id → the id of the Task call that ran it, from the main file's Task results
    (their ``toolUseResult.agentId``): which call spawned each subagent, where no
    ``agent-<id>.meta.json`` says so."""
    out: dict[str, str] = {}
    for obj in data.objects:
        result, message = obj.get("toolUseResult"), obj.get("message")
        if not isinstance(result, dict) or not isinstance(message, dict):
            continue
        agent, content = result.get("agentId"), message.get("content")
        if not isinstance(agent, str) or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("tool_use_id"), str):
                out.setdefault(agent, block["tool_use_id"])
    return out


@dataclass
class _Node:
    index: int
    entry: dict[str, Any]
    parent: str | None


def _session(
    data: JsonLines,
    *,
    path: Path,
    kind: Kind,
    session_dir: Path,
    key: str | None = None,
    session_id: str | None = None,
) -> Session:
    nodes: dict[str, _Node] = {}
    unmodeled: Counter[str] = Counter()
    titles: dict[str, str] = {}
    summaries: list[tuple[str, str]] = []
    lines_sid: str | None = None
    model: str | None = None
    created: int | None = None
    for i, e in enumerate(data.objects):
        kind_of = e.get("type")
        if lines_sid is None and isinstance(e.get("sessionId"), str):
            lines_sid = e["sessionId"]
        if created is None:
            created = iso_ms(e.get("timestamp"))
        if kind_of == "custom-title" and isinstance(e.get("customTitle"), str):
            titles["custom"] = e["customTitle"]
            continue
        if kind_of == "summary" and isinstance(e.get("summary"), str):
            summaries.append((str(e.get("leafUuid")), e["summary"]))
            continue
        uid = e.get("uuid")
        if kind_of not in _MESSAGE_TYPES:
            unmodeled[f"line:{kind_of}"] += 1
        if not isinstance(uid, str):
            continue  # a line of any type with a uuid is a link of the chain, kept as one
        if uid in nodes:
            unmodeled["duplicate uuid"] += 1
            continue
        parent = e.get("parentUuid")
        if parent is None and e.get("subtype") == "compact_boundary":  # goes on from there
            parent = e.get("logicalParentUuid")
        nodes[uid] = _Node(i, e, parent if isinstance(parent, str) else None)
        if "toolUseResult" in e:
            unmodeled["toolUseResult"] += 1
        msg = e.get("message")
        named = msg.get("model") if kind_of == "assistant" and isinstance(msg, dict) else None
        if isinstance(named, str) and named != "<synthetic>":
            model = named
    for leaf, text in summaries:
        if leaf in nodes:
            titles.setdefault("summary", text)
    chain = _Chain(nodes, _Converter(session_dir, unmodeled))
    branches = chain.branches()
    # Claude Code names a session's file by its id; lines read from elsewhere carry it
    sid = session_id or (path.stem if path.suffix == ".jsonl" else lines_sid) or path.stem
    first = chain.conv.first_request
    title = titles.get("custom") or titles.get("summary") or first or f"claude-code {sid}"
    source: dict[str, Any] = {"format": FORMAT, "session_id": sid, "path": str(path)}
    if unmodeled:
        source["unmodeled"] = dict(sorted(unmodeled.items()))
    copied = lines_sid if session_id is None and lines_sid and lines_sid != sid else None
    return Session(
        key=key or f"{FORMAT}:{sid}",
        kind=kind,
        title=title,
        source=source,
        branches=branches,
        # a resumed session's file starts with lines copied from the one it continues
        fork_parent_key=f"{FORMAT}:{copied}" if copied else None,
        created_ms=created,
        model=f"anthropic:{model}" if model else None,  # a threadloom model spec: resumable
        skipped=data.skipped,
        stat=data.stat,
        chain=chain,
    )


def link(sessions: list[Session]) -> bool:
    """Follow conversations across files: a session whose chain goes on from a message of
    another file (a compaction continuing in a new file: its boundary's ``logicalParentUuid``
    is there) gets that file's history up to that message in front of each of its branches, and
    becomes a fork of that session's thread at it (the writer finds the shared history).
    True when some session goes on from a message of no file given."""
    owner: dict[str, Session] = {}
    missing = False
    for s in sessions:
        if isinstance(s.chain, _Chain) and s.kind == Kind.LEAD:
            for uid in s.chain.nodes:
                owner.setdefault(uid, s)
    for s in sessions:
        chain = s.chain
        if not isinstance(chain, _Chain) or chain.dangling is None:
            continue
        other = owner.get(chain.dangling)
        if other is None or other is s or not isinstance(other.chain, _Chain):
            missing = True
            continue
        s.fork_parent_key = other.key
        chain.conv.more_dirs.append(other.chain.conv.session_dir)
        s.branches = chain.branches(other.chain.path(chain.dangling))
        chain.dangling = None  # linked: a second pass leaves it be
    return missing


def dangling(sessions: list[Session]) -> set[str]:
    """The uuids of other files' messages these sessions go on from, not linked yet."""
    return {
        s.chain.dangling
        for s in sessions
        if isinstance(s.chain, _Chain) and s.chain.dangling is not None
    }


def owners(uuids: set[str], files: Iterable[Path]) -> dict[str, Path]:
    """uuid → the session file among ``files`` holding the message of that uuid (only lines
    naming one are parsed)."""
    wanted = {u.encode() for u in uuids}
    out: dict[str, Path] = {}
    for f in files:
        for line in raw_lines(f):
            if any(u in line for u in wanted):
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                uid = obj.get("uuid") if isinstance(obj, dict) else None
                if isinstance(uid, str) and uid in uuids:
                    out.setdefault(uid, f)
        if len(out) == len(uuids):
            break
    return out


class _Chain:
    """A file's messages as a forest of ``parentUuid`` links (``links``: uuid → parent uuid).

    A parent outside the file is either where the file's first message goes on from (another
    file's message: ``dangling``, for ``link``) or, further down, a line that could not be read:
    then the message hangs on the one before it in the file, so one lost line does not cut the
    conversation in two."""

    def __init__(self, nodes: dict[str, _Node], conv: _Converter) -> None:
        self.nodes = nodes
        self.conv = conv
        self.dangling: str | None = None
        self.root: str | None = None
        self.links: dict[str, str | None] = {}
        prev: str | None = None
        for uid, n in sorted(nodes.items(), key=lambda kv: kv[1].index):
            if n.parent is None or n.parent in nodes:
                self.links[uid] = n.parent
            elif prev is None:
                self.links[uid] = None
                self.dangling = n.parent
                self.root = uid
            else:
                self.links[uid] = prev
                conv.unmodeled["parent line missing"] += 1
            prev = uid

    def path(self, leaf: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        cur: str | None = leaf
        while cur is not None and cur in self.nodes and cur not in seen:
            seen.add(cur)
            out.append(self.nodes[cur].entry)
            cur = self.links[cur]
        out.reverse()
        return out

    def branches(self, prefix: list[dict[str, Any]] | None = None) -> list[Branch]:
        out: list[Branch] = []
        for n, leaf in enumerate(self._leaves()):
            entries = self.path(leaf)
            if prefix and entries and entries[0].get("uuid") == self.root:
                entries = prefix + entries
            branch = self.conv.branch(entries, label="" if n == 0 else "rewound branch")
            if branch.messages:
                out.append(branch)
        return out

    def _leaves(self) -> list[str]:
        """Leaves of the forest, the main one first — the newest in the file that is a message
        of the conversation (not a sidechain's, not a progress or system line hanging off an
        earlier message) — then the others, newest first."""
        has_child = set(self.links.values())
        leaves = [u for u in self.nodes if u not in has_child]

        def rank(u: str) -> tuple[bool, int]:
            e = self.nodes[u].entry
            talk = e.get("type") in ("user", "assistant") and not e.get("isSidechain")
            return (talk, self.nodes[u].index)

        leaves.sort(key=rank, reverse=True)
        return leaves


class _Converter:
    def __init__(self, session_dir: Path, unmodeled: Counter[str]) -> None:
        self.session_dir = session_dir
        self.more_dirs: list[Path] = []  # sessions whose history this one goes on from
        self.unmodeled = unmodeled
        self._outputs: dict[str, str | None] = {}
        self.first_request = ""
        """The title ``request_title`` gives the first branch converted (the main line)."""

    def branch(self, entries: list[dict[str, Any]], *, label: str) -> Branch:
        b = Builder()
        for e in entries:
            msg = e.get("message")
            if not isinstance(msg, dict):
                continue
            b.at = iso_ms(e.get("timestamp"))
            if e.get("type") == "user":
                blocks = self.blocks(msg.get("content"))
                if e.get("isCompactSummary") and blocks:
                    text = "\n".join(x.text for x in blocks if isinstance(x, TextBlock))
                    b.user([TextBlock(text=f"{COMPACTION_MARK}\n{text}")], turn=False, alone=True)
                    continue
                # a meta line (a command's expanded prompt, the local-command caveat) is the
                # CLI's, not a person's turn
                b.user(blocks, turn=False if e.get("isMeta") else None)
            elif e.get("type") == "assistant":
                mid = msg.get("id") if isinstance(msg.get("id"), str) else None
                b.assistant(self.blocks(msg.get("content")), msg_id=mid, usage=_usage(msg))
        if not label:
            self.first_request = request_title(b.requests())
        return b.branch(label)

    def blocks(self, content: Any) -> list[Block]:
        if isinstance(content, str):
            return [TextBlock(text=content)] if content else []
        if not isinstance(content, list):
            return []
        out: list[Block] = []
        for c in content:
            block = self.block(c)
            if block is not None:
                out.append(block)
        return out

    def block(self, c: Any) -> Block | None:
        if not isinstance(c, dict):
            return TextBlock(text=str(c)) if c else None
        t = c.get("type")
        if t == "text" and isinstance(c.get("text"), str):
            return TextBlock(text=c["text"]) if c["text"] else None
        if t == "thinking" and isinstance(c.get("thinking"), str):
            sig = c.get("signature") if isinstance(c.get("signature"), str) else None
            if not c["thinking"] and not sig:
                return None
            return ThinkingBlock(thinking=c["thinking"], signature=sig or None)
        if t == "tool_use" and isinstance(c.get("id"), str) and c["id"]:
            raw = c.get("input")
            name = c.get("name") if isinstance(c.get("name"), str) and c["name"] else "tool"
            return ToolUseBlock(
                id=c["id"], name=name, input=raw if isinstance(raw, dict) else {"input": raw}
            )
        if t == "tool_result" and isinstance(c.get("tool_use_id"), str) and c["tool_use_id"]:
            text = self.result_text(c["tool_use_id"], c.get("content"))
            return ToolResultBlock(
                tool_use_id=c["tool_use_id"], content=text, is_error=bool(c.get("is_error"))
            )
        self.unmodeled[f"block:{t}"] += 1
        return placeholder(c)

    def result_text(self, tool_use_id: str, content: Any) -> str:
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for c in content:
                if isinstance(c, dict) and c.get("type") == "text":
                    parts.append(str(c.get("text", "")))
                else:
                    self.unmodeled[
                        "result block:" + str(c.get("type") if isinstance(c, dict) else "?")
                    ] += 1
                    parts.append(placeholder(c).text)
            text = "\n".join(parts)
        elif content is None:
            text = ""
        else:
            text = json.dumps(content, ensure_ascii=False)
        if "<persisted-output>" in text:
            whole = self.persisted(tool_use_id, text)
            if whole is not None:
                return whole
        return text

    def persisted(self, tool_use_id: str, text: str) -> str | None:
        """The whole output saved under ``<session>/tool-results/`` (only a file of that
        directory is ever read, whatever path the marker names, and only below the directory
        imported: ``_lines.Confine``)."""
        if tool_use_id in self._outputs:
            return self._outputs[tool_use_id]
        names = []
        m = _PERSISTED.search(text)
        if m:
            names.append(Path(m.group(1).rstrip(".)")).name)
        names += [f"{tool_use_id}.txt", f"{tool_use_id}.json"]
        found: str | None = None
        for folder in [d / "tool-results" for d in (self.session_dir, *self.more_dirs)]:
            if found is not None or not confine().is_dir(folder):
                continue
            for name in names:
                if found is None and name and confine().regular(folder / name) is not None:
                    found = read_text(folder / name, MAX_OUTPUT)
        if found is None:
            self.unmodeled["persisted output missing"] += 1
        self._outputs[tool_use_id] = found
        return found


def _usage(msg: dict[str, Any]) -> Any:
    u = msg.get("usage")
    if not isinstance(u, dict):
        return None

    def n(k: str) -> int:
        v = u.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

    usage = Usage(
        input_tokens=n("input_tokens"),
        output_tokens=n("output_tokens"),
        cache_read_input_tokens=n("cache_read_input_tokens"),
        cache_creation_input_tokens=n("cache_creation_input_tokens"),
    )
    if not usage.total_tokens:
        return None
    model = msg.get("model") if isinstance(msg.get("model"), str) else None
    return usage_record(model, usage)
