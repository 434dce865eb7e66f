"""Confinement of the file tools: a corpus of escape attempts, each refused or harmless, with a
canary directory beside the workspace whose contents never appear in any output and which is
never created in, modified or deleted from."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from workers.tools import (
    GrepTool,
    PathRefused,
    Tool,
    ToolContext,
    build_tools,
    resolve_in_workspace,
)

CANARY_TOKEN = "CANARY-7f3e-never-leak"
SIBLING_TOKEN = "SIBLING-ws2-never-leak"
CANARY_NAME = "canary_secret_file.txt"

ENGINES = [
    "python",
    pytest.param(
        "ripgrep",
        marks=pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not installed"),
    ),
]


@dataclass
class Tree:
    base: Path
    ws: Path
    canary: Path
    sibling: Path
    snapshots: dict[Path, Any] = field(default_factory=dict)


def _snapshot(top: Path) -> list[tuple[str, ...]]:
    """Everything about a directory that a leak-by-write would change (atime aside)."""
    entries: list[tuple[str, ...]] = [("dir", ".", str(top.lstat().st_mtime_ns))]
    for dirpath, dirnames, filenames in os.walk(top):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            st = path.lstat()
            rel = str(path.relative_to(top))
            if path.is_symlink():
                entries.append(("link", rel, os.readlink(path)))
            elif path.is_dir():
                entries.append(("dir", rel, str(st.st_mtime_ns)))
            else:
                content = path.read_bytes().decode("latin-1")
                entries.append(("file", rel, str(st.st_mtime_ns), str(st.st_mode), content))
    return sorted(entries)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    base = tmp_path_factory.mktemp("confine").resolve()
    ws, canary, sibling = base / "ws", base / "canary", base / "ws2"
    for d in (ws / "src" / "deep", ws / "sub", canary / "inner", sibling):
        d.mkdir(parents=True)
    (canary / CANARY_NAME).write_text(f"{CANARY_TOKEN} password=hunter2\n")
    (canary / "inner" / "nested.txt").write_text(f"{CANARY_TOKEN} nested\n")
    (sibling / "secret.txt").write_text(f"{SIBLING_TOKEN}\n")
    (ws / "src" / "a.py").write_text("print('inside')\n")
    (ws / "README.md").write_text("inside the workspace\n")
    links = {
        "link_file_out": f"../canary/{CANARY_NAME}",
        "link_file_out_abs": str(canary / CANARY_NAME),
        "link_dir_out": "../canary",
        "link_dir_out_abs": str(canary),
        "chain1": "chain2",
        "chain2": "chain3",
        "chain3": f"../canary/{CANARY_NAME}",
        "dangling": "does_not_exist.txt",
        "dangling_out": "../canary/created_through_dangling.txt",
        "loop1": "loop2",
        "loop2": "loop1",
        "link_to_sibling": "../ws2",
        "link_to_root": "/",
        "dir_link_in": "src",
        "file_link_in": "src/a.py",
        "sub/deep_link_out": "../../canary",
        "src/deep/up_and_out": "../../../canary",
    }
    for name, target in links.items():
        (ws / name).symlink_to(target)
    result = Tree(base, ws, canary, sibling)
    result.snapshots = {d: _snapshot(d) for d in (canary, sibling)}
    return result


@pytest.fixture(scope="module")
def tools() -> dict[str, Tool[Any]]:
    return {t.name: t for t in build_tools(["read_file", "write_file", "edit_file", "list_files"])}


@dataclass(frozen=True)
class Case:
    tool: str
    input: dict[str, Any]
    reason: str | None  # expected substring of the error; None: not an error, just no leak
    abs_from: str | None = None  # make input["path"] absolute from this base attribute

    def resolved_input(self, tree: Tree) -> dict[str, Any]:
        data = dict(self.input)
        if self.abs_from is not None:
            data["path"] = str(getattr(tree, self.abs_from) / data["path"])
        return data


ESCAPES = "path escapes the workspace"
ABSOLUTE = "absolute path outside the workspace"
SYMLINK_OUT = "symlink points outside the workspace"
DANGLING = "dangling symlink"

CORPUS: dict[str, Case] = {
    # read_file
    "read dotdot": Case("read_file", {"path": f"../canary/{CANARY_NAME}"}, ESCAPES),
    "read dotdot twice": Case("read_file", {"path": "../../etc/passwd"}, ESCAPES),
    "read dotdot deep": Case("read_file", {"path": f"src/../../canary/{CANARY_NAME}"}, ESCAPES),
    "read dot segments": Case(
        "read_file", {"path": f"./src/./../../canary/{CANARY_NAME}"}, ESCAPES
    ),
    "read etc passwd": Case("read_file", {"path": "/etc/passwd"}, ABSOLUTE),
    "read absolute canary": Case("read_file", {"path": CANARY_NAME}, ABSOLUTE, "canary"),
    "read absolute sibling": Case("read_file", {"path": "secret.txt"}, ABSOLUTE, "sibling"),
    "read sibling prefix": Case("read_file", {"path": "../ws2/secret.txt"}, ESCAPES),
    "read absolute via ws dotdot": Case(
        "read_file", {"path": f"../canary/{CANARY_NAME}"}, ABSOLUTE, "ws"
    ),
    "read symlinked file": Case("read_file", {"path": "link_file_out"}, SYMLINK_OUT),
    "read symlinked file abs": Case("read_file", {"path": "link_file_out_abs"}, SYMLINK_OUT),
    "read via symlinked dir": Case(
        "read_file", {"path": f"link_dir_out/{CANARY_NAME}"}, SYMLINK_OUT
    ),
    "read via abs symlinked dir": Case(
        "read_file", {"path": f"link_dir_out_abs/{CANARY_NAME}"}, SYMLINK_OUT
    ),
    "read symlink chain": Case("read_file", {"path": "chain1"}, SYMLINK_OUT),
    "read nested dir link": Case(
        "read_file", {"path": f"sub/deep_link_out/{CANARY_NAME}"}, SYMLINK_OUT
    ),
    "read link then dotdot": Case(
        "read_file", {"path": f"link_dir_out/../canary/{CANARY_NAME}"}, SYMLINK_OUT
    ),
    "read inside link then dotdot out": Case(
        "read_file", {"path": f"dir_link_in/../../canary/{CANARY_NAME}"}, ESCAPES
    ),
    "read link to root": Case("read_file", {"path": "link_to_root/etc/passwd"}, SYMLINK_OUT),
    "read link to sibling": Case("read_file", {"path": "link_to_sibling/secret.txt"}, SYMLINK_OUT),
    "read dangling in": Case("read_file", {"path": "dangling"}, DANGLING),
    "read dangling out": Case("read_file", {"path": "dangling_out"}, SYMLINK_OUT),
    "read symlink loop": Case("read_file", {"path": "loop1"}, DANGLING),
    "read nul byte": Case("read_file", {"path": "src/a.py\x00../../canary"}, "NUL byte"),
    "read tilde": Case("read_file", {"path": "~/.ssh/id_rsa"}, "'~' is not expanded"),
    "read bare tilde": Case("read_file", {"path": "~"}, "'~' is not expanded"),
    "read trailing slash dir out": Case("read_file", {"path": "link_dir_out/"}, SYMLINK_OUT),
    "read empty path": Case("read_file", {"path": ""}, "empty"),
    "read deep link up and out": Case(
        "read_file", {"path": f"src/deep/up_and_out/{CANARY_NAME}"}, SYMLINK_OUT
    ),
    # write_file
    "write dotdot": Case("write_file", {"path": "../canary/new.txt", "content": "x"}, ESCAPES),
    "write absolute": Case("write_file", {"path": "new.txt", "content": "x"}, ABSOLUTE, "canary"),
    "write sibling prefix": Case("write_file", {"path": "../ws2/new.txt", "content": "x"}, ESCAPES),
    "write through file link": Case(
        "write_file", {"path": "link_file_out", "content": "pwned"}, SYMLINK_OUT
    ),
    "write through chain": Case("write_file", {"path": "chain1", "content": "pwned"}, SYMLINK_OUT),
    "write into dir link": Case(
        "write_file", {"path": "link_dir_out/new.txt", "content": "x"}, SYMLINK_OUT
    ),
    "write mkdir through dir link": Case(
        "write_file", {"path": "link_dir_out/a/b/c.txt", "content": "x"}, SYMLINK_OUT
    ),
    "write nested dir link": Case(
        "write_file", {"path": "sub/deep_link_out/new.txt", "content": "x"}, SYMLINK_OUT
    ),
    "write dangling out": Case("write_file", {"path": "dangling_out", "content": "x"}, SYMLINK_OUT),
    "write dangling in": Case("write_file", {"path": "dangling", "content": "x"}, DANGLING),
    "write missing dir then dotdot": Case(
        "write_file", {"path": "newdir/../../canary/x.txt", "content": "x"}, ESCAPES
    ),
    "write tilde": Case("write_file", {"path": "~/x.txt", "content": "x"}, "'~' is not expanded"),
    "write nul": Case("write_file", {"path": "a\x00b", "content": "x"}, "NUL byte"),
    "write link to sibling": Case(
        "write_file", {"path": "link_to_sibling/secret.txt", "content": "x"}, SYMLINK_OUT
    ),
    # edit_file
    "edit through file link": Case(
        "edit_file", {"path": "link_file_out", "old": CANARY_TOKEN, "new": "x"}, SYMLINK_OUT
    ),
    "edit dotdot": Case(
        "edit_file", {"path": f"../canary/{CANARY_NAME}", "old": "a", "new": "b"}, ESCAPES
    ),
    "edit chain": Case("edit_file", {"path": "chain1", "old": "a", "new": "b"}, SYMLINK_OUT),
    "edit via dir link": Case(
        "edit_file",
        {"path": f"link_dir_out/{CANARY_NAME}", "old": CANARY_TOKEN, "new": "x"},
        SYMLINK_OUT,
    ),
    "edit absolute": Case(
        "edit_file", {"path": CANARY_NAME, "old": "a", "new": "b"}, ABSOLUTE, "canary"
    ),
    # list_files
    "list dotdot": Case("list_files", {"path": ".."}, ESCAPES),
    "list canary": Case("list_files", {"path": "../canary"}, ESCAPES),
    "list absolute canary": Case("list_files", {"path": "."}, ABSOLUTE, "canary"),
    "list root": Case("list_files", {"path": "/"}, ABSOLUTE),
    "list dir link": Case("list_files", {"path": "link_dir_out"}, SYMLINK_OUT),
    "list dir link trailing slash": Case("list_files", {"path": "link_dir_out/"}, SYMLINK_OUT),
    "list nested dir link": Case("list_files", {"path": "sub/deep_link_out"}, SYMLINK_OUT),
    "list link to sibling": Case("list_files", {"path": "link_to_sibling"}, SYMLINK_OUT),
    "list workspace skips links out": Case("list_files", {"path": "."}, None),
    "list pattern dotdot": Case("list_files", {"path": ".", "pattern": "../*"}, None),
    "list pattern into dir link": Case(
        "list_files", {"path": ".", "pattern": "link_dir_out/**"}, None
    ),
    "list pattern everything": Case("list_files", {"path": ".", "pattern": "**"}, None),
    "list sub with deep link": Case("list_files", {"path": "sub"}, None),
}

GREP_CORPUS: dict[str, Case] = {
    "grep dotdot": Case("grep", {"pattern": "CANARY", "path": ".."}, ESCAPES),
    "grep canary": Case("grep", {"pattern": "CANARY", "path": "../canary"}, ESCAPES),
    "grep absolute": Case("grep", {"pattern": "CANARY", "path": "."}, ABSOLUTE, "canary"),
    "grep etc": Case("grep", {"pattern": "root", "path": "/etc"}, ABSOLUTE),
    "grep dir link": Case("grep", {"pattern": "CANARY", "path": "link_dir_out"}, SYMLINK_OUT),
    "grep file link": Case("grep", {"pattern": "CANARY", "path": "link_file_out"}, SYMLINK_OUT),
    "grep sibling": Case("grep", {"pattern": "SIBLING", "path": "../ws2"}, ESCAPES),
    "grep workspace": Case("grep", {"pattern": "CANARY|SIBLING|hunter"}, None),
    "grep workspace any line": Case("grep", {"pattern": "."}, None),
    "grep glob dotdot": Case("grep", {"pattern": "CANARY", "glob": "../canary/*"}, None),
    "grep glob dotdot recursive": Case("grep", {"pattern": ".", "glob": "../**"}, None),
    "grep glob dir link": Case("grep", {"pattern": ".", "glob": "link_dir_out/**"}, None),
    "grep glob absolute": Case("grep", {"pattern": ".", "glob": "/**"}, None),
    "grep sub with deep link": Case("grep", {"pattern": ".", "path": "sub"}, None),
}


def _assert_no_leak(text: str, tree: Tree) -> None:
    assert CANARY_TOKEN not in text
    assert SIBLING_TOKEN not in text
    assert "hunter2" not in text


def _assert_no_outside_names(text: str) -> None:
    """A listing or search that succeeded names nothing that lives outside the workspace."""
    for name in (CANARY_NAME, "nested.txt", "secret.txt", "passwd"):
        assert name not in text


def _assert_canary_untouched(tree: Tree) -> None:
    for directory, before in tree.snapshots.items():
        assert _snapshot(directory) == before, f"{directory} was modified"


def test_the_corpus_has_at_least_forty_cases() -> None:
    assert len(CORPUS) + len(GREP_CORPUS) >= 40


@pytest.mark.parametrize("case_id", list(CORPUS))
async def test_escape_attempt_is_refused_or_harmless(
    case_id: str, tree: Tree, tools: dict[str, Tool[Any]]
) -> None:
    case = CORPUS[case_id]
    out = await tools[case.tool].invoke(case.resolved_input(tree), ToolContext(workspace=tree.ws))
    _assert_no_leak(out.text, tree)
    if case.reason is None:
        assert not out.is_error, out.text
        _assert_no_outside_names(out.text)
    else:
        assert out.is_error, out.text
        assert case.reason in out.text
    _assert_canary_untouched(tree)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case_id", list(GREP_CORPUS))
async def test_grep_escape_attempt_is_refused_or_harmless(
    case_id: str, engine: str, tree: Tree
) -> None:
    case = GREP_CORPUS[case_id]
    grep = GrepTool(engine=engine)  # type: ignore[arg-type]
    out = await grep.invoke(case.resolved_input(tree), ToolContext(workspace=tree.ws))
    _assert_no_leak(out.text, tree)
    if case.reason is None:
        assert not out.is_error, out.text
        _assert_no_outside_names(out.text)
    else:
        assert out.is_error, out.text
        assert case.reason in out.text
    _assert_canary_untouched(tree)


def test_nothing_was_created_outside_the_workspace(tree: Tree) -> None:
    assert sorted(p.name for p in tree.base.iterdir()) == ["canary", "ws", "ws2"]
    assert not (tree.canary / "created_through_dangling.txt").exists()
    _assert_canary_untouched(tree)


def test_refusal_names_where_the_path_resolves(tree: Tree) -> None:
    with pytest.raises(PathRefused) as info:
        resolve_in_workspace(tree.ws, "../x", must_exist=False)
    assert str(info.value) == f"refused: path escapes the workspace: ../x resolves to {tree.base}/x"


def test_symlink_refusal_names_the_link_and_its_target(tree: Tree) -> None:
    with pytest.raises(PathRefused) as info:
        resolve_in_workspace(tree.ws, "sub/deep_link_out/x", must_exist=False)
    assert (
        info.value.reason
        == "symlink points outside the workspace: sub/deep_link_out -> ../../canary"
    )


def test_sibling_with_a_common_prefix_is_outside(tree: Tree) -> None:
    with pytest.raises(PathRefused):
        resolve_in_workspace(tree.ws, str(tree.sibling / "secret.txt"), must_exist=True)


def test_absolute_path_inside_the_workspace_is_accepted(tree: Tree) -> None:
    path = resolve_in_workspace(tree.ws, str(tree.ws / "src" / "a.py"), must_exist=True)
    assert path == tree.ws / "src" / "a.py"


def test_symlink_inside_the_workspace_resolves_to_its_target(tree: Tree) -> None:
    assert resolve_in_workspace(tree.ws, "file_link_in", must_exist=True) == tree.ws / "src/a.py"
    assert resolve_in_workspace(tree.ws, "dir_link_in/a.py", must_exist=True) == (
        tree.ws / "src/a.py"
    )


def test_missing_path_for_writing_resolves_under_its_deepest_existing_ancestor(tree: Tree) -> None:
    path = resolve_in_workspace(tree.ws, "dir_link_in/new/x.py", must_exist=False, for_write=True)
    assert path == tree.ws / "src" / "new" / "x.py"


def test_missing_path_that_must_exist_is_not_found(tree: Tree) -> None:
    with pytest.raises(FileNotFoundError):
        resolve_in_workspace(tree.ws, "src/nope.py", must_exist=True)


def test_dotdot_that_stays_inside_is_accepted(tree: Tree) -> None:
    assert resolve_in_workspace(tree.ws, "src/deep/../a.py", must_exist=True) == (
        tree.ws / "src/a.py"
    )


def test_workspace_root_itself_resolves(tree: Tree) -> None:
    assert resolve_in_workspace(tree.ws, ".", must_exist=True) == tree.ws
    assert resolve_in_workspace(tree.ws, str(tree.ws), must_exist=True) == tree.ws
