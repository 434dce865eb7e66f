"""Orchestrator fixtures: ``sample``, a private copy of the CLI tests' sample database (a job,
its worker, a fork and an unrelated thread: ``test_cli_helpers.Sample``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.orchestrator.test_cli_helpers import Sample, sample_copy


@pytest.fixture
def sample(tmp_path: Path) -> Sample:
    return sample_copy(tmp_path)
