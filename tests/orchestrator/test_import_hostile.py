"""Hostile input to ``import`` and to refs: every case is exit 2 with one line naming what and
where, never an internal error; line separators inside strings survive export → import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store import RefSyntaxError, ThreadRef
from tests.orchestrator.test_cli_helpers import assert_one_error_line, invoke, json_out

SEPARATORS = "a\u2028b\u2029c\u0085d\x1ce\x1df\x1eg\x0bh\x0ci"


def test_export_then_import_keeps_unicode_line_separators(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    source = tmp_path / "in.jsonl"
    source.write_text(
        json.dumps({"role": "user", "content": SEPARATORS}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    first = invoke("--json", "import", str(source), db=db)
    assert first.exit_code == 0, first.output
    ref = json_out(first)["ref"]
    exported = invoke("export", ref, db=db)
    assert exported.exit_code == 0
    assert "\u2028" in exported.stdout  # written raw: the case that broke str.splitlines()
    again = tmp_path / "again.jsonl"
    again.write_text(exported.stdout, encoding="utf-8")
    second = invoke("--json", "import", str(again), db=db)
    assert second.exit_code == 0, second.output
    shown = json_out(invoke("--json", "show", json_out(second)["ref"], db=db))
    assert shown["messages"][0]["content"][0]["text"] == SEPARATORS
    assert invoke("export", json_out(second)["ref"], db=db).stdout == exported.stdout


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        pytest.param('{"role": "user", "content": "\\ud800"}', "lone surrogate", id="surrogate"),
        pytest.param("[" * 5000 + "]" * 5000, "nested too deeply", id="deep-5000"),
        pytest.param(
            '{"role": "user", "content": [' * 40 + "]}" * 40, "nested deeper", id="deep-80"
        ),
        pytest.param(
            '{"role": "user", "content": [{"type": "text", "text": "x", "n": NaN}]}',
            "NaN is not JSON",
            id="nan",
        ),
        pytest.param('{"role": "user", "content": "x", "n": Infinity}', "Infinity", id="inf"),
        pytest.param(
            '{"role": "user", "content": "x", "n": ' + "9" * 5000 + "}", "digits", id="int"
        ),
    ],
)
def test_hostile_import_lines_are_exit_2_naming_the_line(
    tmp_path: Path, line: str, needle: str
) -> None:
    db = tmp_path / "t.db"
    source = tmp_path / "bad.jsonl"
    source.write_text('{"role": "user", "content": "fine"}\n' + line + "\n", encoding="utf-8")
    result = invoke("import", str(source), db=db)
    assert result.exit_code == 2, result.output
    assert_one_error_line(result.stderr, "bad.jsonl:2:", needle)
    assert "internal error" not in result.stderr
    assert json_out(invoke("--json", "ls", db=db)) == []  # nothing half-imported


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        pytest.param("T-abcd#\u0663", "ASCII digits", id="arabic-indic-digit"),
        pytest.param("T-abcd#1-\u0663", "ASCII digits", id="arabic-indic-end"),
        pytest.param("T-abcd#" + "9" * 5000, "at most 18 digits", id="5000-digits"),
        pytest.param("T-abcd#\uff13", "ASCII digits", id="fullwidth-digit"),
    ],
)
def test_refs_with_non_ascii_or_huge_numbers_are_syntax_errors(ref: str, needle: str) -> None:
    with pytest.raises(RefSyntaxError, match=needle):
        ThreadRef.parse(ref)


def test_a_huge_ref_on_the_command_line_is_one_short_line_exit_2(tmp_path: Path) -> None:
    result = invoke("show", "T-abcd#" + "9" * 5000, db=tmp_path / "t.db")
    assert result.exit_code == 2, result.output
    line = assert_one_error_line(result.stderr, "at most 18 digits")
    assert len(line) < 300
