"""A job run's outcome in SPEC's shape (``run``, ``resume``, ``fork``): the workers this run
spawned with their summaries, the lead's report with its citations checked, the status (a job
whose every worker failed did not succeed) and the usage this run spent."""

from __future__ import annotations

from store import Status, Store, Usage, format_ref
from workers import RunOutcome

from ..outcomes import JobOutcome, WorkerSummary
from .job import JobRuntime


async def usage_by_thread(store: Store, job_id: str) -> dict[str, Usage]:
    """The usage of each thread of a job, by thread id."""
    return {t.thread_id: t.usage for t in await store.usage.totals(job_id=job_id)}


async def job_outcome(
    rt: JobRuntime, outcome: RunOutcome, *, before: dict[str, Usage] | None = None
) -> JobOutcome:
    """The run's SPEC shape. Its usage: the whole job's for a new job; with ``before`` (the
    job's usage per thread when the run started), what the threads this run ran used since
    — a fork's line counts the fork's run, not the job it belongs to."""
    workers = []
    for wid in rt.spawned:
        ended = rt.ended.get(wid)  # how this run ended it, as stored; else read it
        if ended is not None:
            status, result, error = ended.status, ended.result, ended.error
            task = rt.tasks.get(wid)
        else:
            w = await rt.store.get_thread(wid)
            status, result, error, task = w.status, w.result, w.error, (w.task or {}).get("id")
        workers.append(
            WorkerSummary(
                ref=format_ref(wid),
                task=task,
                status=str(status),
                summary=result.summary if result else (error or ""),
                check=result.check if result else None,
            )
        )
    report = outcome.final_text
    if not report and outcome.result is not None and outcome.status == Status.DONE:
        # a worker's distilled summary; not the result a failed run was given from its
        # error, which the run reports once, as its error
        report = outcome.result.summary
    if report:
        from .report_check import check_report

        # its citations checked: unresolvable ones and runs cited for the opposite claim
        report = await check_report(rt.store, report)
    status, error, exception = outcome.status, outcome.error, outcome.exception
    failed = [w for w in workers if w.status == Status.FAILED]
    if status == Status.DONE and workers and len(failed) == len(workers):
        # the lead wrote its report, but nothing it dispatched succeeded: not a done job
        status = Status.FAILED
        error = f"every worker failed ({len(failed)} of {len(workers)}): {failed[0].summary}"
        # and when each of them lost the model provider, the job did too (SPEC exit 4)
        from workers import ModelError

        causes = [rt.ended[w].exception if w in rt.ended else None for w in rt.spawned]
        if all(isinstance(c, ModelError) for c in causes):
            exception = causes[0]
    return JobOutcome(
        job=format_ref(rt.lead_id),
        lead=format_ref(rt.current_lead),  # the newest lead of a job that handed off
        ref=outcome.ref,
        status=status,
        report=report,
        workers=workers,
        usage=await _run_usage(rt, before),
        error=error,
        exception=exception,
    )


async def _run_usage(rt: JobRuntime, before: dict[str, Usage] | None) -> Usage:
    if before is None:
        return await rt.store.usage.of_job(rt.lead_id)
    after = await usage_by_thread(rt.store, rt.lead_id)
    used = Usage()
    for tid in rt.ran:
        now, then = after.get(tid, Usage()), before.get(tid, Usage())
        used = used + Usage(
            input_tokens=now.input_tokens - then.input_tokens,
            output_tokens=now.output_tokens - then.output_tokens,
            cache_read_input_tokens=now.cache_read_input_tokens - then.cache_read_input_tokens,
            cache_creation_input_tokens=now.cache_creation_input_tokens
            - then.cache_creation_input_tokens,
        )
    return used
