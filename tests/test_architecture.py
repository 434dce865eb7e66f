"""The layout's rules, checked by reading the imports of every module of the product.

- layers point one way: ``store`` ← ``workers`` ← ``orchestrator``;
- only ``store`` and ``migrations`` import ``sqlalchemy`` (and ``alembic``);
- only the Anthropic provider imports ``anthropic``; only the OpenAI-compatible provider does
  HTTP with ``httpx``;
- inside ``orchestrator``, one way down: the front doors (``cli``, ``mcp``, ``web``) → ``api``
  (with ``session``, the job session that runs) → ``runtime`` → ``isolation``, with
  ``errors``, ``views``, ``jobs`` (with its ``tomllines``) and ``logging`` leaves that any
  layer may use: ``runtime`` imports no front door (nor ``api`` or ``session``),
  ``isolation`` neither ``runtime`` nor a front door, a leaf nothing but a leaf, nothing below
  a front door imports one, and no front door reaches the engine (``runtime``,
  ``isolation``) but through ``api``, not even inside a function;
- no module imports another package's private module (``_x``, a module or a package, is
  private to the package that holds it: ``store._sqlite`` to ``store``, ``workers._tokens`` to
  ``workers``, ``orchestrator.cli._entry`` to ``orchestrator.cli``); a package hands on what
  others need in its ``__all__``;
- only ``orchestrator/cli`` imports ``click`` or ``rich``;
- only the command line (``orchestrator/cli``) names ``CliError``: ``api``, ``runtime`` and the
  other doors raise the orchestrator's errors (``orchestrator.errors``);
- each package's ``__init__`` re-exports its public names with a sorted, complete ``__all__``;
- every error class of the product maps to an exit code (SPEC §Command line);
- no import cycle among the product's modules (imports inside functions count: a cycle hidden
  in a function is still a cycle; ``if TYPE_CHECKING:`` imports do not);
- every module of ``orchestrator`` stays under ~650 lines.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "workers", "orchestrator", "migrations")

FRONT_DOORS = ("orchestrator.cli", "orchestrator.mcp", "orchestrator.web", "orchestrator.__main__")
LEAVES = (
    "orchestrator.errors",
    "orchestrator.views",
    "orchestrator.jobs",
    "orchestrator.tomllines",
    "orchestrator.logging",
)
ENGINE = ("orchestrator.runtime", "orchestrator.isolation")
MAX_LINES = 650


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "demo" in path.relative_to(ROOT).parts:
                continue
            out.append((pkg, path))
    return out


def _name(path: Path) -> str:
    """``orchestrator/cli/_app.py`` → ``orchestrator.cli._app`` (a package: its name)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def _walk_runtime(tree: ast.AST) -> list[ast.AST]:
    """Every node but what ``if TYPE_CHECKING:`` holds (types only: never imported)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if _is_type_checking(node):
            assert isinstance(node, ast.If)
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _targets(path: Path, *, types_too: bool = False) -> set[str]:
    """The product modules (and top-level third-party names) ``path`` imports, absolute."""
    module = _name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = list(ast.walk(tree)) if types_too else _walk_runtime(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                where = ".".join([*base, node.module] if node.module else base)
            else:
                where = node.module or ""
            # ``from . import views`` imports the submodule (its package is loaded already);
            # ``from .runtime import Page`` the package, whose table then names the module
            subs = {f"{where}.{a.name}" for a in node.names} & set(_all_names())
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(where)
        elif isinstance(node, ast.Dict) and path.name == "__init__.py":
            # a lazy package's table of ``name: ".module"``: it imports those on first use
            for value in node.values:
                if isinstance(value, ast.Constant) and str(value.value).startswith("."):
                    found.add(f"{package}{value.value}")
    return found


MODULES = _modules()
NAMES = {_name(p): p for _, p in MODULES}


def _all_names() -> dict[str, Path]:
    return NAMES


def _product_imports(path: Path) -> set[str]:
    return {t for t in _targets(path) if t in NAMES}


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 30
    assert {"orchestrator.api", "orchestrator.runtime.job", "orchestrator.isolation.git"} <= set(
        NAMES
    )


@pytest.mark.parametrize(
    ("pkg", "path"), MODULES, ids=[str(p.relative_to(ROOT)) for _, p in MODULES]
)
def test_imports_respect_the_layers_and_the_dependency_boundaries(pkg: str, path: Path) -> None:
    names = {t.split(".")[0] for t in _targets(path, types_too=True)}
    rel = path.relative_to(ROOT).as_posix()
    upward = {"store": {"workers", "orchestrator"}, "workers": {"orchestrator"}}.get(pkg, set())
    assert not names & upward, f"{rel} imports upward: {names & upward}"
    if pkg not in ("store", "migrations"):
        assert not names & {"sqlalchemy", "alembic"}, f"{rel} imports the database layer"
    if rel != "workers/providers/anthropic.py":
        assert "anthropic" not in names, f"{rel} imports the anthropic SDK"
    if rel != "workers/providers/openai.py":
        assert "httpx" not in names, f"{rel} does HTTP with httpx"
    if not rel.startswith("orchestrator/cli/"):
        assert not names & {"click", "rich"}, f"{rel} imports click or rich (presentation)"


ORCHESTRATOR = [(n, p) for n, p in NAMES.items() if _within(n, "orchestrator")]


@pytest.mark.parametrize(("name", "path"), ORCHESTRATOR, ids=[n for n, _ in ORCHESTRATOR])
def test_the_orchestrator_points_one_way_down(name: str, path: Path) -> None:
    """front doors → api → runtime → isolation; leaves below all of them."""
    imported = {t for t in _targets(path, types_too=True) if _within(t, "orchestrator")}
    imported -= {"orchestrator"}  # the package's lazy surface names nothing below by itself
    if not _within(name, FRONT_DOORS):
        doors = {t for t in imported if _within(t, FRONT_DOORS)}
        assert not doors, f"{name} imports a front door: {sorted(doors)}"
    if _within(name, FRONT_DOORS):
        below = {t for t in imported if _within(t, ENGINE)}
        assert not below, f"{name} (a front door) goes around the API: {sorted(below)}"
    if _within(name, "orchestrator.runtime"):
        above = {t for t in imported if _within(t, ("orchestrator.api", "orchestrator.session"))}
        assert not above, f"{name} (runtime) imports the API above it: {sorted(above)}"
    if _within(name, "orchestrator.isolation"):
        allowed = ("orchestrator.isolation", "orchestrator.errors")
        above = {t for t in imported if not _within(t, allowed)}
        assert not above, f"{name} (isolation) imports above itself: {sorted(above)}"
    if _within(name, LEAVES):
        above = {t for t in imported if not _within(t, LEAVES)}
        assert not above, f"{name} (a leaf) imports the layers: {sorted(above)}"


def test_nothing_below_the_front_doors_imports_click_or_rich_even_lazily() -> None:
    """The fast read path and the MCP server rely on it: ``api`` and what it imports stay
    free of presentation libraries, whichever function runs."""
    for name, path in ORCHESTRATOR:
        if _within(name, FRONT_DOORS):
            continue
        heavy = {t.split(".")[0] for t in _targets(path, types_too=True)} & {"click", "rich"}
        assert not heavy, f"{name} imports {sorted(heavy)}"


def _private_to(module: str) -> str | None:
    """The package ``module`` is private to: the one holding its first ``_x`` part
    (``store._sqlite`` → ``store``, ``workers.tools._paths`` → ``workers.tools``); None for a
    public module."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


PRIVATE_IMPORTS_ALLOWED = {
    # ``python -m orchestrator`` runs exactly the console script, which pyproject names
    # ``orchestrator.cli._entry:main``; the package's public ``main`` is the click group's
    # (the one tests drive), so the one entry is named by its module in both places.
    ("orchestrator.__main__", "orchestrator.cli._entry"),
}


@pytest.mark.parametrize(("name", "path"), NAMES.items(), ids=list(NAMES))
def test_no_module_imports_another_packages_private_module(name: str, path: Path) -> None:
    """Inside a package its modules share their privates; from outside, only what its
    ``__init__`` hands on (``__all__``) or a public module. Imports inside functions and for
    types count too: a private module named from outside is a boundary crossed either way."""
    crossed = sorted(
        t
        for t in _targets(path, types_too=True)
        if t in NAMES
        and (owner := _private_to(t)) is not None
        and not _within(name, owner)
        and (name, t) not in PRIVATE_IMPORTS_ALLOWED
    )
    assert not crossed, f"{name} imports another package's private module: {crossed}"


def test_the_private_import_allow_list_holds_only_what_is_still_needed() -> None:
    for name, target in PRIVATE_IMPORTS_ALLOWED:
        assert target in _targets(NAMES[name], types_too=True), f"{name} → {target}: drop it"


def test_only_the_command_line_names_its_cli_error() -> None:
    """``CliError`` is the command line's own; ``api``, ``runtime``, the MCP server and the
    leaves raise an ``OrchestratorError`` that carries the same exit code (``UsageError`` for
    a request refused as asked), so no layer below the CLI speaks in its terms."""
    named = []
    for name, path in NAMES.items():
        if _within(name, ("orchestrator.cli", "orchestrator.errors")):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            ident = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else node.name
                if isinstance(node, ast.alias)
                else None
            )
            if ident == "CliError":
                named.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert not named, f"CliError named below the command line: {named}"


def _isort_style(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.replace("_", "").isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


PACKAGES_WITH_ALL = sorted(
    _name(p) for _, p in MODULES if p.name == "__init__.py" and "__all__" in p.read_text()
)


def test_the_packages_with_a_public_surface_are_found() -> None:
    wanted = {"store", "workers", "orchestrator", "orchestrator.cli", "orchestrator.isolation"}
    assert wanted | {"orchestrator.runtime"} <= set(PACKAGES_WITH_ALL)


def _exported_by_init(path: Path) -> set[str]:
    """The names a package's ``__init__`` takes from its own modules to hand on: those its lazy
    table names, and those it imports without using them itself."""
    tree = ast.parse(path.read_text(), filename=str(path))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names: set[str] = set()
    for node in _walk_runtime(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if [a.name for a in node.names] == ["*"]:  # a module's whole __all__, handed on
                pkg = _name(path)
                names.update(importlib.import_module(f"{pkg}.{node.module}").__all__)
                continue
            bound = [a.asname or a.name for a in node.names]
            names.update(n for n in bound if n not in used)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(value, ast.Constant) and str(value.value).startswith("."):
                    assert isinstance(key, ast.Constant)
                    names.add(str(key.value))
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("pkg", PACKAGES_WITH_ALL)
def test_each_package_exports_a_sorted_complete_all_whose_names_resolve(pkg: str) -> None:
    try:
        module = importlib.import_module(pkg)
    except ImportError as err:  # a front door whose optional library is not installed
        pytest.skip(f"{pkg}: {err}")
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_style), f"{pkg}.__all__ is not sorted"
    assert len(set(names)) == len(names)
    missing = _exported_by_init(NAMES[pkg]) - set(names)
    assert not missing, f"{pkg} makes {sorted(missing)} available but leaves them out of __all__"
    for name in names:
        assert getattr(module, name) is not None


def _error_classes() -> list[type[BaseException]]:
    """Every exception class the product defines where an error is meant to reach a caller:
    the error modules of ``store`` and ``workers``, and every module of ``orchestrator``."""
    found: dict[str, type[BaseException]] = {}
    optional = ("orchestrator.mcp", "orchestrator.web")  # their libraries may be absent
    wanted = ["store.errors", "workers.errors"]
    wanted += [n for n, _ in ORCHESTRATOR if not _within(n, optional)]
    for name in wanted:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


ERRORS = _error_classes()


def test_there_are_error_classes_to_check() -> None:
    names = {e.__name__ for e in ERRORS}
    wanted = {"CliError", "UsageError", "JobFileError", "RepoStateError", "ThreadNotFound"}
    assert wanted | {"ModelError"} <= names


@pytest.mark.parametrize("error", ERRORS, ids=[f"{e.__module__}.{e.__qualname__}" for e in ERRORS])
def test_every_error_class_maps_to_an_exit_code(error: type[BaseException]) -> None:
    """An ``exit_code`` on the class, or a line of ``errors.EXIT_CODES`` for it or a base:
    never the fallback an unforeseen error gets."""
    from orchestrator.errors import EXIT_CODES

    code = getattr(error, "exit_code", None)
    if not (isinstance(code, int) and not isinstance(code, bool)):
        codes = [EXIT_CODES.get(f"{c.__module__}.{c.__qualname__}") for c in error.__mro__]
        code = next((c for c in codes if c is not None), None)
    assert code in (1, 2, 3, 4, 130), f"{error.__module__}.{error.__qualname__} has no exit code"


def test_the_exit_code_table_names_classes_that_exist() -> None:
    from orchestrator.errors import EXIT_CODES

    for qualified in EXIT_CODES:
        module, _, name = qualified.rpartition(".")
        assert hasattr(importlib.import_module(module), name), f"{qualified} does not exist"


def _cycles() -> list[list[str]]:
    graph = {n: sorted(_product_imports(p) - {n}) for n, p in NAMES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_import_cycle_among_the_products_modules() -> None:
    """A package's ``__init__`` importing its own submodules is not a cycle unless a
    submodule imports the package back, which ``_targets`` then shows."""
    cycles = _cycles()
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize(("name", "path"), ORCHESTRATOR, ids=[n for n, _ in ORCHESTRATOR])
def test_every_orchestrator_module_stays_small(name: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it along a seam"
