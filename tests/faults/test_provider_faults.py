"""Provider faults mixed into a job: 429, 529, 500, dropped connections and responses slower
than the client's timeout, on the real Anthropic SDK against the loopback fake Messages API.
(The command line's exit 4 and its one-line message for a provider that stays down are proved
end to end in ``tests/e2e/test_crash_and_codes.py``.)

The job either completes, or ends as a provider failure (the CLI's exit 4) with a clear message;
either way nothing is half-written: every tool call is answered, every thread is terminal, and
the database verifies.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Orchestrator, parse_job
from orchestrator._cmd_run import exit_code
from store import TERMINAL_STATUSES, Status, Store
from tests.fakes.messages_api import FakeMessagesAPI, scripted_responder
from tests.faults.conftest import integrity, seed, unpaired
from workers import Model, make_model

KINDS = ("429", "529", "500", "drop", "slow")
SCRIPT = {
    "rules": [
        {"match": "Job: flaky", "turns": [{"text": "both workers reported"}]},
        {
            "match": "(?m)^Task [ab]:",
            "turns": [
                {"tool_calls": [{"name": "bash", "input": {"command": "echo x >> out.log"}}]},
                {
                    "tool_calls": [
                        {"name": "submit_result", "input": {"status": "done", "summary": "ok"}}
                    ]
                },
            ],
        },
    ]
}
JOB = """
[job]
name = "flaky"
goal = "finish despite the provider"
workspace = "ws"
model = "anthropic:claude-sonnet-4-5"
max_parallel = 2
[[task]]
id = "a"
title = "A"
prompt = "go"
[[task]]
id = "b"
title = "B"
prompt = "go"
"""


@pytest.fixture
def quick_models(api: FakeMessagesAPI) -> Callable[[str], Model]:
    """The job's models through the runtime's model-factory seam: the real provider, pointed at
    the fake API, with a short timeout and quick backoff."""

    def quick(spec: str) -> Model:
        return make_model(
            spec,
            api_key="sk-ant-fault-suite-key-000",
            base_url=api.base_url,
            timeout=0.5,
            max_retries=3,
            backoff_base=0.01,
            backoff_cap=0.05,
            retry_after_cap=0.05,
        )

    return quick


@pytest.fixture
def api() -> Any:
    with FakeMessagesAPI() as fake:
        fake.respond_with(scripted_responder(SCRIPT))
        yield fake


async def _run(tmp_path: Path, models: Callable[[str], Model]) -> tuple[Any, Store]:
    (tmp_path / "ws").mkdir(exist_ok=True)
    spec = parse_job(JOB, name="flaky.toml", base_dir=tmp_path)
    store = await Store.open(str(tmp_path / "threads.db"))
    outcome = await Orchestrator(store, model_factory=models).run_job(spec)
    return outcome, store


async def _half_written(store: Store, job: str) -> list[str]:
    bad = await unpaired(store, job[2:])
    for t in await store.job_tree(job[2:]):
        if t.status not in TERMINAL_STATUSES:
            bad.append(f"{t.ref} left {t.status}")
    return bad


async def test_a_random_mix_of_provider_faults_completes_or_fails_cleanly(
    tmp_path: Path, api: FakeMessagesAPI, quick_models: Callable[[str], Model]
) -> None:
    rng = random.Random(seed())
    seen: Counter[str] = Counter()
    results = []
    for trial in range(6):
        api.clear_faults()
        # up to 3 faults in a row are retried through (max_retries=3); in trial 5 the provider
        # stays down (every request of every thread fails: each worker gives up after 4
        # attempts, then so does the lead), which must end the job as a provider failure
        if trial == 5:
            for kind in rng.choices(KINDS[:4], k=40):  # no "slow": it would only add time
                seen[kind] += 1
                api.inject(kind, times=1)
        else:
            burst = rng.randint(1, 3)
            for _ in range(rng.randint(1, 3)):
                for kind in rng.choices(KINDS, k=rng.randint(1, burst)):
                    seen[kind] += 1
                    api.inject(kind, times=1, delay_s=0.7)
        root = tmp_path / f"trial-{trial}"
        root.mkdir()
        outcome, store = await _run(root, quick_models)
        try:
            problems = await _half_written(store, outcome.job)
        finally:
            await store.close()
        assert not problems, (trial, problems)
        assert integrity(root / "threads.db") == "ok"
        if outcome.status == Status.DONE:
            assert outcome.report == "both workers reported"
            results.append("completed")
        else:
            # a provider failure: SPEC exit 4, with a message that says so
            assert outcome.provider_failed, (outcome.status, outcome.error)
            assert exit_code(outcome) == 4
            assert outcome.error and "model provider failed" in outcome.error
            assert "sk-ant-fault-suite-key" not in outcome.error
            results.append("provider failure")
    print("\nprovider faults:", json.dumps({"injected": seen, "jobs": Counter(results)}))
    assert results[-1] == "provider failure"
    assert "completed" in results
