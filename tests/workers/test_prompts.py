"""The worker's system prompt: its task context, and the workspace's own notes read as text."""

from __future__ import annotations

from pathlib import Path

from workers import project_notes, worker_system_prompt


def test_the_worker_prompt_names_its_thread_workspace_tools_and_how_to_report(
    tmp_path: Path,
) -> None:
    text = worker_system_prompt(thread_ref="T-abcd1234", workspace=tmp_path, tools=["bash", "grep"])
    assert "T-abcd1234" in text and str(tmp_path) in text
    assert "bash, grep" in text
    for word in ("submit_result", "evidence", "negative_results", "verification"):
        assert word in text


def test_agents_md_is_included_as_text_and_claude_md_is_the_fallback(tmp_path: Path) -> None:
    assert project_notes(tmp_path) == ""
    (tmp_path / "CLAUDE.md").write_text("use tabs {not a placeholder}")
    assert "use tabs {not a placeholder}" in project_notes(tmp_path)
    (tmp_path / "AGENTS.md").write_text("run `make check` before you finish")
    notes = project_notes(tmp_path)
    assert "make check" in notes and "use tabs" not in notes
    prompt = worker_system_prompt(thread_ref="T-x", workspace=tmp_path, tools=[])
    assert "make check" in prompt


def test_a_notes_file_that_is_a_symlink_out_of_the_workspace_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("TOP SECRET")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "AGENTS.md").symlink_to(outside)
    assert "TOP SECRET" not in project_notes(ws)


def test_huge_notes_are_truncated(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * 100_000)
    notes = project_notes(tmp_path)
    assert len(notes) < 25_000 and "[… truncated]" in notes


def test_openai_workers_get_short_tool_use_steps_stable_per_model(tmp_path: Path) -> None:
    def prompt(model: str, tool_calls: str = "native") -> str:
        return worker_system_prompt(
            thread_ref="T-ab12",
            workspace=tmp_path,
            tools=["bash"],
            model=model,
            tool_calls=tool_calls,
        )

    local = "openai:qwen@http://127.0.0.1:8081/v1"
    plain = worker_system_prompt(thread_ref="T-ab12", workspace=tmp_path, tools=["bash"])
    assert prompt("anthropic:claude-haiku-4-5") == plain  # other providers: not a byte changed
    assert "Tool use, step by step" not in plain
    native, constrained = prompt(local), prompt(local, "constrained")
    assert native.startswith(plain.rstrip("\n")) and "Tool use, step by step" in native
    assert "Tool names: bash, submit_result." in native
    assert "never guess them" in native and "[T-ab12#N]" in native
    # the first call, spelt out: the 0.5B model otherwise read the workspace's absolute path
    # (a directory) as a file, turn after turn (issue 26)
    first = '{"name": "bash", "arguments": {"command": "<the task\'s command>"}}'
    assert first in native and first in constrained
    # what "done" means for a fix: the 1.5B model otherwise submitted its diagnosis at once
    assert "done only when you have changed the code" in native
    assert 'Each reply is one JSON object: {"name": "<tool>"' in constrained
    assert prompt(local) == native and prompt(local, "auto") == native  # same model, same bytes
