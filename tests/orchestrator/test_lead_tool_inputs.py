"""The lead's ``dispatch`` takes tasks under the job file's rules (a task id names a worktree
branch; a title is one line): the same ``TaskInput`` MCP's ``dispatch`` and ``run_job`` take."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.jobs import MAX_TITLE_CHARS
from orchestrator.runtime.lead_tools import DispatchInput, ResumeInput


@pytest.mark.parametrize(
    ("task", "field"),
    [
        ({"id": "", "title": "t", "prompt": "p"}, "id"),
        ({"id": "a b/../c", "title": "t", "prompt": "p"}, "id"),
        ({"id": "-x", "title": "t", "prompt": "p"}, "id"),
        ({"id": "x" * 101, "title": "t", "prompt": "p"}, "id"),
        ({"title": "", "prompt": "p"}, "title"),
        ({"title": "t" * (MAX_TITLE_CHARS + 1), "prompt": "p"}, "title"),
        ({"title": "t\nJob: other", "prompt": "p"}, "title"),
        ({"title": "t\r", "prompt": "p"}, "title"),
        ({"title": "t\u2028u", "prompt": "p"}, "title"),
        ({"title": "t\x85u", "prompt": "p"}, "title"),
        ({"title": "t", "prompt": "p", "tools": ["bash", "rm_rf"]}, "tools"),
    ],
)
def test_a_task_the_job_file_would_refuse_is_refused(task: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        DispatchInput.model_validate({"tasks": [task]})
    assert [e["loc"][-1] for e in err.value.errors()] == [field]


def test_tasks_the_job_file_takes_are_taken_and_a_blank_message_is_not() -> None:
    ok = DispatchInput.model_validate(
        {"tasks": [{"id": "tok.v2_x-1", "title": "t" * MAX_TITLE_CHARS, "prompt": "p"}]}
    )
    assert ok.tasks[0].id == "tok.v2_x-1"
    assert (
        DispatchInput.model_validate({"tasks": [{"title": "t", "prompt": "p"}]}).tasks[0].id is None
    )
    with pytest.raises(ValidationError):
        ResumeInput.model_validate({"ref": "T-abcd", "message": " \n "})
