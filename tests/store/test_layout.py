"""The store's boundaries, read from its source: what it may import, how big a module may grow,
what its public surface is, and which modules the read-only fast path may load.

``tests/test_architecture.py`` states the layers between packages; this states the store's own
house rules (DESIGN.md, "The house, wave 2")."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import store

STORE = Path(store.__file__).parent
MODULES = sorted(p.stem for p in STORE.glob("*.py"))
MAX_LINES = 650
PUBLIC_MODULES = ("errors", "models", "refs")
"""The modules whose names are the store's vocabulary (each with its own ``__all__``)."""
STATEMENT_MODULES = ("_checkpoints", "_dispatches", "_ledger", "_messages", "_search", "_threads")
"""Statement functions per table family: plain functions of a ``Tx``, no closures."""
RAW_READ_PATH = (
    "store.rawread",
    "store.models",
    "store._record",
    "store._history",
    "store._threads",
    "store._search",
    "store._ledger",
    "store._schema",
    "store._sqlite",
)
"""What the read-only fast path loads: the store's own models and statements."""
MAX_NONBLANK_LINES = 5000
"""The whole store package, in non-blank lines (issue 24: it was 5,830 with every write twice;
4,896 with every statement once, one vocabulary, the fast path reading through the store, and
the secrets and their redaction in ``workers``, which runs what holds them)."""
MAX_DEPTH = 6
"""The longest chain of module-level imports between store modules, in imports (issue 24: a
package whose imports stack deeper is telling that a shared type lives in the wrong home)."""
TRANSPORT = {
    "sqlalchemy": {"_engine", "_exclusive", "_tables"},
    "sqlite3": {"_engine", "_sqlite", "_sqlitefile", "rawread"},
}
"""The only store modules that may import each driver: ``_engine.Database`` chooses the
transport once (``_sqlite`` or SQLAlchemy's ``run_sync``); ``_tables`` is the schema Alembic
compares; ``_exclusive`` holds PostgreSQL's advisory lock on a connection of its own;
``_sqlitefile`` owns a SQLite file's connections on their threads; ``rawread`` opens the fast
path's read-only connection."""
_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)


def _tree(module: str) -> ast.Module:
    return ast.parse((STORE / f"{module}.py").read_text(encoding="utf-8"))


def _runtime_imports(module: str) -> set[str]:
    """Absolute names of the modules ``module`` imports when it is imported: top-level imports,
    not those under ``if TYPE_CHECKING:`` nor inside functions."""
    out: set[str] = set()
    for node in _tree(module).body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                out.add(node.module or "")
            elif node.module:
                out.add(f"store.{node.module}")
            else:  # from . import _outputs, _search
                out.update(f"store.{a.name}" for a in node.names)
    return out


def _all_imports(module: str) -> set[str]:
    """Every module named by an import anywhere in ``module`` (functions and TYPE_CHECKING
    included), as its top-level package."""
    out: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def _sort_key(name: str) -> tuple[int, str]:
    """Constants, then classes, then functions (ruff's RUF022 order)."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("module", MODULES)
def test_the_store_imports_nothing_from_the_layers_above_it(module: str) -> None:
    assert not _all_imports(module) & {"workers", "orchestrator"}, module


@pytest.mark.parametrize("module", MODULES)
def test_every_store_module_stays_small(module: str) -> None:
    lines = (STORE / f"{module}.py").read_text(encoding="utf-8").count("\n")
    assert lines < MAX_LINES, f"store/{module}.py has {lines} lines: split it along a seam"


def test_the_public_surface_is_sorted_complete_and_loads() -> None:
    names = list(store.__all__)
    assert names == sorted(names, key=_sort_key)
    assert len(set(names)) == len(names)
    where = store._WHERE  # each name's module: the vocabulary's, or the PEP 562 table's
    assert set(where) == set(names)
    for name in names:
        module = importlib.import_module(where[name], "store")
        assert getattr(store, name) is getattr(module, name), name
    # what mypy sees (the star imports of the vocabulary, the TYPE_CHECKING re-exports) names
    # exactly the same
    checked = {
        name
        for node in ast.walk(_tree("__init__"))
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for a in node.names
        for name in (
            importlib.import_module(f"store.{node.module}").__all__
            if a.name == "*"
            else [a.asname or a.name]
        )
    }
    assert checked == set(names)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_each_public_module_declares_its_names_and_the_package_exports_them(module: str) -> None:
    mod = importlib.import_module(f"store.{module}")
    declared = list(mod.__all__)
    assert declared == sorted(declared, key=_sort_key)
    defined = {
        n.name
        for n in _tree(module).body
        if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert set(declared) <= set(store.__all__), module
    for name in declared:
        assert store._WHERE[name] == f".{module}", name
    if module == "errors":  # every error the store raises is public
        assert {n for n in defined if not n.startswith("_")} == set(declared)


def test_every_store_error_is_drawn_in_the_error_tree() -> None:
    from store import errors

    tree = errors.__doc__ or ""
    for name in errors.__all__:
        assert re.search(rf"^\s+(?:[│ ]*[├└]── )?{name}\b", tree, re.MULTILINE), name


def test_there_is_no_import_cycle_inside_the_store() -> None:
    graph = {
        f"store.{m}" if m != "__init__" else "store": {
            i for i in _runtime_imports(m) if i.startswith("store.")
        }
        for m in MODULES
    }
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycle = [*path[path.index(node) :], node]
            raise AssertionError("import cycle: " + " → ".join(cycle))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


@pytest.mark.parametrize("module", STATEMENT_MODULES)
def test_statement_modules_hold_plain_functions_without_closures(module: str) -> None:
    for top in _tree(module).body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            nested = [
                n.name
                for n in ast.walk(top)
                if n is not top and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            assert not nested, f"store/{module}.py: {top.name} defines {nested}"


def test_the_raw_read_path_loads_without_sqlalchemy_or_pydantic() -> None:
    """``orchestrator``'s fast path imports these before click, SQLAlchemy or pydantic: one of
    them importing a heavy module would cost every ``threadloom ls`` its import time (asyncio
    alone was a third of a fast ``ls``, through ``_sqlite``'s threads before they moved to
    ``_sqlitefile``)."""
    code = (
        "import sys\n"
        f"for m in {RAW_READ_PATH!r}: __import__(m)\n"
        "heavy = sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('sqlalchemy', 'pydantic', 'structlog', 'alembic', 'asyncio'))\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""
    for module in RAW_READ_PATH:
        imported = _runtime_imports(module.split(".")[1])
        assert not {i.split(".")[0] for i in imported} & {"sqlalchemy", "pydantic"}, module


def test_the_store_stays_within_its_size() -> None:
    lines = sum(
        1
        for m in MODULES
        for line in (STORE / f"{m}.py").read_text(encoding="utf-8").splitlines()
        if line.strip()
    )
    assert lines <= MAX_NONBLANK_LINES, f"store/ has {lines} non-blank lines"


def test_the_store_imports_stack_at_most_six_deep() -> None:
    graph = {
        m: {i[len("store.") :] for i in _runtime_imports(m) if i.startswith("store.")}
        for m in MODULES
    }

    def depth(m: str, seen: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        if m in seen:  # a cycle is the other test's to report
            return 0, []
        best = max((depth(n, (*seen, m)) for n in graph.get(m, ())), default=(-1, []))
        return best[0] + 1, [m, *best[1]]

    deepest = max((depth(m) for m in MODULES), key=lambda d: d[0])
    assert deepest[0] <= MAX_DEPTH, " -> ".join(deepest[1])


@pytest.mark.parametrize("driver", sorted(TRANSPORT))
def test_only_the_transport_modules_import_a_database_driver(driver: str) -> None:
    importers = {m for m in MODULES if driver in _all_imports(m)}
    assert importers <= TRANSPORT[driver]


def test_every_statement_is_written_once_and_the_transport_is_chosen_in_one_place() -> None:
    """No twin statements: every SQL text of the store is one constant in one place (no
    ``_sqlite`` / ``_raw`` / ``_orm`` variant of a statement function beside it), and nothing
    outside ``_engine`` looks at which transport ``Database`` chose (its ``appender``, ``raw``,
    ``writer`` and ``reader``) or runs SQLAlchemy's ``run_sync`` itself."""
    seen: dict[str, str] = {}
    for m in MODULES:
        tree = _tree(m)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = " ".join(node.value.split())
                if _SQL.match(text) and len(text) > 20:
                    assert text not in seen, f"{m} repeats a statement of {seen[text]}: {text}"
                    seen[text] = m
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert not re.search(r"_(sqlite|raw|orm)$", node.name), f"{m}.{node.name}"
            if m not in ("_engine", "_exclusive") and isinstance(node, ast.Attribute):
                assert node.attr not in ("appender", "writer", "reader", "run_sync"), (m, node.attr)
                if isinstance(node.value, ast.Attribute) and node.value.attr == "db":
                    assert node.attr != "raw", m
