"""Live progress and the final report on a terminal (issue 10 item 12): a real ``rich`` Console
writing to a StringIO at a fixed width, fed real ``LoopEvent``s (and, once, a real run of the
loop), with a clock the test moves instead of sleeping."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli._cmd_run import demo_steps, next_steps, render
from orchestrator.cli._progress import Progress, tool_preview
from orchestrator.cli._render import Printer, cell_width
from orchestrator.outcomes import JobOutcome, WorkerSummary
from store import Kind, NewMessage, Status, Store, Usage, format_ref, new_id
from workers import LoopEvent, ModelRequest, ModelResponse, build_tools, run_thread
from workers.providers import FunctionModel, tool_response
from workers.providers._pricing import cost_usd

LONG_TITLE = "Fix the failing tokenizer test " + "and explain the root cause " * 11
assert len(LONG_TITLE) >= 300
ERASE = re.compile(r"(?:\r|\x1b\[2K|\x1b\[1A)+")  # how rich's Live moves back over a frame
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def console(width: int, buf: io.StringIO) -> Console:
    return Console(file=buf, width=width, height=40, force_terminal=True, color_system="standard")


def frames(out: str) -> list[list[str]]:
    """Each frame the live view drew, as plain lines."""
    drawn = [CSI.sub("", f) for f in ERASE.split(out)]
    return [f.rstrip("\n").split("\n") for f in drawn if f.strip()]


def line_of(frame: list[str], ref: str) -> str:
    hits = [line for line in frame if ref in line]
    assert len(hits) == 1, frame
    return hits[0]


def ev(tid: str, kind: str, **kw: object) -> LoopEvent:
    return LoopEvent(tid, kind, **kw)  # type: ignore[arg-type]


def job_events(lead: str, worker: str, done: str) -> list[LoopEvent]:
    return [
        ev(lead, "started", thread_kind="lead", title="demo-fix-sample", status=Status.RUNNING),
        ev(
            lead,
            "tool",
            thread_kind="lead",
            turn=1,
            usage=Usage(input_tokens=5000, output_tokens=90),
            tool="dispatch",
            tool_id="toolu_1",
            tool_input={"tasks": [{"id": "tokenizer"}, {"id": "parser"}]},
        ),
        ev(worker, "started", thread_kind="worker", title=LONG_TITLE, status=Status.RUNNING),
        ev(
            worker,
            "tool",
            thread_kind="worker",
            title=LONG_TITLE,
            turn=2,
            usage=Usage(input_tokens=1200, output_tokens=34),
            model="anthropic:claude-sonnet-4-5",
            cost_usd=0.0123,
            tool="bash",
            tool_id="toolu_2",
            tool_input={"command": "python -m pytest -q tests/test_tokenizer.py"},
        ),
        ev(done, "started", thread_kind="worker", title="Fix the parser", status=Status.RUNNING),
        ev(
            done,
            "finished",
            thread_kind="worker",
            title="Fix the parser",
            turn=4,
            usage=Usage(input_tokens=900),
            status=Status.DONE,
        ),
    ]


def drive(width: int, clock: Clock, events: list[LoopEvent], *, tick: float = 0) -> str:
    return drive_twice(width, clock, events, tick=tick)[1]


def drive_twice(
    width: int, clock: Clock, events: list[LoopEvent], *, tick: float = 0
) -> tuple[str, str]:
    """What was drawn once every event was in, and by the end, ``tick`` seconds later."""
    buf = io.StringIO()
    with Progress(console=console(width, buf), clock=clock, auto_refresh=False) as progress:
        for event in events:
            progress.on_event(event)
        progress.refresh()
        first = buf.getvalue()
        clock.now += tick
        progress.refresh()
    return first, buf.getvalue()


@pytest.mark.parametrize("width", [80, 200])
def test_every_thread_is_one_line_with_its_whole_ref_and_a_cut_title(width: int) -> None:
    lead, worker, done = new_id(), new_id(), new_id()
    last = frames(drive(width, Clock(), job_events(lead, worker, done)))[-1]
    # a header, one line per thread, the summary: nothing wrapped into fragment rows
    assert len(last) == 5, last
    assert all(cell_width(line) <= width for line in last), last
    for tid in (lead, worker, done):
        assert re.search(rf"(?<![\w-]){format_ref(tid)}(?![\w#-])", line_of(last, format_ref(tid)))
    row = line_of(last, format_ref(worker))
    assert "Fix the" in row and "…" in row and LONG_TITLE not in row
    assert "bash: python -m" in row


def test_elapsed_and_the_spinner_move_between_renders_without_an_event() -> None:
    lead, worker, done = new_id(), new_id(), new_id()
    clock = Clock()
    first, last = drive_twice(80, clock, job_events(lead, worker, done), tick=65.2)
    drawn = [frames(first)[-1], frames(last)[-1]]
    before, after = line_of(drawn[0], format_ref(worker)), line_of(drawn[1], format_ref(worker))
    assert before.split()[-1] == "0s" and after.split()[-1] == "1m05s", (before, after)
    assert before[0] != after[0]  # the spinner turned
    # a finished thread's clock stopped when it ended
    assert line_of(drawn[-1], format_ref(done)).split()[-1] == "0s"
    assert drawn[-1][-1].endswith("1m05s")  # the job's elapsed, on the summary line


def test_the_running_tool_shows_with_a_preview_until_it_returns() -> None:
    clock, tid = Clock(), new_id()
    events = [
        ev(tid, "started", thread_kind="worker", title="parser", status=Status.RUNNING),
        ev(tid, "tool", tool="read_file", tool_id="a", tool_input={"path": "calc/parser.py"}),
    ]
    assert "read_file: calc/parser.py" in line_of(
        frames(drive(200, clock, events))[-1], format_ref(tid)
    )
    events.append(ev(tid, "tool_done", tool="read_file", tool_id="a"))
    row = line_of(frames(drive(200, clock, events))[-1], format_ref(tid))
    assert "read_file" not in row and "thinking" in row


def test_tool_previews_say_what_each_tool_runs() -> None:
    assert tool_preview("bash", {"command": "python -m pytest -q\n  tests/x.py"}) == (
        "bash: python -m pytest -q tests/x.py"
    )
    assert tool_preview("edit_file", {"path": "a.py", "old": "x", "new": "y"}) == "edit_file: a.py"
    assert tool_preview("dispatch", {"tasks": [{"id": "a"}, {"title": "B"}]}) == (
        "dispatch: 2 tasks: a, B"
    )
    hostile = tool_preview("bash", {"command": "echo \x1b]0;pwned\x07 \u202eok"})
    assert "\x1b" not in hostile and "\x07" not in hostile and "^[]0;pwned^G" in hostile
    assert len(tool_preview("bash", {"command": "x" * 500}, 40)) == 40


def test_cost_shows_per_thread_and_in_the_summary() -> None:
    lead, worker, done = new_id(), new_id(), new_id()
    wide = frames(drive(200, Clock(), job_events(lead, worker, done)))[-1]
    assert "$0.0123" in line_of(wide, format_ref(worker))
    assert " $0 " in line_of(wide, format_ref(lead)) + " "  # scripted and unpriced: $0
    narrow = frames(drive(80, Clock(), job_events(lead, worker, done)))[-1]
    # the lead is no worker: it is told apart, not counted among the running workers
    assert "lead running · workers: 1 running, 1 done |" in narrow[-1], narrow[-1]
    assert "$0.0123" in narrow[-1] and "7.2k tokens" in narrow[-1]


def test_hostile_titles_and_tool_inputs_reach_the_terminal_visibly() -> None:
    tid = new_id()
    events = [
        ev(tid, "started", thread_kind="worker", title="t \x1b]0;pwned\x07\u202e", status=None),
        ev(tid, "tool", tool="bash", tool_id="a", tool_input={"command": "x\r\x1b[2Kfake"}),
    ]
    out = drive(200, Clock(), events)
    without_rich = CSI.sub("", out).replace("\r", "")
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", without_rich), out
    assert "^[]0;pwned^G" in without_rich and "x^M^[[2Kfake" in without_rich


def test_off_a_terminal_each_start_and_end_is_one_plain_line() -> None:
    lead, worker, done = new_id(), new_id(), new_id()
    buf = io.StringIO()
    with Progress(stream=buf) as progress:
        for event in job_events(lead, worker, done):
            progress.on_event(event)
    lines = buf.getvalue().splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["started", format_ref(worker)],
        ["started", format_ref(done)],
        ["done", format_ref(done)],
    ]
    assert "\x1b" not in buf.getvalue()


class PricedModel(FunctionModel):
    """The function double, priced as Sonnet: what the loop reports as running cost."""

    @property
    def spec(self) -> str:
        return "anthropic:claude-sonnet-4-5"

    def cost_usd(self, usage: Usage) -> float:
        return cost_usd("claude-sonnet-4-5", usage)


async def test_a_real_run_reports_its_tool_call_and_running_cost(tmp_path: Path) -> None:
    (tmp_path / "calc").mkdir()
    (tmp_path / "calc" / "parser.py").write_text("x = 1\n")
    store = await Store.open(str(tmp_path / "t.db"))
    usage = Usage(input_tokens=100_000, output_tokens=2_000)

    def reply(request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:
            turn = tool_response(("read_file", {"path": "calc/parser.py"}))
        else:  # a worker ends with its result (a plain-text end may be nudged to submit)
            turn = tool_response(("submit_result", {"status": "done", "summary": "read it"}))
        return ModelResponse(turn.content, turn.stop_reason, usage, "claude-sonnet-4-5")

    seen: list[LoopEvent] = []
    buf = io.StringIO()
    clock = Clock()
    try:
        info = await store.create_thread(
            kind=Kind.WORKER,
            title="read the parser",
            system_prompt="s",
            tools=["read_file", "submit_result"],
            model="anthropic:claude-sonnet-4-5",
            status=Status.QUEUED,
            messages=[NewMessage.user("go")],
        )
        with Progress(console=console(200, buf), clock=clock, auto_refresh=False) as progress:

            def sink(event: LoopEvent) -> None:
                seen.append(event)
                progress.on_event(event)
                if event.kind == "tool":
                    progress.refresh()  # what the screen shows while the call runs

            await run_thread(
                store,
                info.id,
                model=PricedModel(reply),
                tools=build_tools(["read_file"]),
                workspace=tmp_path,
                on_event=sink,
            )
    finally:
        await store.close()
    assert [e.kind for e in seen] == ["started", "turn", "tool", "tool_done", "turn", "finished"]
    one_turn = 0.3 + 0.03  # 100k input at $3/M, 2k output at $15/M
    assert seen[2].tool_input == {"path": "calc/parser.py"}
    assert seen[-1].cost_usd == pytest.approx(2 * one_turn)
    assert {e.model for e in seen} == {"anthropic:claude-sonnet-4-5"}
    drawn = frames(buf.getvalue())
    during = next(f for f in drawn if "read_file:" in "".join(f))
    assert "read_file: calc/parser.py" in line_of(during, info.ref)
    assert "$0.3300" in line_of(during, info.ref)
    assert "$0.66" in line_of(drawn[-1], info.ref)


REPORT = (
    "# demo: report\n\nAll three tests pass; see T-0123456789abcdefghijklmnop#3.\n\n"
    "| task | fix |\n| --- | --- |\n| parser | `%` binds like `*` |\n\n- one\n- two\n"
)


def outcome(report: str, summary: str = "fixed") -> JobOutcome:
    return JobOutcome(
        job="T-lead",
        lead="T-lead",
        ref="T-lead",
        status=Status.DONE,
        report=report,
        workers=[WorkerSummary("T-w1", "parser", "done", summary)],
        usage=Usage(),
    )


def test_a_piped_report_is_the_exact_text() -> None:
    buf = io.StringIO()
    render(outcome(REPORT))(Printer(buf))
    assert buf.getvalue().startswith(REPORT.rstrip() + "\n\nworkers:\n")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_report_is_rendered_markdown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    buf = _Terminal()
    report = REPORT + "\nsee [the docs](https://example.com) \x1b]0;x\x07\n"
    render(outcome(report, summary="the root cause " * 10))(Printer(buf))
    out = buf.getvalue()
    plain = CSI.sub("", out)
    lines = [line.rstrip() for line in plain.splitlines()]
    assert "demo: report" in lines and not any(line.startswith("#") for line in lines)
    assert "| --- |" not in plain and "parser" in plain and "`" not in plain
    assert "T-0123456789abcdefghijklmnop#3" in plain
    assert "\x1b[1" in out  # styled
    assert "\x1b]8" not in out and "https://example.com" in plain  # a link shows its address
    assert "^[]0;x^G" in plain and "\x07" not in out
    assert "workers:" in plain
    worker = next(line for line in lines if "T-w1" in line)  # one line, cut to the width
    assert worker.endswith("…") and cell_width(worker) == 80, worker


def test_on_a_narrow_terminal_the_done_line_breaks_before_the_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ref = "T-01m8yeth763v2k2q2rbed0stx6"
    done = JobOutcome(
        job=ref, lead=ref, ref=ref, status=Status.DONE, report="ok", workers=[], usage=Usage()
    )
    for columns, broken in (("80", True), ("200", False)):
        monkeypatch.setenv("COLUMNS", columns)
        buf = _Terminal()
        render(done)(Printer(buf))
        lines = [line.rstrip() for line in CSI.sub("", buf.getvalue()).splitlines()]
        head = next(line for line in lines if line.startswith("done: "))
        assert head.startswith(f"done: {ref}  (job {ref})")
        assert ("tokens:" not in head) is broken, lines
        if broken:
            assert lines[lines.index(head) + 1].startswith("  tokens: 0 in, 0 out")
        assert all(cell_width(line) <= int(columns) for line in lines), lines


def _outcome(*workers: WorkerSummary, status: Status = Status.DONE) -> JobOutcome:
    return JobOutcome(
        job="T-lead",
        lead="T-lead",
        ref="T-lead",
        status=status,
        report="",
        workers=list(workers),
        usage=Usage(),
    )


def test_the_hints_fit_how_the_job_ended_and_are_never_the_demos() -> None:
    failed = WorkerSummary("T-w1", "tokenizer", "failed", "model provider failed")
    done = WorkerSummary("T-w2", "parser", "done", "fixed")
    stopped = WorkerSummary("T-w3", "evaluator", "interrupted", "interrupted")
    for steps in (
        next_steps(_outcome(failed, done)),
        next_steps(_outcome(failed, status=Status.FAILED)),
        next_steps(_outcome(done)),
    ):
        joined = "\n".join(steps)
        assert "regression test" not in joined and "Try a different fix" not in joined
        assert "threadloom tree T-lead" in joined
    # a worker that failed: look at why, then resume it with a message of the user's own
    mixed = next_steps(_outcome(failed, done))
    assert any(
        s.startswith("  threadloom show T-w1 --tools ") and "why tokenizer ended failed" in s
        for s in mixed
    )
    assert any(s.startswith('  threadloom resume T-w1 "<what to try next>"') for s in mixed)
    assert not any("fork" in s for s in mixed)
    # all done: look into one, ask about it
    fine = next_steps(_outcome(done))
    assert any(s.startswith('  threadloom ask T-w2 "<your question>"') for s in fine)
    assert not any("resume" in s for s in fine)
    # a job stopped before its end runs on from its lead; a stopped worker without a message
    halted = next_steps(_outcome(done, stopped, status=Status.INTERRUPTED))
    assert any(s.startswith("  threadloom resume T-lead ") for s in halted)
    assert any(s.startswith("  threadloom resume T-w3 ") and '"' not in s for s in halted)


def test_the_demos_hints_are_its_walkthrough_only_when_it_ended_as_it_should() -> None:
    tokenizer = WorkerSummary("T-w1", "tokenizer", "done", "fixed")
    steps = demo_steps(_outcome(tokenizer))
    assert '  threadloom fork T-w1#5 "Try fixing it in the parser instead"' in steps
    assert '  threadloom resume T-w1 "Also add a regression test"' in steps
    assert "  threadloom tree T-lead" in steps
    failed = WorkerSummary("T-w1", "tokenizer", "failed", "no rule matches")
    assert demo_steps(_outcome(failed, status=Status.FAILED)) == []
