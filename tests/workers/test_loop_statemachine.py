"""A hypothesis state machine over the loop, on the real Anthropic SDK and the fake Messages API.

Turns with zero to three (parallel) tool calls, crashes at any step (a stored turn whose calls were
never answered; a run cancelled mid-flight), resumes with and without a message, and forks at any
valid point — and through all of it the fake server, which validates every request the way the
real API does, rejects nothing.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from store import Kind, NewMessage, Status, Store, ToolResultBlock, ToolUseBlock
from tests.fakes.messages_api import FakeMessagesAPI
from workers import Limits, LoopConfig, build_tools, run_thread
from workers.providers import AnthropicModel

TOOLS = ["list_files", "read_file"]


class LoopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text("alpha\n")
        self.ws = root / "ws"
        self.api = FakeMessagesAPI().__enter__()
        self.replies: list[dict[str, Any]] = []
        self.api.respond_with(self._respond)
        self.loop = asyncio.new_event_loop()
        self.store: Store = self.loop.run_until_complete(Store.open(str(root / "t.db")))
        self.model = AnthropicModel(
            "claude-sonnet-4-5", api_key="test", base_url=self.api.base_url, max_retries=0
        )
        info = self.loop.run_until_complete(
            self.store.create_thread(
                kind=Kind.WORKER,
                system_prompt="worker",
                tools=TOOLS,
                status=Status.QUEUED,
                messages=[NewMessage.user("start")],
            )
        )
        self.threads = [info.id]
        self.crashes = 0

    def _respond(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.replies.pop(0) if self.replies else {"content": "ok"}

    def _run(self, tid: str, *, message: str | None = None, turns: int = 1) -> None:
        self.loop.run_until_complete(
            run_thread(
                self.store,
                tid,
                model=self.model,
                tools=build_tools(TOOLS),
                workspace=self.ws,
                config=LoopConfig(limits=Limits(turns=turns)),
                message=message,
            )
        )

    @staticmethod
    def _reply(n_tools: int, text: bool) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": "thinking aloud"}] if text else []
        for i in range(n_tools):
            tool = ("list_files", {}) if i % 2 == 0 else ("read_file", {"path": "a.txt"})
            content.append({"type": "tool_use", "name": tool[0], "input": tool[1]})
        return {"content": content or "done"}

    @rule(
        which=st.integers(min_value=0, max_value=50),
        n_tools=st.integers(min_value=0, max_value=3),
        text=st.booleans(),
        message=st.one_of(st.none(), st.text("abc xyz", min_size=1, max_size=12)),
    )
    def turn(self, which: int, n_tools: int, text: bool, message: str | None) -> None:
        tid = self.threads[which % len(self.threads)]
        self.replies = [self._reply(n_tools, text)]
        self._run(tid, message=message)

    @rule(
        which=st.integers(min_value=0, max_value=50), n_tools=st.integers(min_value=1, max_value=3)
    )
    def crash_after_storing_a_turn(self, which: int, n_tools: int) -> None:
        """The process died after the assistant turn was committed, before its tools ran."""
        tid = self.threads[which % len(self.threads)]
        info = self.loop.run_until_complete(self.store.get_thread(tid))
        last = self.loop.run_until_complete(self.store.messages(tid, start=info.head_seq))
        if last and last[-1].role == "assistant":
            return  # a thread awaiting its user turn cannot take another assistant turn
        self.crashes += 1
        uses = [
            ToolUseBlock(id=f"toolu_crash_{self.crashes}_{i}", name="list_files", input={})
            for i in range(n_tools)
        ]
        self.loop.run_until_complete(
            self.store.append(tid, NewMessage(role="assistant", content=uses))
        )

    @rule(
        which=st.integers(min_value=0, max_value=50),
        steps=st.integers(min_value=0, max_value=30),
        again=st.one_of(st.none(), st.integers(min_value=0, max_value=40)),
    )
    def cancel_mid_run(self, which: int, steps: int, again: int | None) -> None:
        """Cancel a run once, or twice (the second ``again`` steps after the first)."""
        tid = self.threads[which % len(self.threads)]
        self.replies = [self._reply(2, True), self._reply(1, False)]

        async def go() -> None:
            task = asyncio.create_task(
                run_thread(
                    self.store,
                    tid,
                    model=self.model,
                    tools=build_tools(TOOLS),
                    workspace=self.ws,
                    config=LoopConfig(limits=Limits(turns=3)),
                )
            )
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            if again is not None:
                for _ in range(again):
                    await asyncio.sleep(0)
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

        self.loop.run_until_complete(go())
        info = self.loop.run_until_complete(self.store.get_thread(tid))
        assert info.status != Status.RUNNING and info.lease_owner is None, info.status

    @precondition(lambda self: len(self.threads) < 6)
    @rule(which=st.integers(min_value=0, max_value=50), at=st.integers(min_value=1, max_value=200))
    def fork(self, which: int, at: int) -> None:
        tid = self.threads[which % len(self.threads)]
        msgs = self.loop.run_until_complete(self.store.messages(tid))
        valid = [m.seq for m in msgs if not any(isinstance(b, ToolUseBlock) for b in m.content)]
        point = valid[at % len(valid)]
        fork = self.loop.run_until_complete(
            self.store.fork(tid, at=point, messages=[NewMessage.user("go on differently")])
        )
        self.threads.append(fork.id)

    @invariant()
    def every_tool_call_is_answered_at_most_once(self) -> None:
        for tid in self.threads:
            msgs = self.loop.run_until_complete(self.store.messages(tid))
            answers = [
                b.tool_use_id for m in msgs for b in m.content if isinstance(b, ToolResultBlock)
            ]
            assert len(answers) == len(set(answers)), answers

    @invariant()
    def the_api_rejected_nothing(self) -> None:
        assert not self.api.rejections, self.api.rejections

    def teardown(self) -> None:
        self.loop.run_until_complete(self.model.aclose())
        self.loop.run_until_complete(self.store.close())
        self.loop.close()
        self.api.__exit__(None, None, None)
        self.tmp.cleanup()


LoopMachine.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_loop_state_machine = LoopMachine.TestCase
