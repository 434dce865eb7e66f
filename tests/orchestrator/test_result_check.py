"""The result check (SPEC "Checked results"), rule by rule, on real scripted jobs: real files in
a real git workspace, real pytest runs, real commands (``tests/check_corpus.py``) — with
worktree isolation (changes from the worktree diff) and without (changes from the thread's own
file tools and commands). Then the correction round, forks, resumes, hostile input, and a
check that fails."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator
from orchestrator.runtime._commands import block_status, claimed_outcome, normal, segments
from orchestrator.runtime.check import check_result, check_thread
from store import (
    Change,
    Check,
    ClaimCheck,
    Effects,
    Finding,
    Kind,
    NewMessage,
    Result,
    Status,
    Store,
    ThreadInfo,
    ToolResultBlock,
    ToolUseBlock,
    Verification,
)
from tests.check_corpus import Case, cases, honest_turns, write_job


@dataclass
class Ran:
    """A finished job: each case's worker thread as stored, and its messages."""

    case: dict[str, Case]
    info: dict[str, ThreadInfo]
    messages: dict[str, list[Any]]

    def check(self, kind: str, nth: int = 0) -> Check:
        task = [t for t, c in self.case.items() if c.kind == kind][nth]
        result = self.info[task].result
        assert result is not None and result.check is not None, task
        return result.check

    def ref(self, kind: str, seq: int, nth: int = 0) -> str:
        task = [t for t, c in self.case.items() if c.kind == kind][nth]
        return f"{self.info[task].ref}#{seq}"


def _run_job(root: Path, isolation: str, parallel: int) -> Ran:
    chosen = cases(1, 1)
    job = write_job(root, f"check-{isolation}", chosen, isolation=isolation, parallel=parallel)

    async def go() -> Ran:
        async with await Orchestrator.open(str(root / "t.db")) as orch:
            out = await orch.run_job(job)
            assert out.status == Status.DONE, out.error
            infos, msgs = {}, {}
            for w in out.workers:
                info = await orch.store.get_thread(w.ref[2:])
                infos[w.task or ""] = info
                msgs[w.task or ""] = await orch.store.messages(info.id)
        return Ran({c.task: c for c in chosen}, infos, msgs)

    return asyncio.run(go())


@pytest.fixture(scope="module", params=["worktree", "none"])
def ran(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Ran:
    root = tmp_path_factory.mktemp(f"check-{request.param}")
    # without worktrees the workers share the directory: one at a time, so that each one's
    # commands see only its own changes
    return _run_job(root, request.param, 4 if request.param == "worktree" else 1)


def _claims(check: Check, kind: str) -> list[ClaimCheck]:
    return [c for c in check.claims if c.kind == kind]


# ----------------------------------------------------------------- honest work is verified


def test_honest_results_with_honest_variations_are_verified(ran: Ran) -> None:
    for task, case in ran.case.items():
        if case.fabricated:
            continue
        check = ran.info[task].result.check  # type: ignore[union-attr]
        assert check is not None
        bad = [c for c in check.claims if c.verdict != "verified"]
        assert check.verdict == "verified" and not bad, (case.kind, bad)
        assert check.rounds == 1
        assert {c.kind for c in check.claims} >= {"finding", "verification"}, case.kind


def test_every_verified_claim_names_the_message_that_decided_it(ran: Ran) -> None:
    check = ran.check("plain")
    finding, verification, change = (
        _claims(check, "finding")[0],
        _claims(check, "verification")[0],
        _claims(check, "change")[0],
    )
    assert finding.refs == [ran.ref("plain", 7)]  # the passing run it cites
    assert verification.refs == [ran.ref("plain", 7)] and "exited 0" in verification.reason
    assert ran.ref("plain", 5) in change.refs  # the edit_file call's result
    assert change.index == 0 and verification.index == 0 and finding.index == 0


# ----------------------------------------------------------------- each fabrication is caught


def test_done_without_a_tool_call_is_an_unverified_status(ran: Ran) -> None:
    check = ran.check("no_tool_call")
    status = _claims(check, "status")
    assert [c.reason for c in status] == ["status done, but the thread made no tool call"]
    assert status[0].verdict == "unverified" and status[0].refs == [ran.ref("no_tool_call", 2)]
    (finding,) = _claims(check, "finding")
    assert finding.verdict == "unverified" and "'All tests passed.' is not a ref" in finding.reason
    (verification,) = _claims(check, "verification")
    assert verification.reason == "no bash call of this thread ran `pytest -q`"
    assert check.verdict == "unverified"


def test_a_verification_command_never_run_is_unverified(ran: Ran) -> None:
    (v,) = _claims(ran.check("never_run"), "verification")
    assert v.verdict == "unverified" and v.reason.startswith(
        "no bash call of this thread ran `pytest"
    )


def test_a_run_before_the_last_change_is_unverified_naming_both(ran: Ran) -> None:
    (v,) = _claims(ran.check("run_before_last_edit"), "verification")
    run, change = ran.ref("run_before_last_edit", 5), ran.ref("run_before_last_edit", 7)
    assert v.verdict == "unverified"
    test = f"pkg/test_mod_{_nth('run_before_last_edit', ran)}.py"
    assert v.reason == f"`pytest -q {test}` last ran at {run}, before a change at {change}"
    assert v.refs == [run, change]


def _nth(kind: str, ran: Ran) -> str:
    return next(t for t, c in ran.case.items() if c.kind == kind)[1:]


def test_exit_1_claimed_passing_goes_back_once_then_stands_contradicted(ran: Ran) -> None:
    task = next(t for t, c in ran.case.items() if c.kind == "exit1_claimed_passing")
    check = ran.check("exit1_claimed_passing")
    # variant 0 owns up in the correction round: its second submission is checked and stands
    assert check.rounds == 2
    msgs = ran.messages[task]
    errors = [
        b
        for m in msgs
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.is_error and "contradicted" in b.text
    ]
    assert len(errors) == 1
    run = ran.ref("exit1_claimed_passing", 5)
    assert (
        f"claimed passing, but `pytest -q pkg/test_mod_{task[1:]}.py` exited 1 at {run}"
        in errors[0].text
    )
    assert f"({run})" in errors[0].text and "only correction round" in errors[0].text
    (v,) = _claims(check, "verification")
    assert v.verdict == "verified" and "exited 1" in v.reason  # now claimed failing: true


def test_a_claimed_change_absent_from_the_record_is_contradicted_naming_the_submission(
    ran: Ran,
) -> None:
    check = ran.check("change_absent")
    assert check.rounds == 2 and check.verdict == "contradicted"  # insisted: stands
    good, absent = _claims(check, "change")
    assert good.verdict == "verified"
    assert absent.verdict == "contradicted" and "shows no change to pkg/util_" in absent.reason
    task = next(t for t, c in ran.case.items() if c.kind == "change_absent")
    last = ran.messages[task][-2]  # the second submission (the last message is its answer)
    assert absent.refs == [f"{ran.info[task].ref}#{last.seq}"]


def test_a_change_made_by_a_command_and_not_reported_is_an_unverified_status(ran: Ran) -> None:
    check = ran.check("unreported_change")
    status = _claims(check, "status")
    task = next(t for t, c in ran.case.items() if c.kind == "unreported_change")
    assert [c.reason for c in status] == [
        f"unreported change: pkg/util_{task[1:]}.py modified, not listed in changes"
    ]
    assert status[0].refs == [ran.ref("unreported_change", 5)]  # the sed that made it


def test_evidence_past_the_end_is_unverified(ran: Ran) -> None:
    (f,) = _claims(ran.check("evidence_elsewhere"), "finding")
    assert f.verdict == "unverified" and "#999 is past the end" in f.reason


# ----------------------------------------------------------------- forks, resumes, hostile input


async def _job(tmp_path: Path, rules: list[dict[str, Any]], turns: list[dict[str, Any]]) -> Path:
    case = Case("t0", "plain", False, turns)
    job = write_job(tmp_path, "one", [case], isolation="none", parallel=1)
    script = json.loads((tmp_path / "one.json").read_text())
    script["rules"] = rules + script["rules"]
    (tmp_path / "one.json").write_text(json.dumps(script))
    return job


async def test_a_fork_may_cite_its_inherited_messages_and_a_resume_its_earlier_changes(
    tmp_path: Path,
) -> None:
    def doc(name: str) -> list[dict[str, Any]]:
        write = {"name": "write_file", "input": {"path": f"pkg/{name}", "content": "d\n"}}
        submit = {
            "name": "submit_result",
            "input": {
                "status": "done",
                "summary": "documented",
                "findings": [{"claim": "it passed", "evidence": ["{{thread}}#7"]}],
                "changes": [{"path": f"pkg/{name}", "action": "added"}],
            },
        }
        return [{"tool_calls": [write]}, {"tool_calls": [submit]}]

    rules = [
        {"match": "document it", "turns": doc("DOC.md")},
        {"match": "document more", "turns": doc("MORE.md")},
    ]
    job = await _job(tmp_path, rules, honest_turns("plain", 0))
    async with await Orchestrator.open(str(tmp_path / "t.db")) as orch:
        out = await orch.run_job(job)
        worker = out.workers[0].ref
        fork = await orch.fork(worker, "document it")
        resumed = await orch.resume(worker, "document more")
        for ref in (fork.ref, resumed.ref):  # type: ignore[union-attr]
            info = await orch.store.get_thread(ref[2:])
            check = info.result.check  # type: ignore[union-attr]
            assert check is not None and check.verdict == "verified", check
            (finding,) = _claims(check, "finding")
            assert finding.refs == [f"{ref}#7"]  # the parent's passing run, inherited
            # mod_0.py changed before: listed by the first submission, so not unreported
            assert not _claims(check, "status")


async def test_hostile_refs_paths_and_commands_are_unverified_and_nothing_stored_changes(
    tmp_path: Path,
) -> None:
    store = await Store.open(str(tmp_path / "t.db"))
    try:
        info = await store.create_thread(
            kind=Kind.WORKER,
            title="w",
            messages=[NewMessage.user("do"), NewMessage.assistant("ok")],
        )
        before = [m.model_dump_json() for m in await store.messages(info.id)]
        hostile = [
            "T-" + "z" * 100_000,
            "T-\x1b[31m#1",
            "#1",
            "T-0000#1-999999999999999999999999",
            f"{info.ref}#0",
            f"{info.ref}#-1",
            f"{info.ref}#3",
            "T-abcd#2",
            "",
        ]
        result = Result(
            status="done",
            summary="s",
            findings=[Finding(claim="c", evidence=hostile)] * 600,
            verification=[
                Verification(command="x" * 50_000, outcome="passed"),
                Verification(command="'unclosed && pytest", outcome="passed"),
                Verification(command=" ", outcome="?"),
            ],
            changes=[
                {"path": "../../etc/passwd", "action": "modified"},  # type: ignore[list-item]
                {"path": "/abs/x", "action": "added"},  # type: ignore[list-item]
                {"path": "a" * 10_000, "action": "deleted"},  # type: ignore[list-item]
            ],
        )
        check = await check_thread(store, info.id, result)
        assert check.verdict == "unverified"
        assert all(c.verdict == "unverified" for c in check.claims)
        assert len(_claims(check, "finding")) == 501  # 500 checked, the rest one claim
        assert all(len(c.reason) < 2_000 for c in check.claims)
        assert [m.model_dump_json() for m in await store.messages(info.id)] == before
    finally:
        await store.close()


async def test_a_check_that_fails_never_costs_the_worker_its_result(tmp_path: Path) -> None:
    from workers import build_tools, run_thread
    from workers.providers import FunctionModel, tool_response

    store = await Store.open(str(tmp_path / "t.db"))
    try:
        info = await store.create_thread(
            kind=Kind.WORKER,
            title="w",
            tools=["bash", "submit_result"],
            status=Status.QUEUED,
            messages=[NewMessage.user("do")],
        )
        model = FunctionModel(
            lambda r: tool_response(("submit_result", {"status": "done", "summary": "ok"}))
        )

        async def broken(result: Result, history: object) -> Check:
            raise RuntimeError("the check's own bug")

        outcome = await run_thread(
            store, info.id, model=model, tools=build_tools(["bash"]), workspace=tmp_path,
            check_result=broken,
        )  # fmt: skip
        stored = (await store.get_thread(info.id)).result
        assert outcome.status == Status.DONE and stored is not None and stored.summary == "ok"
        assert stored.check is not None and stored.check.verdict == "unverified"
        assert "the check could not run: RuntimeError: the check's own bug" in (
            stored.check.claims[0].reason
        )
    finally:
        await store.close()


def test_a_result_with_nothing_claimed_and_work_done_is_verified() -> None:
    check = check_result(Result(status="partial", summary="s"), thread_id="01abc", history=[])
    assert check == Check(verdict="verified", claims=[])


# ----------------------------------------------------------------- command lines


@pytest.mark.parametrize(
    ("ran_line", "claimed"),
    [
        ("python -m pytest -q", "pytest -q"),
        ("pytest -q", "python3 -m pytest -q"),
        ("cd pkg && pytest -q", "pytest -q"),
        ("pytest   -q ", " pytest -q"),
        (".venv/bin/pytest -q 2>&1", "pytest -q"),
        ("FOO=1 pytest '-q'", "pytest -q"),
        ("pytest -q > out.txt", "pytest -q"),
    ],
)
def test_honest_spellings_of_one_command_normalise_alike(ran_line: str, claimed: str) -> None:
    assert normal(ran_line) == normal(claimed)


def test_a_sub_commands_own_status_is_read_only_where_the_line_says_it() -> None:
    line = segments("pytest -q && ruff check . ; echo done")
    assert [s.text for s in line] == ["pytest -q", "ruff check .", "echo done"]
    assert block_status(line, 0, 1, 0) == "unknown"  # a ';' follows
    chained = segments("cd pkg && pytest -q && ruff check .")
    assert block_status(chained, 0, 1, 0) == "passed"
    assert block_status(chained, 1, 2, 1) == "failed"  # it ends the line
    assert block_status(chained, 0, 1, 1) == "unknown"  # pytest, or ruff after it, failed
    piped = segments("pytest -q | tail -5")
    assert block_status(piped, 0, 1, 1) == "unknown"  # the status is tail's
    assert block_status(segments("pytest -q"), 0, 1, None) == "failed"  # timed out


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        ("12 passed in 0.3s", "pass"),
        ("all tests pass", "pass"),
        ("0 failed", "pass"),
        ("no errors", "pass"),
        ("3 passed, 1 failed", "fail"),
        ("FAILED tests/test_x.py::test_a", "fail"),
        ("exit code 1", "fail"),
        ("printed 42", "unknown"),
    ],
)
def test_what_an_outcome_says_of_its_command(outcome: str, said: str) -> None:
    assert claimed_outcome(outcome) == said


@pytest.mark.parametrize("concurrent", [True, False])
async def test_a_change_seen_only_beside_another_call_is_not_taken_for_the_workers_own(
    tmp_path: Path, concurrent: bool
) -> None:
    """Workers sharing a directory: a command that ran while another worker wrote records that
    worker's change too (``Effects.concurrent``); it is neither this worker's last change nor
    an unreported change of its own."""

    def call(i: str, command: str) -> NewMessage:
        return NewMessage(
            role="assistant",
            content=[ToolUseBlock(id=i, name="bash", input={"command": command})],
        )

    def answer(i: str, code: int, changed: list[Change], shared: bool) -> NewMessage:
        effects = Effects(exit_code=code, changed=changed, concurrent=shared)
        block = ToolResultBlock(tool_use_id=i, content=f"[exit code: {code}]", effects=effects)
        return NewMessage(role="user", content=[block])

    theirs = [Change(path="theirs.py", action="modified")]
    store = await Store.open(str(tmp_path / "t.db"))
    try:
        info = await store.create_thread(
            kind=Kind.WORKER,
            title="w",
            messages=[
                NewMessage.user("do"),
                call("a", "pytest -q"),
                answer("a", 0, [], False),
                call("b", "ls"),
                answer("b", 0, theirs, concurrent),
            ],
        )
        result = Result(
            status="done",
            summary="s",
            verification=[Verification(command="pytest -q", outcome="passed")],
        )
        check = await check_thread(store, info.id, result)
    finally:
        await store.close()
    (v,) = _claims(check, "verification")
    unreported = _claims(check, "status")
    if concurrent:
        assert v.verdict == "verified" and not unreported
    else:
        assert v.verdict == "unverified" and "before a change at" in v.reason
        assert [c.reason for c in unreported] == [
            "unreported change: theirs.py modified, not listed in changes"
        ]


async def test_the_lead_report_marks_a_run_cited_for_the_opposite_claim_and_nothing_else(
    tmp_path: Path,
) -> None:
    from orchestrator.runtime.report_check import check_report

    def turn(i: str, command: str, code: int) -> list[NewMessage]:
        use = ToolUseBlock(id=i, name="bash", input={"command": command})
        out = ToolResultBlock(
            tool_use_id=i, content=f"[exit code: {code}]", effects=Effects(exit_code=code)
        )
        return [
            NewMessage(role="assistant", content=[use]),
            NewMessage(role="user", content=[out]),
        ]

    store = await Store.open(str(tmp_path / "t.db"))
    try:
        info = await store.create_thread(
            kind=Kind.WORKER,
            title="w",
            messages=[NewMessage.user("do"), *turn("a", "pytest", 1), *turn("b", "pytest", 0)],
        )
        w = info.ref
        report = (
            f"The tests pass ({w}#3). They failed before the fix ({w}#3), and pass now ({w}#5)."
            f" The call itself: {w}#4 passed. It fails ({w}#5)! See T-zzzzzzzz#2; the task {w}#1."
        )
        marked = await check_report(store, report)
    finally:
        await store.close()
    mark = " [does not support this: the cited run exited {}]"
    assert marked == (
        f"The tests pass ({w}#3{mark.format(1)}). They failed before the fix ({w}#3), and pass"
        f" now ({w}#5). The call itself: {w}#4 passed. It fails ({w}#5{mark.format(0)})!"
        f" See T-zzzzzzzz#2 [not found]; the task {w}#1."
    )
