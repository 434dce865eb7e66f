"""The commands that run threads: ``run``, ``demo``, ``resume`` and the running ``fork``."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import EXIT_FAILED, EXIT_OK, EXIT_PROVIDER, CliError
from ._app import AppContext, Output, command, get_app, open_store, run_async

if TYPE_CHECKING:
    from ..api import JobOutcome, Orchestrator
    from ._render import Printer


def exit_code(outcome: JobOutcome) -> int:
    from store import Status

    if outcome.status == Status.DONE:
        return EXIT_OK
    return EXIT_PROVIDER if outcome.provider_failed else EXIT_FAILED


def render(outcome: JobOutcome, *, hints: list[str] | None = None) -> Callable[[Printer], None]:
    def write(p: Printer) -> None:
        from ._report import write_report
        from ._thread_text import render_check

        out = _Visible(p.stream)
        if outcome.report:
            write_report(p, outcome.report)  # Markdown rendered on a terminal, exact text if not
        if outcome.workers:
            out.write("workers:\n")
            width = max(len(w.task or "") for w in outcome.workers)
            for w in outcome.workers:
                first = (w.summary or "").strip().splitlines()[0:1]
                summary = first[0] if first else ""
                if len(summary) > 100:
                    summary = summary[:99] + "…"
                head = f"  {w.ref}  {(w.task or ''):<{width}}  {w.status:<11} "
                if p.styled:  # on a terminal one line per worker: cut, never wrapped
                    from store import redact

                    from ._render import cell_width, fit, visible

                    room = max(p.console.width - cell_width(head), 10)
                    summary = fit(visible(redact(summary)), room)
                out.write(head + summary + "\n")
                if w.check is not None:
                    render_check(p, w.check, indent="    ")
            out.write("\n")
        u = outcome.usage
        head = f"{outcome.status}: {outcome.ref}  (job {outcome.job})"
        tokens = (
            f"tokens: {u.input_tokens:,} in, {u.output_tokens:,} out,"
            f" {u.cache_read_input_tokens:,} cache read,"
            f" {u.cache_creation_input_tokens:,} cache write"
        )
        # on a narrow terminal the tokens go on their own line instead of wrapping mid-figure
        narrow = p.styled and len(head) + 2 + len(tokens) > p.console.width
        out.write(head + ("\n  " if narrow else "  ") + tokens + "\n")
        if outcome.error:
            out.write(f"error: {outcome.error}\n")
        for hint in hints or []:
            out.write(hint + "\n")

    return write


class _Visible:
    """Writes through ``visible``: the report and summaries are model-written text, and no
    control sequence in them may reach the terminal."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        from ._render import visible

        self.stream.write(visible(text))


async def _orchestrate(
    app: AppContext,
    fn: Callable[[Orchestrator], Awaitable[JobOutcome]],
    *,
    env: dict[str, str] | None = None,
    hints: Callable[[JobOutcome], list[str]] | None = None,
) -> Output:
    from ..api import Orchestrator
    from ..logging import set_job_log_dir
    from ._progress import Progress

    store = await open_store(app)
    db_file = store.db.path
    set_job_log_dir((db_file.parent if db_file else Path.cwd() / ".threadloom") / "logs")
    progress = Progress(live=None if not app.json else False)
    orch = Orchestrator(store, on_event=progress.on_event, env=env)
    try:
        with progress:
            outcome = await fn(orch)
    except asyncio.CancelledError:
        leads = [r.ref for r in progress.rows.values() if r.kind == "lead"]
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
    code = exit_code(outcome)
    data = outcome.to_json()
    if code and outcome.error:
        # the run's document, with its error in SPEC's error shape; and the one-line error
        data["error"] = {"code": code, "message": outcome.error}
        from store import redact

        sys.stderr.write(
            redact(f"threadloom: error: {outcome.ref} ended {outcome.status}: {outcome.error}\n")
        )
    return Output(
        data, text=render(outcome, hints=hints(outcome) if hints else None), exit_code=code
    )


@command("run")
@click.argument("job_file", metavar="JOB.toml", type=click.Path(dir_okay=False))
@click.option("--model", metavar="SPEC", help="The lead's model (and the workers', by default).")
@click.option("--worker-model", metavar="SPEC", help="The workers' model.")
@click.option("--max-parallel", type=click.IntRange(min=1), help="Workers running at once.")
@click.option(
    "--budget-tokens", type=click.IntRange(min=0), help="Token budget of the whole job; 0: none."
)
@click.option(
    "--max-output-tokens",
    metavar="N",
    type=click.IntRange(min=1),
    help="Output-token ceiling of each model reply ([job] max_output_tokens).",
)
@click.option(
    "--request-timeout",
    metavar="S",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds one model request may take before it is cut ([job] request_timeout_s).",
)
@click.pass_context
def run(
    ctx: click.Context,
    job_file: str,
    model: str | None,
    worker_model: str | None,
    max_parallel: int | None,
    budget_tokens: int | None,
    max_output_tokens: int | None,
    request_timeout: float | None,
) -> None:
    """Run a job file to the end: the lead dispatches the tasks to workers, reviews their
    results and writes the report. Shows live progress on a terminal."""
    app = get_app(ctx)
    from ..jobs import load_job

    job = load_job(
        job_file,
        model=model,
        worker_model=worker_model,
        max_parallel=max_parallel,
        budget_tokens=budget_tokens,
        max_output_tokens=max_output_tokens,
        request_timeout_s=request_timeout,
    )
    _check_models(job)
    _check_sandbox(job)
    run_async(ctx, lambda: _orchestrate(app, lambda orch: orch.run_job(job), hints=_next_steps))


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
            *_next_steps(outcome),
        ]

    run_async(ctx, lambda: _orchestrate(app, lambda orch: orch.run_job(job), env=env, hints=hints))


@command("resume")
@click.argument("ref")
@click.argument("message", required=False)
@click.option("--model", metavar="SPEC", help="Continue with this model.")
@click.pass_context
def resume(ctx: click.Context, ref: str, message: str | None, model: str | None) -> None:
    """Continue a thread with its whole history, after appending MESSAGE (if given); the ref
    stays the same. A lead's ref resumes the whole job: finished workers are reused and
    interrupted ones resumed. Without MESSAGE, a thread that ended cleanly has nothing to do."""
    app = get_app(ctx)
    if model:
        _check_spec(model)
    run_async(
        ctx,
        lambda: _orchestrate(app, lambda orch: orch.resume(ref, message, model=model)),
    )


def run_fork(ctx: click.Context, ref: str, message: str | None, model: str | None) -> None:
    """The running path of ``threadloom fork`` (``--no-run`` lives with the command)."""
    app = get_app(ctx)
    if model:
        _check_spec(model)

    async def go(orch: Orchestrator) -> JobOutcome:
        from ..api import JobOutcome

        out = await orch.fork(ref, message, model=model, run=True)
        assert isinstance(out, JobOutcome)
        return out

    run_async(ctx, lambda: _orchestrate(app, go))


def _next_steps(outcome: JobOutcome) -> list[str]:
    """What to try next, on a worker that can take it: the fork hint names #3 (after the first
    tool call and its result), so it is offered only for a worker that finished its work; a
    job whose workers all failed gets the resume hint alone."""
    if not outcome.workers:
        return []
    done = [w for w in outcome.workers if w.status == "done"]
    w = (done or outcome.workers)[0].ref
    steps = ["", "next:", f"  threadloom tree {outcome.job}", f"  threadloom show {w} --tools"]
    if done:
        steps.append(f'  threadloom fork {w}#3 "Try a different fix"')
    steps.append(f'  threadloom resume {w} "Also add a regression test"')
    return steps


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
