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
from orchestrator.cli._cmd_run import exit_code
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


async def test_a_job_whose_every_worker_lost_the_provider_is_a_provider_failure(
    tmp_path: Path, api: FakeMessagesAPI, quick_models: Callable[[str], Model]
) -> None:
    # the lead's only request comes after both workers end; 8 faults are exactly the 4 attempts
    # of each worker (neither can get an answer while one is queued), so the lead then reports
    for kind in ("529", "drop", "500", "429", "529", "drop", "500", "529"):
        api.inject(kind, times=1)
    outcome, store = await _run(tmp_path, quick_models)
    try:
        assert await _half_written(store, outcome.job) == []
        lead = await store.get_thread(outcome.job[2:])
        assert lead.status == Status.DONE  # the lead itself finished its report
    finally:
        await store.close()
    assert api.pending_faults == 0
    assert outcome.report == "both workers reported"
    assert [w.status for w in outcome.workers] == ["failed", "failed"]
    assert outcome.status == Status.FAILED
    assert outcome.provider_failed and exit_code(outcome) == 4
    assert outcome.error
    assert outcome.error.startswith("every worker failed (2 of 2): model provider failed")


async def test_a_random_mix_of_provider_faults_completes_or_fails_cleanly(
    tmp_path: Path, api: FakeMessagesAPI, quick_models: Callable[[str], Model]
) -> None:
    run_seed = seed()
    rng = random.Random(run_seed)
    seen: Counter[str] = Counter()
    results = []
    for trial in range(6):
        api.clear_faults()
        # a thread retries through up to 3 faults in a row (max_retries=3), but the two workers
        # share the fault queue, so a trial's bursts can still take both of them down (then the
        # lead reports, and the job is a provider failure all the same); in trial 5 the
        # provider stays down (each worker gives up after 4 attempts, then so does the lead)
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
        assert not problems, (run_seed, trial, problems)
        assert integrity(root / "threads.db") == "ok"
        if outcome.status == Status.DONE:
            assert outcome.report == "both workers reported"
            results.append("completed")
        else:
            # a provider failure: SPEC exit 4, with a message that says so
            assert outcome.provider_failed, (run_seed, trial, outcome.status, outcome.error)
            assert exit_code(outcome) == 4
            assert outcome.error and "model provider failed" in outcome.error
            assert "sk-ant-fault-suite-key" not in outcome.error
            results.append("provider failure")
    print(
        "\nprovider faults:",
        json.dumps({"seed": run_seed, "injected": seen, "jobs": Counter(results)}),
    )
    assert results[-1] == "provider failure"
    assert "completed" in results
