"""The commands that run threads: ``run``, ``demo``, ``resume``, the running ``fork`` and ``ask``.

Each runs under live progress (``_progress``) and ends with one block on stdout: the report (or
the answer), the workers, the status line with what this run used, and hints that fit how it
ended. A run that ends badly says why once, as ``threadloom: error: …`` on stderr (and in the
``--json`` document's ``error``); the status line on stdout says how it ended.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from store import Status

from ..errors import EXIT_FAILED, EXIT_OK, EXIT_PROVIDER, CliError
from ._app import AppContext, Output, command, get_app, open_store, run_async

if TYPE_CHECKING:
    from collections.abc import Mapping

    from store import Store

    from ..api import Orchestrator
    from ..outcomes import AskOutcome, JobOutcome
    from ._render import Printer


class Ended(Protocol):
    """How a run ended, as ``exit_code`` reads it (``JobOutcome``, ``AskOutcome``)."""

    @property
    def status(self) -> Status: ...

    @property
    def provider_failed(self) -> bool: ...


def exit_code(outcome: Ended) -> int:
    if outcome.status == Status.DONE:
        return EXIT_OK
    return EXIT_PROVIDER if outcome.provider_failed else EXIT_FAILED


def render(
    outcome: JobOutcome,
    *,
    hints: list[str] | None = None,
    short: Mapping[str, str] | None = None,
) -> Callable[[Printer], None]:
    """The run's block. ``short``: each ref's shortest unique form (``T-…x2p4``), printed where
    a terminal has no room for the whole ref (the report's tables, the workers' lines)."""

    def write(p: Printer) -> None:
        from ._report import write_report
        from ._thread_text import render_check

        out = _Visible(p.stream)
        if outcome.report:
            # Markdown rendered on a terminal, the exact text if not
            write_report(p, outcome.report, short=short)
        if outcome.workers:
            out.write("workers:\n")
            width = max(len(w.task or "") for w in outcome.workers)
            for w in outcome.workers:
                first = (w.summary or "").strip().splitlines()[0:1]
                summary = first[0] if first else ""
                if len(summary) > 100:
                    summary = summary[:99] + "…"
                ref = w.ref
                head = f"  {ref}  {(w.task or ''):<{width}}  {w.status:<11} "
                if p.styled:  # on a terminal one line per worker: cut, never wrapped
                    from workers import redact

                    from ._render import cell_width, fit, visible

                    if short and p.console.width - cell_width(head) < _SUMMARY_ROOM:
                        ref = short.get(w.ref, w.ref)  # no room for the whole ref
                        head = f"  {ref}  {(w.task or ''):<{width}}  {w.status:<11} "
                    room = max(p.console.width - cell_width(head), 10)
                    summary = fit(visible(redact(summary)), room)
                out.write(head + summary + "\n")
                if w.check is not None:
                    render_check(p, w.check, indent="    ")
            out.write("\n")
        out.write(status_line(p, outcome))
        for hint in hints or []:
            out.write(hint + "\n")

    return write


_SUMMARY_ROOM = 20
"""Below this many columns left for a worker's summary, its line gives the ref's short form."""


def status_line(p: Printer, outcome: JobOutcome | AskOutcome) -> str:
    """``done: T-…  (job T-…)  tokens: …``: how the run ended and what it used (this run's
    threads only: a fork's line counts the fork's run, not its whole job)."""
    u = outcome.usage
    head = f"{outcome.status}: {outcome.ref}  (job {outcome.job})"
    tokens = (
        f"tokens: {u.input_tokens:,} in, {u.output_tokens:,} out,"
        f" {u.cache_read_input_tokens:,} cache read,"
        f" {u.cache_creation_input_tokens:,} cache write"
    )
    # on a narrow terminal the tokens go on their own line instead of wrapping mid-figure
    narrow = p.styled and len(head) + 2 + len(tokens) > p.console.width
    return head + ("\n  " if narrow else "  ") + tokens + "\n"


def render_answer(
    outcome: AskOutcome, *, short: Mapping[str, str] | None = None
) -> Callable[[Printer], None]:
    """``ask``'s block: the answer (Markdown on a terminal), the citations checked, the ones
    that did not resolve, then the reader's status line."""

    def write(p: Printer) -> None:
        from ._report import write_report

        out = _Visible(p.stream)
        if outcome.answer:
            write_report(p, outcome.answer, short=short)
        if outcome.citations:
            out.write("citations: " + ", ".join(outcome.citations) + "\n")
        if outcome.unresolved:
            out.write(
                "did not resolve (marked [not found] above): "
                + ", ".join(outcome.unresolved)
                + "\n"
            )
        if outcome.citations or outcome.unresolved:
            out.write("\n")
        out.write(status_line(p, outcome))

    return write


class _Visible:
    """Writes through ``visible``: the report and summaries are model-written text, and no
    control sequence in them may reach the terminal."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        from ._render import visible

        self.stream.write(visible(text))


Outcome = TypeVar("Outcome", "JobOutcome", "AskOutcome")


async def _orchestrate(
    app: AppContext,
    fn: Callable[[Orchestrator], Awaitable[Outcome]],
    present: Callable[[Outcome, Store], Awaitable[Output]],
    *,
    env: dict[str, str] | None = None,
    create: bool = False,
    refs: Sequence[str] = (),
) -> Output:
    """Run ``fn`` under live progress with the job log on, then ``present`` its outcome while
    the store is still open. ``create``: a job that starts a database where there is none
    (``run``, ``demo``); what needs threads that exist does not make an empty one."""
    from ..api import Orchestrator
    from ..logging import set_job_log_dir
    from ._progress import Progress

    store = await open_store(app, create=create, refs=refs)
    db_file = store.db.path
    set_job_log_dir((db_file.parent if db_file else Path.cwd() / ".threadloom") / "logs")
    progress = Progress(live=None if not app.json else False)
    orch = Orchestrator(store, on_event=progress.on_event, env=env)
    try:
        with progress:
            outcome = await fn(orch)
        return await present(outcome, store)
    except asyncio.CancelledError:
        # the job's current lead: those that handed off were continued by it
        leads = [r.ref for r in progress.rows.values() if r.kind == "lead" and not r.successor]
        sys.stderr.write(
            "threadloom: interrupted; the job's running threads were left interrupted;"
            f" threadloom resume {leads[0]} runs it on: finished workers are reused, stopped and"
            " queued ones run\n"
            if len(leads) == 1
            else "threadloom: interrupted; running threads were left interrupted and can be"
            " resumed (threadloom ls --status interrupted; threadloom resume REF)\n"
        )
        raise
    finally:
        set_job_log_dir(None)
        await store.close()


def _failed(data: dict[str, Any], code: int, line: str) -> None:
    """A run that ended badly: its error in SPEC's error shape in the document, and said once,
    as one line on stderr."""
    from workers import redact

    data["error"] = {"code": code, "message": line}
    sys.stderr.write(redact(f"threadloom: error: {line}\n"))


async def _short_refs(store: Store, *texts: str) -> dict[str, str]:
    """Each whole ref in ``texts`` → its shortest unique form (``Store.short_refs``)."""
    ids = {m.group(1) for text in texts for m in _WHOLE_REF.finditer(text)}
    return {f"T-{i}": ref for i, ref in (await store.short_refs(sorted(ids))).items()}


_WHOLE_REF = re.compile(r"\bT-([0-9a-hjkmnp-tv-z]{26})\b")


def _run_output(
    hints: Callable[[JobOutcome], list[str]] | None = None,
) -> Callable[[JobOutcome, Store], Awaitable[Output]]:
    async def present(outcome: JobOutcome, store: Store) -> Output:
        code = exit_code(outcome)
        data = outcome.to_json()
        if code and outcome.error:
            _failed(data, code, f"{outcome.ref} ended {outcome.status}: {outcome.error}")
        short = await _short_refs(store, outcome.report, *(w.ref for w in outcome.workers))
        text = render(outcome, hints=hints(outcome) if hints else None, short=short)
        return Output(data, text=text, exit_code=code)

    return present


async def _ask_output(outcome: AskOutcome, store: Store) -> Output:
    code = exit_code(outcome)
    data = outcome.to_json()
    if code:
        why = outcome.error or "no answer"
        _failed(data, code, f"the reader {outcome.reader} ended {outcome.status}: {why}")
    short = await _short_refs(store, outcome.answer)
    return Output(data, text=render_answer(outcome, short=short), exit_code=code)


@command("run", run_options="run")
@click.argument("job_file", metavar="JOB.toml", type=click.Path(dir_okay=False))
@click.pass_context
def run(ctx: click.Context, /, job_file: str, **options: Any) -> None:
    """Run a job file to the end: the lead dispatches the tasks to workers, reviews their
    results and writes the report. Shows live progress on a terminal."""
    app = get_app(ctx)
    from ..jobs import load_job

    job = load_job(job_file, **options)
    _check_models(job)
    _check_sandbox(job)
    run_async(
        ctx,
        lambda: _orchestrate(
            app, lambda orch: orch.run_job(job), _run_output(next_steps), create=True
        ),
    )


@command("demo")
@click.option(
    "--keep",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Copy the sample repository here (and keep it) instead of a temporary directory.",
)
@click.pass_context
def demo(ctx: click.Context, keep: str | None) -> None:
    """Run the bundled example job on a copy of the bundled sample repository with the offline
    scripted model: no API key, no network. Three workers fix three bugs in parallel; the lead
    reads one worker's transcript by ref and writes the report."""
    app = get_app(ctx)
    from ..jobs import load_job

    bundle = resources.files("orchestrator").joinpath("demo")
    if keep:
        target = Path(keep).resolve()
        try:
            if target.exists() and any(target.iterdir()):
                raise CliError(f"--keep {keep}: directory exists and is not empty")
            target.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CliError(f"--keep {keep}: cannot make that directory: {err.strerror}") from None
    else:
        # kept after the run (like mktemp -d): the hints below resume and fork its workers
        target = Path(tempfile.mkdtemp(prefix="threadloom-demo-")) / "calc"
    with resources.as_file(bundle) as bundle_dir:
        # not the bytecode pip compiled at install time: the copy is the user's repository
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(bundle_dir / "sample", target, dirs_exist_ok=True, ignore=ignore)
        job = load_job(bundle_dir / "job.toml")
        job = job.model_copy(update={"workspace": str(target), "model": job.lead_model})
    # the workers run `python -m unittest` and `python -m calc`: the standard library of the
    # Python that runs threadloom is all they need, so `pip install threadloom` is enough
    bindir = str(Path(sys.executable).parent)
    env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", "")}

    def hints(outcome: JobOutcome) -> list[str]:
        check = subprocess.run(
            [sys.executable, "-m", "unittest"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        # unittest reports on stderr: "Ran 39 tests in 0.004s", a blank line, then "OK" or
        # "FAILED (failures=1, errors=2)"
        lines = check.stderr.strip().splitlines()
        ran = next((ln for ln in reversed(lines) if ln.startswith("Ran ")), "")
        tail = ", ".join(filter(None, [ran.split(" in ")[0], lines[-1] if lines else ""]))
        return [
            f"\nthe sample repository: {target}",
            f"its tests now (python -m unittest): {tail or '(no output)'}",
            *(demo_steps(outcome) or next_steps(outcome)),
        ]

    run_async(
        ctx,
        lambda: _orchestrate(
            app, lambda orch: orch.run_job(job), _run_output(hints), env=env, create=True
        ),
    )


@command("resume", run_options="thread")
@click.argument("ref")
@click.argument("message", required=False)
@click.option("--model", metavar="SPEC", help="Continue with this model.")
@click.pass_context
def resume(
    ctx: click.Context, /, ref: str, message: str | None, model: str | None, **knobs: Any
) -> None:
    """Continue a thread with its whole history, after appending MESSAGE (if given); the ref
    stays the same. A lead's ref resumes the whole job: finished workers are reused and
    interrupted ones resumed. Without MESSAGE, a thread that ended cleanly has nothing to do.
    --max-output-tokens and --request-timeout hold for every thread this run runs."""
    _on_thread(
        ctx, ref, model, lambda orch: orch.resume(ref, message, model=model, **knobs), _run_output()
    )


def run_fork(
    ctx: click.Context, ref: str, message: str | None, model: str | None, knobs: dict[str, Any]
) -> None:
    """The running path of ``threadloom fork`` (``--no-run`` lives with the command)."""

    async def go(orch: Orchestrator) -> JobOutcome:
        from ..outcomes import JobOutcome

        out = await orch.fork(ref, message, model=model, run=True, **knobs)
        assert isinstance(out, JobOutcome)
        return out

    _on_thread(ctx, ref, model, go, _run_output())


def _on_thread(
    ctx: click.Context,
    ref: str,
    model: str | None,
    fn: Callable[[Orchestrator], Awaitable[Outcome]],
    present: Callable[[Outcome, Store], Awaitable[Output]],
) -> None:
    """``resume``, ``fork`` and ``ask``: a run on a thread that exists (no database is made
    for it), its ``--model`` spec checked before anything opens."""
    if model:
        _check_spec(model)
    app = get_app(ctx)
    run_async(ctx, lambda: _orchestrate(app, fn, present, refs=[ref]))


@command("ask", short_help="Ask a question about a thread; the answer cites its messages.")
@click.argument("ref")
@click.argument("question")
@click.option("--model", metavar="SPEC", help="The reader's model (default: the job's workers').")
@click.pass_context
def ask(ctx: click.Context, ref: str, question: str, model: str | None) -> None:
    """A reader thread with a fresh context reads REF's transcript (the thread, or the range
    T-…#3-9) and answers QUESTION, citing the messages that show it (T-…#n) — as the lead's
    ask_thread does. Every citation is checked: one that does not resolve is marked [not found]
    in the answer. The reader is a thread of REF's job (threadloom show it).

    --json: {answer, citations: [ref], reader: ref, unresolved: [ref], status, usage}.
    """
    _on_thread(ctx, ref, model, lambda orch: orch.ask(ref, question, model=model), _ask_output)


def next_steps(outcome: JobOutcome) -> list[str]:
    """What to try next, fitting how the run ended: a job stopped before its end is resumed; a
    worker that did not finish is looked at and resumed (or run on, when it was stopped); a job
    whose workers all finished is looked into. Messages are the user's to write: ``<…>``."""
    steps: list[tuple[str, str]] = []
    if outcome.workers:
        steps.append((f"threadloom tree {outcome.job}", "the job: every thread, status, tokens"))
    if outcome.status in (Status.INTERRUPTED, Status.CANCELLED):
        steps.append((f"threadloom resume {outcome.ref}", "runs it on from where it stopped"))
    unfinished = [w for w in outcome.workers if w.status != Status.DONE]
    if unfinished:
        w = unfinished[0]
        steps.append((f"threadloom show {w.ref} --tools", f"why {w.task or 'it'} ended {w.status}"))
        if w.status in (Status.INTERRUPTED, Status.CANCELLED):
            steps.append((f"threadloom resume {w.ref}", "runs it on"))
        else:
            steps.append((f'threadloom resume {w.ref} "<what to try next>"', "with its history"))
    elif outcome.workers:
        w = outcome.workers[0]
        steps.append((f"threadloom show {w.ref} --tools", f"what {w.task or 'it'} did"))
        steps.append((f'threadloom ask {w.ref} "<your question>"', "answered with citations"))
    elif outcome.status == Status.DONE:
        steps.append((f"threadloom show {outcome.ref} --tools", "the whole thread"))
    if not steps:
        return []
    width = max(len(cmd) for cmd, _ in steps)
    return ["", "next:", *(f"  {cmd:<{width}}  # {why}" for cmd, why in steps)]


DEMO_STEPS = (
    "threadloom ls",
    "threadloom tree {lead}",
    "threadloom show {worker}#3",
    "threadloom show {worker} --tools",
    'threadloom search "ZeroDivisionError"',
    'threadloom ask {worker} "Which test failed first, and why?"',
    'threadloom fork {worker}#5 "Try fixing it in the parser instead"',
    'threadloom resume {worker} "Also add a regression test"',
    "threadloom stats",
)
"""What to try after the demo: README's walkthrough, in order, with the demo's refs ({lead}:
the job; {worker}: its tokenizer worker). The demo's script answers each of them
(``demo/script.json``); tests/e2e/test_readme_walkthrough.py runs README's lines and checks
that they are these."""


def demo_steps(outcome: JobOutcome) -> list[str]:
    """``DEMO_STEPS`` with this run's refs, when the demo ended as it should (its tokenizer
    worker done); otherwise nothing (``next_steps`` fits the run instead)."""
    worker = next((w for w in outcome.workers if w.task == "tokenizer"), None)
    if outcome.status != Status.DONE or worker is None or worker.status != Status.DONE:
        return []
    head = (
        f"next (README's walkthrough; the job is {outcome.job}, its tokenizer worker {worker.ref}):"
    )
    return ["", head, *(f"  {s.format(lead=outcome.job, worker=worker.ref)}" for s in DEMO_STEPS)]


def _check_spec(spec: str) -> None:
    from workers.providers import parse_model_spec

    parse_model_spec(spec)


def _check_sandbox(job: Any) -> None:
    """``sandbox = "required"`` without bubblewrap: exit 2 before anything is stored."""
    from workers.tools import require_sandbox

    require_sandbox(job.worker_sandbox)


def _check_models(job: Any) -> None:
    _check_spec(job.lead_model)
    for task in job.tasks:
        _check_spec(job.model_for(task))
