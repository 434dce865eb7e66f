"""The file tools' behaviour (read_file, write_file, edit_file, list_files, grep), the tool
contract (validation, specs, error results) and the registry — on real files in ``tmp_path``."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

import workers.tools as tools_pkg
from workers.tools import (
    DEFAULT_WORKER_TOOLS,
    TOOL_REGISTRY,
    EditFileTool,
    GrepTool,
    ListFilesTool,
    ReadFileTool,
    Tool,
    ToolContext,
    ToolOutput,
    WriteFileTool,
    _grep_python,
    build_tools,
)

HAS_RG = shutil.which("rg") is not None
ENGINES = [
    "python",
    pytest.param(
        "ripgrep", marks=pytest.mark.skipif(not HAS_RG, reason="ripgrep is not installed")
    ),
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws)


async def call(tool: Tool[Any], ctx: ToolContext, **raw: Any) -> ToolOutput:
    return await tool.invoke(raw, ctx)


# read_file ------------------------------------------------------------------------------------


async def test_read_file_numbers_lines_like_cat_n(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.py").write_text("first\n\tsecond\nthird")
    out = await call(ReadFileTool(), ctx, path="a.py")
    assert out == ToolOutput("     1\tfirst\n     2\t\tsecond\n     3\tthird")


async def test_read_file_window_says_how_to_read_on(ws: Path, ctx: ToolContext) -> None:
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    out = await call(ReadFileTool(), ctx, path="big.txt", offset=10, limit=5)
    lines = out.text.splitlines()
    assert lines[:5] == [f"{n:>6}\tline {n}" for n in range(10, 15)]
    assert lines[5] == ("[showing lines 10-14 of 100; call read_file with offset=15 to read more]")


async def test_read_file_default_limit_is_2000_lines(ws: Path, ctx: ToolContext) -> None:
    (ws / "long.txt").write_text("x\n" * 2500)
    out = await call(ReadFileTool(), ctx, path="long.txt")
    assert out.text.count("\tx") == 2000
    assert out.text.endswith("offset=2001 to read more]")


async def test_read_file_reading_to_the_end_has_no_continuation_note(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "f.txt").write_text("a\nb\nc\n")
    out = await call(ReadFileTool(), ctx, path="f.txt", offset=2)
    assert out.text == "     2\tb\n     3\tc"


async def test_read_file_offset_past_the_end_is_an_error(ws: Path, ctx: ToolContext) -> None:
    (ws / "f.txt").write_text("a\nb\n")
    out = await call(ReadFileTool(), ctx, path="f.txt", offset=5)
    assert out.is_error
    assert "offset 5 is past the end of f.txt, which has 2 lines" in out.text


async def test_read_file_empty_file_says_so(ws: Path, ctx: ToolContext) -> None:
    (ws / "empty.txt").touch()
    out = await call(ReadFileTool(), ctx, path="empty.txt")
    assert out == ToolOutput("(empty.txt is empty)")


async def test_read_file_refuses_binary_files(ws: Path, ctx: ToolContext) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    out = await call(ReadFileTool(), ctx, path="img.png")
    assert out.is_error
    assert "img.png looks like a binary file" in out.text


async def test_read_file_shows_invalid_utf8_with_replacement_and_a_note(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "latin.txt").write_bytes(b"caf\xe9\n")
    out = await call(ReadFileTool(), ctx, path="latin.txt")
    assert not out.is_error
    assert "caf\ufffd" in out.text
    assert "not valid UTF-8" in out.text


async def test_read_file_strips_crlf_line_endings(ws: Path, ctx: ToolContext) -> None:
    (ws / "dos.txt").write_bytes(b"a\r\nb\r\n")
    out = await call(ReadFileTool(), ctx, path="dos.txt")
    assert out.text == "     1\ta\n     2\tb"


async def test_read_file_cuts_very_long_lines(ws: Path, ctx: ToolContext) -> None:
    (ws / "min.js").write_text("x" * 5000 + "\n")
    out = await call(ReadFileTool(), ctx, path="min.js")
    assert "x" * 2000 + " … [line truncated: 5000 characters]" in out.text
    assert "x" * 2001 not in out.text


async def test_read_file_missing_file_is_an_error_naming_it(ws: Path, ctx: ToolContext) -> None:
    out = await call(ReadFileTool(), ctx, path="src/nope.py")
    assert out == ToolOutput("read_file: No such file or directory: src/nope.py", is_error=True)


async def test_read_file_on_a_directory_is_an_error(ws: Path, ctx: ToolContext) -> None:
    (ws / "pkg").mkdir()
    out = await call(ReadFileTool(), ctx, path="pkg")
    assert out.is_error
    assert "pkg is a directory" in out.text


async def test_read_file_refuses_a_fifo_instead_of_blocking(ws: Path, ctx: ToolContext) -> None:
    os.mkfifo(ws / "pipe")
    out = await asyncio.wait_for(call(ReadFileTool(), ctx, path="pipe"), timeout=10)
    assert out.is_error
    assert "not a regular file" in out.text


async def test_read_file_file_path_with_trailing_slash_is_not_a_directory(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "f.txt").write_text("x\n")
    out = await call(ReadFileTool(), ctx, path="f.txt/")
    assert out.is_error
    assert "Not a directory" in out.text


# write_file -----------------------------------------------------------------------------------


async def test_write_file_creates_file_and_parent_directories(ws: Path, ctx: ToolContext) -> None:
    out = await call(WriteFileTool(), ctx, path="pkg/sub/mod.py", content="héllo\n")
    assert out == ToolOutput("Created pkg/sub/mod.py (7 bytes); created directories: pkg, pkg/sub")
    assert (ws / "pkg/sub/mod.py").read_text() == "héllo\n"


async def test_write_file_overwrites_and_keeps_the_file_mode(ws: Path, ctx: ToolContext) -> None:
    target = ws / "run.sh"
    target.write_text("old contents that are longer\n")
    target.chmod(0o755)
    out = await call(WriteFileTool(), ctx, path="run.sh", content="new\n")
    assert out == ToolOutput("Overwrote run.sh (4 bytes)")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


async def test_write_file_through_a_symlink_inside_writes_its_target(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "real.txt").write_text("old\n")
    (ws / "alias.txt").symlink_to("real.txt")
    out = await call(WriteFileTool(), ctx, path="alias.txt", content="new\n")
    assert out == ToolOutput("Overwrote real.txt (4 bytes)")
    assert (ws / "alias.txt").is_symlink()
    assert (ws / "real.txt").read_text() == "new\n"


async def test_write_file_to_a_directory_is_an_error(ws: Path, ctx: ToolContext) -> None:
    (ws / "pkg").mkdir()
    out = await call(WriteFileTool(), ctx, path="pkg", content="x")
    assert out.is_error
    assert "pkg is a directory" in out.text


async def test_write_file_path_ending_in_slash_is_an_error(ws: Path, ctx: ToolContext) -> None:
    out = await call(WriteFileTool(), ctx, path="newdir/", content="x")
    assert out.is_error
    assert "ends with '/'" in out.text
    assert not (ws / "newdir").exists()


async def test_write_file_under_a_regular_file_is_an_error(ws: Path, ctx: ToolContext) -> None:
    (ws / "f.txt").write_text("x")
    out = await call(WriteFileTool(), ctx, path="f.txt/inner.txt", content="x")
    assert out.is_error
    assert "Not a directory" in out.text


async def test_write_file_empty_content_creates_an_empty_file(ws: Path, ctx: ToolContext) -> None:
    out = await call(WriteFileTool(), ctx, path="empty", content="")
    assert out == ToolOutput("Created empty (0 bytes)")
    assert (ws / "empty").read_bytes() == b""


# edit_file ------------------------------------------------------------------------------------


async def test_edit_file_replaces_a_unique_match(ws: Path, ctx: ToolContext) -> None:
    (ws / "m.py").write_text("def f():\n    return 1\n")
    out = await call(EditFileTool(), ctx, path="m.py", old="return 1", new="return 2")
    assert out == ToolOutput("Replaced 1 occurrence in m.py")
    assert (ws / "m.py").read_text() == "def f():\n    return 2\n"


async def test_edit_file_missing_old_text_says_it_was_not_found(ws: Path, ctx: ToolContext) -> None:
    (ws / "m.py").write_text("x = 1\n")
    out = await call(EditFileTool(), ctx, path="m.py", old="y = 1", new="y = 2")
    assert out.is_error
    assert "old text not found in m.py" in out.text
    assert (ws / "m.py").read_text() == "x = 1\n"


async def test_edit_file_ambiguous_match_says_how_many_and_suggests_context(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "m.py").write_text("x = 1\nx = 1\nx = 1\n")
    out = await call(EditFileTool(), ctx, path="m.py", old="x = 1", new="x = 2")
    assert out.is_error
    assert "occurs 3 times in m.py" in out.text
    assert "more surrounding lines" in out.text
    assert "replace_all" in out.text
    assert (ws / "m.py").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_file_replace_all_reports_the_count(ws: Path, ctx: ToolContext) -> None:
    (ws / "m.py").write_text("a a a\n")
    out = await call(EditFileTool(), ctx, path="m.py", old="a", new="bb", replace_all=True)
    assert out == ToolOutput("Replaced 3 occurrences in m.py")
    assert (ws / "m.py").read_text() == "bb bb bb\n"


async def test_edit_file_identical_old_and_new_is_an_error(ws: Path, ctx: ToolContext) -> None:
    (ws / "m.py").write_text("a\n")
    out = await call(EditFileTool(), ctx, path="m.py", old="a", new="a")
    assert out.is_error
    assert "identical" in out.text


async def test_edit_file_empty_old_is_invalid_input(ws: Path, ctx: ToolContext) -> None:
    (ws / "m.py").write_text("a\n")
    out = await call(EditFileTool(), ctx, path="m.py", old="", new="b")
    assert out.is_error
    assert "old:" in out.text


async def test_edit_file_accepts_lf_text_for_a_crlf_file(ws: Path, ctx: ToolContext) -> None:
    (ws / "dos.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    out = await call(EditFileTool(), ctx, path="dos.txt", old="one\ntwo", new="1\n2")
    assert (
        out.text == "Replaced 1 occurrence in dos.txt (matched with the file's CRLF line endings)"
    )
    assert (ws / "dos.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_file_refuses_binary_and_non_utf8_files(ws: Path, ctx: ToolContext) -> None:
    (ws / "bin").write_bytes(b"a\x00b")
    (ws / "latin.txt").write_bytes(b"caf\xe9 a\n")
    binary = await call(EditFileTool(), ctx, path="bin", old="a", new="b")
    latin = await call(EditFileTool(), ctx, path="latin.txt", old="a", new="b")
    assert binary.is_error
    assert "binary" in binary.text
    assert latin.is_error
    assert "not valid UTF-8" in latin.text
    assert (ws / "latin.txt").read_bytes() == b"caf\xe9 a\n"


async def test_edit_file_missing_file_is_an_error(ws: Path, ctx: ToolContext) -> None:
    out = await call(EditFileTool(), ctx, path="nope.py", old="a", new="b")
    assert out == ToolOutput("edit_file: No such file or directory: nope.py", is_error=True)


# list_files -----------------------------------------------------------------------------------


def make_tree(ws: Path) -> None:
    for rel in [
        "a.py",
        "a-b.py",
        "a/z.py",
        "B.txt",
        ".hidden/h.py",
        ".git/config",
        "src/m.py",
        "src/sub/n.py",
        "src/t.txt",
    ]:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(f"foo in {rel}\n")
    (ws / "src" / "link_in").symlink_to("sub")
    (ws / "src" / "link_out").symlink_to("../..")


async def test_list_files_lists_files_in_tree_order_skipping_git(
    ws: Path, ctx: ToolContext
) -> None:
    make_tree(ws)
    out = await call(ListFilesTool(), ctx)
    assert out.text.splitlines() == [
        ".hidden/h.py",
        "B.txt",
        "a/z.py",
        "a-b.py",
        "a.py",
        "src/link_in",
        "src/m.py",
        "src/sub/n.py",
        "src/t.txt",
    ]


async def test_list_files_pattern_is_relative_to_the_listed_directory(
    ws: Path, ctx: ToolContext
) -> None:
    make_tree(ws)
    top = await call(ListFilesTool(), ctx, pattern="*.py")
    deep = await call(ListFilesTool(), ctx, pattern="**/*.py")
    sub = await call(ListFilesTool(), ctx, path="src", pattern="sub/*.py")
    braces = await call(ListFilesTool(), ctx, path="src", pattern="*.{py,txt}")
    assert top.text.splitlines() == ["a-b.py", "a.py"]
    assert deep.text.splitlines() == [
        ".hidden/h.py",
        "a/z.py",
        "a-b.py",
        "a.py",
        "src/m.py",
        "src/sub/n.py",
    ]
    assert sub.text.splitlines() == ["src/sub/n.py"]
    assert braces.text.splitlines() == ["src/m.py", "src/t.txt"]


async def test_list_files_caps_the_listing_and_counts_the_rest(ws: Path, ctx: ToolContext) -> None:
    (ws / "many").mkdir()
    for i in range(1010):
        (ws / "many" / f"f{i:04d}").touch()
    out = await call(ListFilesTool(), ctx, path="many")
    lines = out.text.splitlines()
    assert len(lines) == 1001
    assert lines[0] == "many/f0000"
    assert lines[999] == "many/f0999"
    assert lines[1000] == "[10 more files not shown; narrow the listing with path or pattern]"


async def test_list_files_on_a_file_lists_that_file(ws: Path, ctx: ToolContext) -> None:
    make_tree(ws)
    out = await call(ListFilesTool(), ctx, path="src/m.py")
    assert out.text == "src/m.py"


async def test_list_files_empty_results_say_so(ws: Path, ctx: ToolContext) -> None:
    (ws / "empty").mkdir()
    assert (await call(ListFilesTool(), ctx, path="empty")).text == "No files under empty"
    nothing = await call(ListFilesTool(), ctx, pattern="*.rs")
    assert nothing.text == "No files under . match '*.rs'"


async def test_list_files_invalid_pattern_is_an_error(ws: Path, ctx: ToolContext) -> None:
    out = await call(ListFilesTool(), ctx, pattern="[abc")
    assert out.is_error
    assert "unclosed character class" in out.text


# grep -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_lists_matches_sorted_by_path_then_line(
    engine: str, ws: Path, ctx: ToolContext
) -> None:
    make_tree(ws)
    (ws / "a.py").write_text("foo 1\nbar\nfoo 3\n")
    out = await call(GrepTool(engine=engine), ctx, pattern="foo")  # type: ignore[arg-type]
    assert out.text.splitlines() == [
        ".hidden/h.py:1:foo in .hidden/h.py",
        "B.txt:1:foo in B.txt",
        "a/z.py:1:foo in a/z.py",
        "a-b.py:1:foo in a-b.py",
        "a.py:1:foo 1",
        "a.py:3:foo 3",
        "src/m.py:1:foo in src/m.py",
        "src/sub/n.py:1:foo in src/sub/n.py",
        "src/t.txt:1:foo in src/t.txt",
    ]


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_glob_and_path_narrow_the_search(
    engine: str, ws: Path, ctx: ToolContext
) -> None:
    make_tree(ws)
    grep = GrepTool(engine=engine)  # type: ignore[arg-type]
    py_in_src = await call(grep, ctx, pattern="foo", path="src", glob="*.py")
    one_file = await call(grep, ctx, pattern="foo", path="src/t.txt")
    excluded = await call(grep, ctx, pattern="foo", glob="!*.py")
    assert py_in_src.text.splitlines() == [
        "src/m.py:1:foo in src/m.py",
        "src/sub/n.py:1:foo in src/sub/n.py",
    ]
    assert one_file.text == "src/t.txt:1:foo in src/t.txt"
    assert excluded.text.splitlines() == ["B.txt:1:foo in B.txt", "src/t.txt:1:foo in src/t.txt"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_caps_matches_and_counts_the_rest(
    engine: str, ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("hit\n" * 300)
    (ws / "b.txt").write_text("hit\n" * 300)
    out = await call(GrepTool(engine=engine), ctx, pattern="hit")  # type: ignore[arg-type]
    lines = out.text.splitlines()
    assert len(lines) == 501
    assert lines[299] == "a.txt:300:hit"
    assert lines[499] == "b.txt:200:hit"
    assert lines[500] == "[100 more matches not shown; narrow the search with path or glob]"


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_invalid_regex_is_an_error(engine: str, ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("x\n")
    out = await call(GrepTool(engine=engine), ctx, pattern="(unclosed")  # type: ignore[arg-type]
    assert out.is_error
    assert "invalid regex '(unclosed'" in out.text


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_skips_binary_files_and_reports_no_matches(
    engine: str, ws: Path, ctx: ToolContext
) -> None:
    (ws / "blob.bin").write_bytes(b"needle\n\x00\x01")
    out = await call(GrepTool(engine=engine), ctx, pattern="needle")  # type: ignore[arg-type]
    assert out == ToolOutput("No matches for 'needle' in .")


async def test_grep_pattern_that_spans_lines_is_an_error(ws: Path, ctx: ToolContext) -> None:
    out = await call(GrepTool(), ctx, pattern="a\\nb")
    assert out.is_error
    assert "line break" in out.text


async def test_grep_invalid_glob_is_an_error(ws: Path, ctx: ToolContext) -> None:
    out = await call(GrepTool(), ctx, pattern="x", glob="{a,{b}}")
    assert out.is_error
    assert "nested alternate groups" in out.text


def make_varied_tree(ws: Path) -> None:
    """A tree with the corners where two grep implementations could disagree."""
    files: dict[str, bytes] = {
        "top.py": b"foo\nFoo\nfoo bar\n",
        "a.py": b"x foo\n",
        "a-b.py": b"foo-ab\n",
        "a/inner.py": b"foo inner\n",
        "Upper.TXT": b"FOO upper\nfoo lower\n",
        ".hidden/h.py": b"foo hidden\n",
        ".git/config": b"foo in git\n",
        "nested/.git": b"gitdir: foo\n",
        "src/m.py": b"foo x\n\nfoo y\n",
        "src/t.txt": b"foo txt\n",
        "src/sub/n.py": b"foo n\n",
        "src/sub/deeper/d.rs": b"fn foo() {}\n",
        "crlf.txt": b"foo\r\nfoo crlf\r\n",
        "nonl.txt": b"foo without newline",
        "empty.txt": b"",
        "latin1.txt": b"caf\xe9 foo\n",
        "café.txt": "foo café é\n".encode(),
        "bad\udcff name.txt": b"foo in a file whose name is not UTF-8\n",
        "with space and: colon.txt": b"foo colon\n",
        "bom.txt": b"\xef\xbb\xbffoo bom\n",
        "late_nul.dat": b"foo early\n" + b"x" * 200_000 + b"\n\x00\nfoo late\n",
        "early_nul.dat": b"\x00foo\n",
        "many.txt": b"foo\n" * 40,
    }
    for rel, data in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (ws / "link_file").symlink_to("top.py")
    (ws / "link_dir").symlink_to("src")
    os.mkfifo(ws / "fifo")


GLOBS = [
    None,
    "*.py",
    "!*.py",
    "src/**",
    "**/sub/*.py",
    "*.{py,txt}",
    "[a-c]*.py",
    "src/",
    "!src/",
    "/top.py",
    "a**",
    "sub",
    ".*",
    "src/*",
    "*.TXT",
    "!sub",
    "caf?.txt",
    "**",
]


@pytest.mark.skipif(not HAS_RG, reason="ripgrep is not installed")
@pytest.mark.parametrize("glob", GLOBS)
async def test_grep_engines_agree_on_the_same_tree(
    glob: str | None, ws: Path, ctx: ToolContext
) -> None:
    make_varied_tree(ws)
    rg, py = GrepTool(engine="ripgrep", cap=25), GrepTool(engine="python", cap=25)
    for path in (".", "src", "top.py"):
        for pattern in ("foo", "^foo$", "(?i)foo", r"\bfoo\b", "é", "o{2}"):
            raw: dict[str, Any] = {"pattern": pattern, "path": path}
            if glob is not None:
                raw["glob"] = glob
            expected = await rg.invoke(raw, ctx)
            assert not expected.is_error, expected.text
            assert await py.invoke(raw, ctx) == expected, (path, pattern, glob)


# the tool contract ----------------------------------------------------------------------------


async def test_invalid_input_is_an_error_naming_the_fields(ws: Path, ctx: ToolContext) -> None:
    out = await ReadFileTool().invoke({"offset": 0, "colour": "red"}, ctx)
    assert out.is_error
    assert out.text.startswith("read_file: invalid input, the tool did not run (")
    assert "path: Field required" in out.text
    assert "offset: Input should be greater than or equal to 1" in out.text
    assert "colour: unexpected field" in out.text
    assert "Expected fields: path, offset?, limit?." in out.text


async def test_arguments_that_were_not_json_are_echoed_truncated(ctx: ToolContext) -> None:
    garbage = '{"path": "a.py", ' + "x" * 1000
    out = await ReadFileTool().invoke({"_raw_arguments": garbage}, ctx)
    assert out.is_error
    assert "not valid JSON" in out.text
    assert garbage[:500] in out.text
    assert garbage[:501] not in out.text
    assert "[517 more chars]" in out.text


async def test_null_for_an_optional_field_means_its_default(ws: Path, ctx: ToolContext) -> None:
    (ws / "f.txt").write_text("a\n")
    out = await ReadFileTool().invoke({"path": "f.txt", "offset": None, "limit": None}, ctx)
    assert out == ToolOutput("     1\ta")


def test_specs_have_clean_object_schemas() -> None:
    for name in DEFAULT_WORKER_TOOLS:
        spec = TOOL_REGISTRY[name]().spec()
        schema = spec.input_schema
        assert spec.name == name
        assert spec.description
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert "title" not in schema
        for prop in schema["properties"].values():
            assert "title" not in prop
            assert "anyOf" not in prop
            assert prop["description"]


def test_build_tools_returns_instances_in_order() -> None:
    built = build_tools(["grep", "read_file"])
    assert [t.name for t in built] == ["grep", "read_file"]
    assert isinstance(built[0], GrepTool)


def test_build_tools_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        build_tools(["read_file", "rm_rf"])
    message = str(info.value)
    assert "unknown tool 'rm_rf'" in message
    assert "bash, edit_file, grep, list_files, read_file, write_file" in message


def test_build_tools_duplicate_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="more than once"):
        build_tools(["bash", "bash"])


def test_default_worker_tools_are_all_registered() -> None:
    assert DEFAULT_WORKER_TOOLS == (
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        "bash",
    )
    assert set(DEFAULT_WORKER_TOOLS) == set(TOOL_REGISTRY)


def test_package_exports_a_sorted_all_of_real_names() -> None:
    names = tools_pkg.__all__

    def isort_key(name: str) -> tuple[int, str]:
        kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
        return kind, name

    assert names == sorted(names, key=isort_key)
    for name in names:
        assert hasattr(tools_pkg, name)


async def test_a_pattern_that_backtracks_for_ever_fails_the_python_grep_in_bounded_time(
    ws: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ripgrep, the grep tool matches with Python: a pattern that backtracks
    catastrophically is stopped after ``BUDGET_S`` with an error naming where, instead of
    running for ever in a thread nothing can stop."""
    monkeypatch.setattr(_grep_python, "BUDGET_S", 0.5)
    (ws / "a.txt").write_text("ok\n" + "a" * 40 + "b\n")
    out = await call(GrepTool(engine="python"), ctx, pattern="(a|aa)+$")
    assert out.is_error
    assert "took longer than 0.5 s (at a.txt:2): it backtracks too much" in out.text
    fine = await call(GrepTool(engine="python"), ctx, pattern="a+b$")
    assert not fine.is_error and "a.txt:2:" in fine.text
