"""``search`` marks its matches so they cannot be taken for the text: the store says where
each match is (offsets), a terminal styles them, piped output marks them ⟦so⟧ (a ⟦ of the
text itself spelt ``\\u27e6``), and ``--json`` carries the offsets beside the plain snippet."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests._terminal import run_on_terminal
from tests.orchestrator.test_cli_helpers import run_cli

TEXT = "emit _BINARY[op] then ⟦op⟧ when [x] holds"


def _db(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "threads.db"
    lines = [{"role": "user", "content": TEXT}, {"role": "assistant", "content": "ok"}]
    made = run_cli(
        "--json", "import", "-", db=db, stdin="".join(json.dumps(x) + "\n" for x in lines)
    )
    assert made.returncode == 0, made.stderr
    return db, json.loads(made.stdout)["ref"]


def test_piped_search_marks_matches_apart_from_the_texts_own_brackets(tmp_path: Path) -> None:
    db, ref = _db(tmp_path)
    done = run_cli("search", "op", db=db)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith(f"{ref}#1  user")
    assert line.endswith("emit _BINARY[⟦op⟧] then \\u27e6⟦op⟧\\u27e7 when [x] holds")


def test_search_json_keeps_the_snippet_as_written_and_adds_the_offsets(tmp_path: Path) -> None:
    db, ref = _db(tmp_path)
    [hit] = json.loads(run_cli("--json", "search", "op", db=db).stdout)
    assert {"ref", "thread", "seq", "role", "snippet"} <= hit.keys()  # SPEC's keys, unchanged
    assert hit["ref"] == f"{ref}#1" and hit["snippet"] == TEXT
    assert [hit["snippet"][a:b] for a, b in hit["marks"]] == ["op", "op"]
    assert [hit["snippet"][a - 1] for a, _ in hit["marks"]] == ["[", "⟦"]


def test_on_a_terminal_a_match_is_styled_and_nothing_is_added_to_the_text(
    tmp_path: Path,
) -> None:
    db, _ = _db(tmp_path)
    code, out = run_on_terminal("--db", str(db), "search", "op", env={"COLUMNS": "200"})
    assert code == 0, out
    styled = re.findall("\x1b\\[([0-9;]+)m([^\x1b]*)\x1b\\[0m", out)
    assert [text for _, text in styled if text == "op"] == ["op", "op"]
    plain = re.sub("\x1b\\[[0-9;]*m", "", out)
    assert "emit _BINARY[op] then ⟦op⟧ when [x] holds" in plain  # the text, as written
