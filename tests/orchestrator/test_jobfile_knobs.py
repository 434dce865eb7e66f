"""The model-call knobs of a job file: ``max_output_tokens`` and ``request_timeout_s`` under
``[job]`` and ``[job.worker]``, their flags, their errors, and their trip through the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import load_job
from orchestrator.errors import UsageError
from orchestrator.jobs import for_one_run
from orchestrator.runtime.threads import create_lead, job_of
from store import Kind, NewMessage, Store
from tests.orchestrator.test_jobfile_places import error_of, write

HEAD = '[job]\nname = "j"\ngoal = "g"\nworkspace = "ws"\n'


def test_unset_knobs_pass_no_options_so_each_provider_keeps_its_default(tmp_path: Path) -> None:
    spec = load_job(write(tmp_path, HEAD))
    assert spec.max_output_tokens is None and spec.request_timeout_s is None
    assert spec.model_options(worker=False) == {}
    assert spec.model_options(worker=True) == {}


def test_job_knobs_reach_the_lead_and_by_default_the_workers(tmp_path: Path) -> None:
    spec = load_job(write(tmp_path, HEAD + "max_output_tokens = 2048\nrequest_timeout_s = 30\n"))
    assert spec.model_options(worker=False) == {"max_tokens": 2048, "timeout": 30.0}
    assert spec.model_options(worker=True) == {"max_tokens": 2048, "timeout": 30.0}
    assert isinstance(spec.request_timeout_s, float)  # an integer in TOML is fine


def test_worker_knobs_override_the_jobs_for_workers_only(tmp_path: Path) -> None:
    body = (
        HEAD + "max_output_tokens = 4096\nrequest_timeout_s = 120\n\n"
        "[job.worker]\nmax_output_tokens = 512\n"
    )
    spec = load_job(write(tmp_path, body))
    assert spec.model_options(worker=False) == {"max_tokens": 4096, "timeout": 120.0}
    # the timeout the worker section leaves unset is the job's
    assert spec.model_options(worker=True) == {"max_tokens": 512, "timeout": 120.0}


def test_worker_knobs_alone_leave_the_lead_on_the_providers_defaults(tmp_path: Path) -> None:
    body = HEAD + "\n[job.worker]\nrequest_timeout_s = 2.5\n"
    spec = load_job(write(tmp_path, body))
    assert spec.model_options(worker=False) == {}
    assert spec.model_options(worker=True) == {"timeout": 2.5}


def test_flags_override_the_job_values_but_not_the_worker_sections(tmp_path: Path) -> None:
    body = (
        HEAD + "max_output_tokens = 4096\nrequest_timeout_s = 120\n\n"
        "[job.worker]\nmax_output_tokens = 512\n"
    )
    spec = load_job(write(tmp_path, body), max_output_tokens=100, request_timeout_s=7.5)
    assert spec.model_options(worker=False) == {"max_tokens": 100, "timeout": 7.5}
    assert spec.model_options(worker=True) == {"max_tokens": 512, "timeout": 7.5}


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("max_output_tokens = 0", "greater than or equal to 1"),
        ("max_output_tokens = -5", "greater than or equal to 1"),
        ("max_output_tokens = 1.5", "valid integer"),
        ("max_output_tokens = true", "valid integer"),
        ('max_output_tokens = "8192"', "valid integer"),
        ("request_timeout_s = 0", "greater than 0"),
        ("request_timeout_s = -1.5", "greater than 0"),
        ("request_timeout_s = inf", "finite number"),
        ("request_timeout_s = nan", "finite number"),
        ('request_timeout_s = "30"', "valid number"),
        ("request_timeout_s = false", "valid number"),
    ],
)
def test_a_bad_job_knob_names_its_key_and_line(tmp_path: Path, line: str, why: str) -> None:
    msg = error_of(write(tmp_path, HEAD + "max_parallel = 2\n" + line + "\n"))
    key = line.split(" ", 1)[0]
    assert msg.startswith(f"{tmp_path / 'job.toml'}:6: job.{key}:"), msg
    assert why in msg, msg


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("max_output_tokens = 0", "greater than or equal to 1"),
        ("request_timeout_s = 0.0", "greater than 0"),
        ('request_timeout_s = "slow"', "valid number"),
    ],
)
def test_a_bad_worker_knob_names_its_key_and_line(tmp_path: Path, line: str, why: str) -> None:
    body = HEAD + "\n[job.worker]\nmax_turns = 5\n" + line + "\n"
    msg = error_of(write(tmp_path, body))
    key = line.split(" ", 1)[0]
    assert msg.startswith(f"{tmp_path / 'job.toml'}:8: job.worker.{key}:"), msg
    assert why in msg, msg


def test_a_misspelled_knob_is_an_unknown_key_with_a_suggestion(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, HEAD + "max_output_token = 100\n"))
    assert ":5: job.max_output_token: unknown key" in msg
    assert "did you mean 'max_output_tokens'" in msg
    msg = error_of(write(tmp_path, HEAD + "\n[job.worker]\nrequest_timeout = 3\n"))
    assert ":7: job.worker.request_timeout: unknown key" in msg
    assert "did you mean 'request_timeout_s'" in msg


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"max_output_tokens": 0}, "--max-output-tokens"),
        ({"request_timeout_s": 0.0}, "--request-timeout"),
        ({"request_timeout_s": float("inf")}, "--request-timeout"),
    ],
)
def test_a_bad_knob_flag_is_blamed_on_the_flag(
    tmp_path: Path, overrides: dict[str, object], flag: str
) -> None:
    msg = error_of(write(tmp_path, HEAD), **overrides)
    assert msg.startswith(f"{flag}:"), msg
    assert "job.toml" not in msg


async def test_the_knobs_come_back_from_the_lead_thread_for_resume_and_fork(
    tmp_path: Path,
) -> None:
    body = HEAD + "max_output_tokens = 1000\n\n[job.worker]\nrequest_timeout_s = 9\n"
    spec = load_job(write(tmp_path, body))
    store = await Store.open(str(tmp_path / "threads.db"))
    try:
        lead = await create_lead(store, spec)
        again = job_of(await store.get_thread(lead.id))
    finally:
        await store.close()
    assert again.model_options(worker=False) == {"max_tokens": 1000}
    assert again.model_options(worker=True) == {"max_tokens": 1000, "timeout": 9.0}


async def test_a_job_stored_before_the_knobs_existed_still_loads(tmp_path: Path) -> None:
    spec = load_job(write(tmp_path, HEAD))
    stored = spec.model_dump(mode="json")
    for key in ("max_output_tokens", "request_timeout_s"):
        del stored[key]
        del stored["worker"][key]
    store = await Store.open(str(tmp_path / "threads.db"))
    try:
        lead = await store.create_thread(
            kind=Kind.LEAD, title="old", task={"job": stored}, messages=[NewMessage.user("Job")]
        )
        old = job_of(await store.get_thread(lead.id))
    finally:
        await store.close()
    assert old.model_options(worker=False) == {} == old.model_options(worker=True)
    assert old.name == "j"


def test_one_runs_knobs_replace_the_jobs_and_the_workers_values(tmp_path: Path) -> None:
    """``resume``/``fork`` flags (``for_one_run``): for every thread of the run, the workers'
    own ``[job.worker]`` values included; unset ones change nothing; bad ones are refused."""
    worker = "\n[job.worker]\nmax_output_tokens = 321\nrequest_timeout_s = 40\n"
    spec = load_job(write(tmp_path, HEAD + "max_output_tokens = 2048\n" + worker))
    run = for_one_run(spec, max_output_tokens=77, request_timeout_s=None)
    assert run.model_options(worker=False) == {"max_tokens": 77}
    assert run.model_options(worker=True) == {"max_tokens": 77, "timeout": 40.0}
    assert for_one_run(spec) is spec and for_one_run(spec, request_timeout_s=None) is spec
    for knobs, said in (
        ({"request_timeout_s": 0}, "request_timeout_s: Input should be greater than 0"),
        ({"max_output_tokens": "many"}, "max_output_tokens: Input should be a valid integer"),
        ({"budget_tokens": 5}, "budget_tokens: Extra inputs are not permitted"),
    ):
        with pytest.raises(UsageError, match=said):
            for_one_run(spec, **knobs)
