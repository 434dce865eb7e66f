"""The commands of worktree isolation: ``diff``, ``merge`` and ``gc`` (``orchestrator.api``'s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import EXIT_FAILED
from ._app import Output, command, run_command

if TYPE_CHECKING:
    from store import Store

    from ..api import Orchestrator


def _api(store: Store) -> Orchestrator:
    from ..api import Orchestrator

    return Orchestrator(store)


@command("diff", short_help="A worker's changes against its job's base (worktree jobs).")
@click.argument("ref", metavar="REF[#N]")
@click.option("--stat", is_flag=True, help="Only the diff stat.")
@click.pass_context
def diff(ctx: click.Context, ref: str, stat: bool) -> None:
    """Print the diff of a worker's branch against the commit its job started from.

    With REF#N, the worker's files as they were after message N (its checkpoint, or the nearest
    earlier one). --json: {ref, branch, base, tip, of, diff}.
    """

    async def go(store: Store) -> Output:
        data = await _api(store).diff(ref, stat=stat)
        return Output(data, data["diff"])

    run_command(ctx, go, create=False, refs=[ref])


@command("merge", short_help="Merge workers' branches into a job branch; conflicts reported.")
@click.argument("refs", metavar="REF…", nargs=-1, required=True)
@click.option(
    "--into",
    "into",
    metavar="BRANCH",
    help="Branch to merge into (default: threadloom/<job>/merged, created at the job's base).",
)
@click.pass_context
def merge(ctx: click.Context, refs: tuple[str, ...], into: str | None) -> None:
    """Merge the branches of worker threads REF…, in order, into a job branch.

    Each merge is a --no-ff merge computed without any working tree (git merge-tree): the
    user's checkout, index and current branch are never touched, and a branch checked out
    anywhere is refused as a target. A branch that conflicts is left unmerged and its conflicted
    files are listed; the others are merged. Exit 1 when any conflicted.
    --json: {into, created, head, merged, already_merged, conflicts: [{ref, branch, files}]}.
    """

    async def go(store: Store) -> Output:
        report = await _api(store).merge(refs, into=into)
        created = " (created)" if report["created"] else ""
        lines = [f"into {report['into']}{created}: {report['head'][:12]}"]
        lines += [f"  merged    {m['ref']}  {m['branch']}" for m in report["merged"]]
        lines += [f"  up to date {m['ref']}  {m['branch']}" for m in report["already_merged"]]
        for c in report["conflicts"]:
            lines.append(f"  CONFLICT  {c['ref']}  {c['branch']}  (not merged)")
            lines += [f"    {f}" for f in c["files"]]
        return Output(
            report, "\n".join(lines) + "\n", exit_code=EXIT_FAILED if report["conflicts"] else 0
        )

    run_command(ctx, go, create=False, refs=refs)


@command("gc", short_help="Remove the worktrees of finished jobs (branches are kept).")
@click.option("--job", "job", metavar="REF", help="Only this job (its lead or any of its threads).")
@click.option(
    "--branches", is_flag=True, help="Also delete the workers' branches and checkpoint refs."
)
@click.pass_context
def gc(ctx: click.Context, job: str | None, branches: bool) -> None:
    """Remove the git worktrees of finished jobs: every thread done, failed or cancelled.
    Interrupted or running jobs keep theirs, so they resume where they were. Branches, the job
    branch and checkpoints are kept unless --branches (a resumed thread whose worktree was
    removed gets it back from its last checkpoint).
    --json: {removed: [{ref, worktree}], kept: [{ref, worktree, reason}], deleted_refs}.
    """

    async def go(store: Store) -> Output:
        report = await _api(store).gc(job=job, branches=branches)
        lines = [f"removed {r['ref']}  {r['worktree']}" for r in report["removed"]]
        lines += [f"kept    {k['ref']}  {k['reason']}" for k in report["kept"]]
        if report["deleted_refs"]:
            lines.append(f"deleted {len(report['deleted_refs'])} branches and refs")
        if not lines:
            lines.append("nothing to remove")
        return Output(report, "\n".join(lines) + "\n")

    run_command(ctx, go, create=False, refs=[job] if job else ())
