"""Job files (TOML, SPEC §Job file) into a validated ``JobSpec``.

Every problem is one ``JobFileError`` line naming the file, the line (where the file has one) and
the key: ``job.toml:14: task[2].prompt: missing required key``. Nothing is stored before a job
file has validated.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic_core import PydanticCustomError

from workers import context_window
from workers.tools import DEFAULT_WORKER_TOOLS, TOOL_REGISTRY, ToolInput

from .errors import DispatchError, JobFileError, UsageError
from .tomllines import TomlLines

DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"
DEFAULT_LEAD_CONTEXT_TOKENS = 100_000
"""The lead's ceiling when its model's context window is unknown (SPEC)."""

TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A task id: a letter or digit, then letters, digits, ``.``, ``_``, ``-`` (it names a branch,
``threadloom/<job id>/<task id>``, and a scripted model's ``{{ref:ID}}``)."""
MAX_TASK_ID_CHARS = 100
MAX_TITLE_CHARS = 200
"""The longest job name or task title a job file or a front door accepts: each is one line in
every listing (a thread's title), and one 100,000-character title made them unreadable."""
TITLE_HELP = f"One line, at most {MAX_TITLE_CHARS} characters"

_INPUT = "threadloom_input"
"""The validation context's key that marks a spec a person gave (``JobSpec.from_input``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def check_tools(tools: list[str]) -> list[str]:
    """``tools`` if each is a worker tool, else the error naming the first that is not."""
    unknown = [t for t in tools if t not in TOOL_REGISTRY]
    if unknown:
        raise ValueError(
            f"unknown tool {unknown[0]!r}; the worker tools are {', '.join(sorted(TOOL_REGISTRY))}"
        )
    return tools


TOOLS_HELP = f"worker tools, each one of {', '.join(sorted(TOOL_REGISTRY))}"


class WorkerDefaults(_Strict):
    """The workers' limits and tools (a job file's [job.worker] table)."""

    max_turns: int = Field(40, ge=1, le=10_000, description="Model turns a worker may take")
    timeout_s: float = Field(900.0, gt=0, description="Seconds a worker may run in all")
    tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_WORKER_TOOLS),
        description=f"The workers' {TOOLS_HELP}; default: {', '.join(DEFAULT_WORKER_TOOLS)}",
    )
    # the workers' bash sandbox; None: the job's ``sandbox``
    sandbox: Literal["auto", "required", "none"] | None = Field(
        None, description="The workers' bash sandbox; default: the job's sandbox"
    )
    # the workers' (and readers') model-call knobs; None: the job's value
    max_output_tokens: int | None = Field(
        None, ge=1, description="Output tokens of one worker reply; default: the job's"
    )
    request_timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds one worker model request may take; default: the job's",
    )
    tool_calls: Literal["native", "constrained", "auto"] | None = Field(
        None, description="How workers' tool calls are asked of openai: models; default: the job's"
    )
    # a worker whose next request would exceed this hands off to a successor worker thread of
    # the same task (SPEC "Jobs larger than one context"); None: its model's context window
    # when known, else only when the provider reports an overflow
    context_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens a worker request may hold before the worker hands off; default: its"
        " model's context window when known",
    )

    _tools = field_validator("tools")(check_tools)

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _int_ok(cls, v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character ``str.splitlines`` ends a line at. A title or job name is one line of the
lead's prompt (``Job: …``, ``Task ID: TITLE``) and of every listing: one holding a line break
would add lines of its own to the prompt, where they read as the orchestrator's."""


def check_title(value: str) -> str:
    """``value`` if it is a title — one line (no ``LINE_BREAKS``), at most ``MAX_TITLE_CHARS``
    — else the validation error saying why: the rule every door applies (job files,
    ``run_job``, the lead's and MCP's ``dispatch``)."""
    at = next((i for i, ch in enumerate(value) if ch in LINE_BREAKS), None)
    if at is not None:
        raise PydanticCustomError(
            "title_not_one_line",
            f"a title is one line: it holds a line break ({value[at]!r} at character {at + 1});"
            " the details go in the goal or the prompt",
        )
    if len(value) > MAX_TITLE_CHARS:
        raise PydanticCustomError(
            "title_too_long",
            f"at most {MAX_TITLE_CHARS} characters (got {len(value):,}): a title is one line;"
            " the details go in the goal or the prompt",
        )
    return value


def _title_rules(value: str, info: ValidationInfo) -> str:
    """``check_title``, for input only (``JobSpec.from_input``): a spec read back from the
    store, or built around an imported thread's title, loads whatever it holds."""
    if isinstance(info.context, dict) and info.context.get(_INPUT):
        return check_title(value)
    return value


TaskId = Annotated[str, Field(min_length=1, max_length=MAX_TASK_ID_CHARS, pattern=TASK_ID_PATTERN)]


class TaskInput(ToolInput):
    """A task for one fresh-context worker: the only thing it is told."""

    # every door's task (the lead's and MCP's ``dispatch``, ``run_job``, a job file's)
    id: TaskId | None = Field(
        None,
        description="A short id unique within the job, e.g. 'tokenizer': a letter or digit,"
        " then letters, digits, '.', '_' or '-'; default: task-N",
    )
    title: str = Field(
        min_length=1, max_length=MAX_TITLE_CHARS, description=f"What the task is. {TITLE_HELP}"
    )
    prompt: str = Field(
        description="Everything the worker needs: it starts from a fresh context and sees only"
        " this (name files, failing tests, constraints, what to report)"
    )
    tools: list[str] | None = Field(None, description=f"The {TOOLS_HELP}; default: the job's")
    model: str | None = Field(
        None, description="This worker's model spec; default: the job's worker model"
    )

    _title = field_validator("title")(check_title)

    @field_validator("tools")
    @classmethod
    def _tools_known(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else check_tools(v)


class TaskSpec(TaskInput):
    """A job's task (``[[task]]``): a ``TaskInput``, strictly typed, with an id and a prompt,
    its title checked on input only (``from_input``: one stored before the cap still loads)."""

    model_config = ConfigDict(strict=True)

    id: TaskId
    title: str = Field(min_length=1, description=f"The worker thread's title. {TITLE_HELP}")
    prompt: str = Field(min_length=1)

    _title = field_validator("title")(_title_rules)  # type: ignore[assignment]


def check_tasks(tasks: Sequence[TaskInput]) -> None:
    """The rule of one dispatch that no single task can check: ids unique in it
    (``threads.spawn_request`` checks them against the job's earlier dispatches)."""
    again = _duplicate(tasks)
    if again is not None:
        raise DispatchError(f"duplicate task id {tasks[again[1]].id!r}")


def _duplicate(tasks: Sequence[TaskInput]) -> tuple[int, int] | None:
    """The first task whose id an earlier task has: (the earlier's index, its index)."""
    seen: dict[str, int] = {}
    for i, t in enumerate(tasks):
        if t.id in seen:
            return seen[t.id], i
        if t.id:
            seen[t.id] = i
    return None


class JobSpec(_Strict):
    """A job: a job file's ``[job]`` and ``[[task]]`` tables, or the same as arguments
    (``run_job``). Validate what a person gave with ``from_input``."""

    name: str = Field(min_length=1, description=f"The job's name: its lead's title. {TITLE_HELP}")
    goal: str = Field(min_length=1)
    workspace: str = "."
    model: str = DEFAULT_MODEL
    worker_model: str | None = None
    max_parallel: int = Field(4, ge=1, le=256)
    isolation: Literal["none", "worktree"] = "none"
    budget_tokens: int = Field(0, ge=0)
    # bash under bubblewrap: "auto" (when installed), "required" (refuse without), "none"
    sandbox: Literal["auto", "required", "none"] = "auto"
    network: bool = False  # whether sandboxed commands may use the network
    # per model call: the reply's token ceiling and the HTTP timeout of one attempt (retries
    # have their own); None: the provider's default (README §Job file)
    max_output_tokens: int | None = Field(None, ge=1)
    request_timeout_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    # openai: models only: "native" tool_calls, the reply "constrained" to a tool-call JSON
    # schema on turns that must call a tool, or "auto" (README §Small models)
    tool_calls: Literal["native", "constrained", "auto"] = "native"
    # the lead's request ceiling: before a request would exceed it the lead hands off to a
    # successor that starts from the job's ledger (SPEC "Jobs larger than one context");
    # None: 60% of the lead model's context window when known, else 100,000
    lead_context_tokens: int | None = Field(None, ge=1)
    worker: WorkerDefaults = Field(default_factory=WorkerDefaults)
    tasks: list[TaskSpec] = Field(default_factory=list)
    # where worker runs execute: in this process, or on ``threadloom worker`` hosts through a
    # Temporal cluster (README §Scale-out; needs a PostgreSQL --db every host shares)
    executor: Literal["local", "temporal"] = "local"
    temporal_address: str | None = None  # default: env THREADLOOM_TEMPORAL_ADDRESS, localhost
    task_queue: str = Field("threadloom", min_length=1)
    # a host silent this long has its runs handed to another host
    heartbeat_timeout_s: float = Field(30.0, gt=0, allow_inf_nan=False)
    # worktree isolation across hosts: the git repository every machine reaches (README
    # §Scale-out); a relative path is the job file's folder's
    remote: str | None = Field(None, min_length=1)
    # where the file was: relative paths (workspace, scripted model files) resolve against it
    base_dir: str = "."

    _name = field_validator("name")(_title_rules)

    @field_validator("tasks")
    @classmethod
    def _unique_ids(cls, tasks: list[TaskSpec]) -> list[TaskSpec]:
        """Task ids are unique within a job: each keys its worker (the dispatch row, the
        branch, ``{{ref:ID}}``). The error's context carries both indexes (``parse_job`` names
        the line)."""
        again = _duplicate(tasks)
        if again is not None:
            first, i = again
            raise PydanticCustomError(
                "duplicate_task_id",
                f"duplicate task id {tasks[i].id!r} (tasks[{first}] and tasks[{i}])",
                {"index": i, "first": first, "id": tasks[i].id},
            )
        return tasks

    @classmethod
    def from_input(cls, data: dict[str, Any]) -> JobSpec:
        """A spec a person gave (a job file, a front door's arguments): the model's rules and
        the input-only ones (``MAX_TITLE_CHARS``). Specs read back from the store, or built
        around an existing thread, are validated without those: a title stored before the cap
        (an older job file's, an imported session's) still loads."""
        return cls.model_validate(data, context={_INPUT: True})

    @property
    def workspace_path(self) -> Path:
        return (Path(self.base_dir) / self.workspace).resolve()

    def resolve_spec(self, spec: str) -> str:
        """``scripted:PATH`` relative to the job file's directory; other specs unchanged."""
        return resolve_spec(spec, Path(self.base_dir))

    @property
    def lead_model(self) -> str:
        return self.resolve_spec(self.model)

    @property
    def lead_ceiling(self) -> int:
        """The lead's request ceiling in tokens (``lead_context_tokens``, else its default)."""
        if self.lead_context_tokens is not None:
            return self.lead_context_tokens
        window = context_window(self.lead_model)
        return window * 6 // 10 if window else DEFAULT_LEAD_CONTEXT_TOKENS

    def worker_ceiling(self, spec: str) -> int | None:
        """A worker's request ceiling on the model ``spec``: ``[job.worker] context_tokens``,
        else the model's context window less its reply's room, when known."""
        if self.worker.context_tokens is not None:
            return self.worker.context_tokens
        window = context_window(spec)
        if window is None:
            return None
        return window - (self.worker.max_output_tokens or self.max_output_tokens or 8192)

    @property
    def worker_tool_calls(self) -> str:
        """How the workers' tool calls are asked for (``[job.worker]``, else ``[job]``)."""
        return self.worker.tool_calls or self.tool_calls

    @property
    def worker_sandbox(self) -> Literal["auto", "required", "none"]:
        return self.worker.sandbox or self.sandbox

    def worker_spec(self, model: str | None = None) -> str:
        """The model of a worker (or reader) that names ``model``, else the job's worker model,
        else its model."""
        return self.resolve_spec(model or self.worker_model or self.model)

    def model_for(self, task: TaskSpec) -> str:
        return self.worker_spec(task.model)

    def model_options(self, *, worker: bool) -> dict[str, Any]:
        """The provider constructor's keywords (``max_tokens``, ``timeout``, ``tool_calls``) for
        the lead's model, or (``worker``) the workers' and readers' (``[job.worker]`` values,
        defaulting to ``[job]``'s). Only the knobs that are set: an unset one (``tool_calls``
        ``native``) is the provider's default."""
        tokens, timeout = self.max_output_tokens, self.request_timeout_s
        tool_calls: str = self.tool_calls
        if worker:
            tokens = self.worker.max_output_tokens or tokens
            timeout = self.worker.request_timeout_s or timeout
            tool_calls = self.worker_tool_calls
        options: dict[str, Any] = {}
        if tool_calls != "native":
            options["tool_calls"] = tool_calls
        if tokens is not None:
            options["max_tokens"] = tokens
        if timeout is not None:
            options["timeout"] = timeout
        return options


def resolve_spec(spec: str, base_dir: Path) -> str:
    """``scripted:PATH`` with PATH made absolute (relative to ``base_dir``, ``~`` expanded):
    the one spelling of a scripted model wherever it was named; other specs unchanged."""
    if spec.startswith("scripted:"):
        path = Path(spec.split(":", 1)[1]).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        return f"scripted:{path.resolve()}"
    return spec


def load_job(path: str | Path, **overrides: Any) -> JobSpec:
    """Parse and validate a job file; ``overrides`` (``RUN_OPTIONS``: an unset one is None)
    replace the file's ``[job]`` values, as ``run``'s flags do (``[job.worker]`` values still
    win for the workers)."""
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except FileNotFoundError:
        raise JobFileError(f"{p}: no such job file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise JobFileError(f"{p}: cannot read: {err}") from None
    return parse_job(text, name=str(p), base_dir=p.resolve().parent, **overrides)


def parse_job(text: str, *, name: str, base_dir: Path, **overrides: Any) -> JobSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(err))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err))
        where = f"{name}:{m.group(1)}" if m else name
        raise JobFileError(f"{where}: not valid TOML: {msg}") from None
    locate = TomlLines(text)
    extra_top = [k for k in data if k not in ("job", "task")]
    if extra_top:
        raise JobFileError(
            f"{name}:{locate.line((extra_top[0],))}: unknown key {extra_top[0]!r} at the top"
            " level (expected [job] and [[task]] tables)"
        )
    job = data.get("job")
    if not isinstance(job, dict):
        raise JobFileError(f"{name}:1: missing [job] table (it needs at least name and goal)")
    tasks = data.get("task", [])
    if not isinstance(tasks, list):
        single = locate.header_line("[task]")
        line = single if single is not None else locate.line(("task",))
        raise JobFileError(
            f"{name}:{line}: tasks are written [[task]] (an array of tables), not [task]"
        )
    raw = dict(job)
    raw["tasks"] = tasks
    raw["base_dir"] = str(base_dir)
    flags = {key: value for key, value in overrides.items() if value is not None}
    for key, value in flags.items():
        if isinstance(value, str):
            # a flag's relative path is the user's, typed where they stand: the current
            # directory, not the job file's folder
            value = resolve_spec(value, Path.cwd())
        raw[key] = value
    try:
        spec = JobSpec.from_input(raw)
    except ValidationError as err:
        raise JobFileError(_describe(err, name, locate, raw, flags)) from None
    _check_models(spec, name, locate, flags)
    if spec.remote is not None:
        spec = spec.model_copy(update={"remote": _check_remote(spec, name, locate)})
    if not spec.workspace_path.is_dir():
        what = (
            "is a file, not a directory"
            if spec.workspace_path.exists()
            else "does not exist (no such directory)"
        )
        raise JobFileError(
            f"{name}:{locate.line(('job', 'workspace'))}: job.workspace:"
            f" {spec.workspace_path} {what}"
        )
    return spec


def _check_remote(spec: JobSpec, name: str, locate: TomlLines) -> str:
    """``job.remote`` as stored: a relative local path made absolute (every host reads the
    same), or the error naming its line. A URL carrying a credential is refused, not echoed:
    threadloom stores none (each host's git configuration authenticates)."""
    url = str(spec.remote)
    where = f"{name}:{locate.line(('job', 'remote'))}: job.remote"
    if spec.isolation != "worktree":
        raise JobFileError(f'{where}: needs isolation = "worktree" (it carries worktree branches)')
    scheme, sep, rest = url.partition("://")
    info = (rest if sep else url).split("/", 1)[0].rpartition("@")[0]
    if sep or info:
        ssh = not sep or scheme.lower() in ("ssh", "git+ssh", "ssh+git")
        if info and (":" in info or not ssh):
            raise JobFileError(
                f"{where}: the URL holds a credential (user info before @); threadloom stores"
                " none: name the repository without it and let each host's git authenticate"
                " (a credential helper, an SSH key)"
            )
        return url
    if re.match(r"^[^/]+:", url):  # scp-like: [user@]host:path
        return url
    return str((Path(spec.base_dir) / Path(url).expanduser()).resolve())


@dataclass(frozen=True, slots=True)
class RunOption:
    """A ``[job]`` key a door sets (type, bounds, default: its ``JobSpec`` field's), as each
    door says it: ``help``, ``run``'s flag; ``server``, ``mcp``'s flag (the default of each
    client's job); ``mcp``, MCP ``run_job``'s description. Empty: not that door's."""

    key: str
    help: str = ""
    cli: str = ""  # the flag, when it is not --key-with-dashes
    metavar: str | None = None
    server: str = ""
    mcp: str = ""
    thread: str = ""  # ``resume``'s and ``fork``'s flag: this run's value, for its every thread

    @property
    def flag(self) -> str:
        return self.cli or "--" + self.key.replace("_", "-")


RUN_OPTIONS = (
    RunOption(
        "model",
        "The lead's model (and the workers', by default).",
        metavar="SPEC",
        server="Default model of the clients' workers.",
        mcp="The lead's model: it plans, dispatches, reviews and writes the report (and is the"
        " workers' too unless worker_model is given); default: the server's --model.",
    ),
    RunOption(
        "worker_model",
        "The workers' model.",
        metavar="SPEC",
        server="Default workers' model (else --model).",
        mcp="The workers' (and readers') model, apart from the lead's; default: the server's"
        " --worker-model, else model.",
    ),
    RunOption(
        "max_parallel",
        "Workers running at once.",
        server="Workers running at once in each client's job.",
        mcp="Workers running at once; default: 4",
    ),
    RunOption(
        "isolation",
        mcp="worktree: each worker in its own git worktree and branch of the workspace's"
        " repository; default: none (all in the workspace)",
    ),
    RunOption(
        "budget_tokens",
        "Token budget of the whole job; 0: none.",
        server="Token budget of each client's job; 0: none.",
        mcp="Tokens the whole job may use, every thread counted; 0: none",
    ),
    RunOption(
        "max_output_tokens",
        "Output-token ceiling of each model reply ([job] max_output_tokens).",
        metavar="N",
        thread="Output-token ceiling of each model reply of this run (else the job's).",
    ),
    RunOption(
        "request_timeout_s",
        "Seconds one model request may take before it is cut ([job] request_timeout_s).",
        cli="--request-timeout",
        metavar="S",
        thread="Seconds one model request of this run may take before it is cut (else the"
        " job's; a thread outside any job: the provider's, 300 for openai:).",
    ),
    RunOption(
        "sandbox",
        mcp="bash under bubblewrap: auto (when installed) or required; none is refused to a"
        " client confined to its roots; default: auto",
    ),
    RunOption("network", mcp="Whether sandboxed commands may use the network; default: no"),
    RunOption("worker", mcp="The workers' limits and tools ([job.worker] of a job file)"),
)
"""The run options, declared once: ``cli._app.run_flags``, ``mcp._tools.with_run_options``."""

RunKnobs = create_model(
    "RunKnobs",
    __base__=_Strict,
    **{
        o.key: (JobSpec.model_fields[o.key].annotation, JobSpec.model_fields[o.key])
        for o in RUN_OPTIONS
        if o.thread
    },  # type: ignore[call-overload]
)
"""The run options of a run of a thread that exists (``RunOption.thread``), each typed and
bounded as its ``JobSpec`` field."""


def for_one_run(job: JobSpec, **knobs: Any) -> JobSpec:
    """``job`` as one run of a thread that exists (``resume``, ``fork``) is given it: each of
    ``knobs`` (``RunKnobs``; None: not given) replaces the job's value and the workers' own
    ``[job.worker]`` one, so it holds for every thread of the run. ``UsageError`` names a
    value out of its bounds."""
    if not knobs:  # every run that was given none: nothing to check
        return job
    try:
        given = RunKnobs.model_validate(knobs).model_dump(exclude_none=True)
    except ValidationError as err:
        e = err.errors()[0]
        raise UsageError(f"{'.'.join(map(str, e['loc']))}: {e['msg']}") from None
    if not given:
        return job
    return job.model_copy(update={**given, "worker": job.worker.model_copy(update=given)})


def _where(name: str, locate: TomlLines, file_loc: tuple[Any, ...], flags: dict[str, Any]) -> str:
    if len(file_loc) == 2 and file_loc[0] == "job" and file_loc[1] in flags:
        return next((o.flag for o in RUN_OPTIONS if o.key == file_loc[1]), f"--{file_loc[1]}")
    return f"{name}:{locate.line(file_loc)}"


def _check_models(spec: JobSpec, name: str, locate: TomlLines, flags: dict[str, Any]) -> None:
    """Every model spec the job names parses (SPEC §Model specs), or the error names its key
    and line (or its flag)."""
    from workers import ModelSpecError, parse_model_spec

    named: list[tuple[tuple[Any, ...], str, str]] = [(("job", "model"), "job.model", spec.model)]
    if spec.worker_model:
        named.append((("job", "worker_model"), "job.worker_model", spec.worker_model))
    for i, task in enumerate(spec.tasks):
        if task.model:
            named.append((("task", i, "model"), f"task[{i}].model", task.model))
    for loc, label, value in named:
        try:
            parse_model_spec(value)
        except ModelSpecError as err:
            where = _where(name, locate, loc, flags)
            shown = where if where.startswith("--") else f"{where}: {label}"
            raise JobFileError(f"{shown}: {err}") from None


_FIELD_NAMES = {
    (): set(JobSpec.model_fields) - {"tasks", "base_dir"},
    ("worker",): set(WorkerDefaults.model_fields),
    ("tasks",): set(TaskSpec.model_fields),
}


def _describe(
    err: ValidationError,
    name: str,
    locate: TomlLines,
    raw: dict[str, Any],
    flags: dict[str, Any] | None = None,
) -> str:
    e = err.errors()[0]
    loc = tuple(e["loc"])
    # the file's own spelling: [job] keys live under job, tasks under [[task]]
    if loc and loc[0] == "tasks":
        file_loc: tuple[Any, ...] = ("task", *loc[1:])
        label = f"task[{loc[1]}]" + "".join(f".{x}" for x in loc[2:]) if len(loc) > 1 else "task"
    else:
        file_loc = ("job", *loc)
        label = "job" + "".join(f".{x}" if isinstance(x, str) else f"[{x}]" for x in loc)
    kind = e["type"]
    if kind == "duplicate_task_id":
        ctx = e.get("ctx") or {}
        i = ctx["index"]
        return (
            f"{name}:{locate.line(('task', i, 'id'))}: task[{i}].id: duplicate task id"
            f" {ctx['id']!r} (also task[{ctx['first']}])"
        )
    if kind == "extra_forbidden":
        key = str(loc[-1])
        parent = tuple(x for x in loc[:-1] if isinstance(x, str))
        known = _FIELD_NAMES.get(parent, set())
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{name}:{locate.line(file_loc)}: {label}: unknown key{hint}"
    if kind == "missing":
        return f"{name}:{locate.line(file_loc[:-1])}: {label}: missing required key"
    where = _where(name, locate, file_loc, flags or {})
    if where.startswith("--"):
        return f"{where}: {e['msg']} (got {e.get('input')!r})"
    return f"{where}: {label}: {e['msg']}"
