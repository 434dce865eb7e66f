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

from ._errors import EXIT_FAILED, EXIT_OK, EXIT_PROVIDER, CliError
from .cli import AppContext, Output, command, get_app, open_store, run_async

if TYPE_CHECKING:
    from ._api import JobOutcome, Orchestrator
    from ._render import Printer


def exit_code(outcome: JobOutcome) -> int:
    from store import Status

    if outcome.status == Status.DONE:
        return EXIT_OK
    return EXIT_PROVIDER if outcome.provider_failed else EXIT_FAILED


def render(outcome: JobOutcome, *, hints: list[str] | None = None) -> Callable[[Printer], None]:
    def write(p: Printer) -> None:
        out = _Visible(p.stream)
        if outcome.report:
            out.write(outcome.report.rstrip() + "\n\n")
        if outcome.workers:
            out.write("workers:\n")
            width = max(len(w.task or "") for w in outcome.workers)
            for w in outcome.workers:
                first = (w.summary or "").strip().splitlines()[0:1]
                summary = first[0] if first else ""
                if len(summary) > 100:
                    summary = summary[:99] + "…"
                out.write(f"  {w.ref}  {(w.task or ''):<{width}}  {w.status:<11} {summary}\n")
            out.write("\n")
        u = outcome.usage
        out.write(
            f"{outcome.status}: {outcome.ref}  (job {outcome.job})  tokens: {u.input_tokens:,} in,"
            f" {u.output_tokens:,} out, {u.cache_read_input_tokens:,} cache read,"
            f" {u.cache_creation_input_tokens:,} cache write\n"
        )
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
    from ._api import Orchestrator
    from ._progress import Progress
    from .logging import set_job_log_dir

    store = await open_store(app)
    db_file = store.db.path
    set_job_log_dir((db_file.parent if db_file else Path.cwd() / ".threadloom") / "logs")
    progress = Progress(live=None if not app.json else False)
    orch = Orchestrator(store, on_event=progress.on_event, env=env)
    try:
        with progress:
            outcome = await fn(orch)
    except asyncio.CancelledError:
        sys.stderr.write(
            "threadloom: interrupted; running threads were left interrupted and can be resumed"
            " (threadloom ls --status interrupted; threadloom resume REF)\n"
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
@click.pass_context
def run(
    ctx: click.Context,
    job_file: str,
    model: str | None,
    worker_model: str | None,
    max_parallel: int | None,
    budget_tokens: int | None,
) -> None:
    """Run a job file to the end: the lead dispatches the tasks to workers, reviews their
    results and writes the report. Shows live progress on a terminal."""
    app = get_app(ctx)
    from ._jobfile import load_job

    job = load_job(
        job_file,
        model=model,
        worker_model=worker_model,
        max_parallel=max_parallel,
        budget_tokens=budget_tokens,
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
    from ._jobfile import load_job

    check = subprocess.run(
        [sys.executable, "-c", "import pytest"], capture_output=True, check=False, timeout=60
    )
    if check.returncode != 0:
        raise CliError(
            "the demo's sample repository runs its tests with pytest, which is not installed"
            " for this Python: pip install 'threadloom[demo]' (or pip install pytest)"
        )
    bundle = resources.files("orchestrator").joinpath("demo")
    if keep:
        target = Path(keep).resolve()
        if target.exists() and any(target.iterdir()):
            raise CliError(f"--keep {keep}: directory exists and is not empty")
    else:
        # kept after the run (like mktemp -d): the hints below resume and fork its workers
        target = Path(tempfile.mkdtemp(prefix="threadloom-demo-")) / "calc"
    with resources.as_file(bundle) as bundle_dir:
        shutil.copytree(bundle_dir / "sample", target, dirs_exist_ok=True)
        job = load_job(bundle_dir / "job.toml")
        job = job.model_copy(update={"workspace": str(target), "model": job.lead_model})
    # the workers run `python -m pytest`: the Python that runs threadloom has pytest available
    bindir = str(Path(sys.executable).parent)
    env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", "")}

    def hints(outcome: JobOutcome) -> list[str]:
        check = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        tail = (check.stdout.strip().splitlines() or ["(no output)"])[-1]
        return [
            f"\nthe sample repository: {target}",
            f"its tests now: {tail}",
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
        from ._api import JobOutcome

        out = await orch.fork(ref, message, model=model, run=True)
        assert isinstance(out, JobOutcome)
        return out

    run_async(ctx, lambda: _orchestrate(app, go))


def _next_steps(outcome: JobOutcome) -> list[str]:
    if not outcome.workers:
        return []
    w = outcome.workers[0].ref
    return [
        "",
        "next:",
        f"  threadloom tree {outcome.job}",
        f"  threadloom show {w} --tools",
        f'  threadloom fork {w}#3 "Try a different fix"',
        f'  threadloom resume {w} "Also add a regression test"',
    ]


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
