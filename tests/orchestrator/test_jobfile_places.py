"""Job-file errors name the place: the right line, the flag that was wrong, the right reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator import JobFileError, load_job

HEAD = '[job]\nname = "j"\ngoal = "g"\n'


def write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "ws").mkdir(exist_ok=True)
    path = tmp_path / "job.toml"
    path.write_text(body, encoding="utf-8")
    return path


def error_of(path: Path, **overrides: object) -> str:
    with pytest.raises(JobFileError) as info:
        load_job(path, **overrides)
    return str(info.value)


def test_a_workspace_that_is_a_file_is_reported_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    msg = error_of(write(tmp_path, HEAD + 'workspace = "notes.txt"\n'))
    assert msg.startswith(f"{tmp_path / 'job.toml'}:4: job.workspace:")
    assert "is a file, not a directory" in msg and "does not exist" not in msg


def test_a_missing_workspace_is_reported_as_missing(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, HEAD + 'workspace = "nope"\n'))
    assert ":4: job.workspace:" in msg and "does not exist" in msg


def test_a_single_bracket_task_table_is_blamed_on_its_line(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, HEAD + 'workspace = "ws"\n\n[task]\nid = "a"\n'))
    assert ":6:" in msg and "[[task]]" in msg


def test_a_bad_model_spec_names_its_line(tmp_path: Path) -> None:
    body = HEAD + 'workspace = "ws"\nmodel = "gpt4"\n'
    msg = error_of(write(tmp_path, body))
    assert ":5: job.model:" in msg and "gpt4" in msg


def test_a_bad_task_model_spec_names_its_line(tmp_path: Path) -> None:
    body = HEAD + 'workspace = "ws"\n\n[[task]]\nid = "a"\ntitle = "t"\nprompt = "p"\nmodel = "x"\n'
    msg = error_of(write(tmp_path, body))
    assert ":10: task[0].model:" in msg


def test_line_numbers_do_not_drift_after_a_unicode_line_separator(tmp_path: Path) -> None:
    body = '[job]\nname = "a"\ngoal = "g\u2028h\u2029i"\nworkspace = "ws"\nmax_parallel = 0\n'
    msg = error_of(write(tmp_path, body))
    assert ":5: job.max_parallel:" in msg


def test_a_bad_flag_value_is_blamed_on_the_flag_not_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + 'workspace = "ws"\n')
    msg = error_of(path, max_parallel=0)
    assert msg.startswith("--max-parallel:"), msg
    assert "job.toml:1" not in msg
    msg = error_of(path, worker_model="openai:x")
    assert msg.startswith("--worker-model:"), msg


def test_a_relative_scripted_flag_resolves_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    path = write(jobs, HEAD + 'workspace = "ws"\nmodel = "scripted:in-job-dir.json"\n')
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    spec = load_job(path, model="scripted:mine.json")
    assert spec.lead_model == f"scripted:{here / 'mine.json'}"
    # the file's own relative spec still resolves against the file's folder
    assert load_job(path).lead_model == f"scripted:{jobs / 'in-job-dir.json'}"
    assert os.getcwd() == str(here)
