"""The layout's rules, checked by reading the imports of every module of the product.

- layers point one way: ``store`` ← ``workers`` ← ``orchestrator``;
- only ``store`` and ``migrations`` import ``sqlalchemy`` (and ``alembic``);
- only the Anthropic provider imports ``anthropic``; only the OpenAI-compatible provider does
  HTTP with ``httpx``;
- each package's ``__init__`` re-exports its public names with a sorted ``__all__``.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "workers", "orchestrator", "migrations")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "demo" in path.relative_to(ROOT).parts:
                continue
            out.append((pkg, path))
    return out


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


MODULES = _modules()


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) > 30


@pytest.mark.parametrize(
    ("pkg", "path"), MODULES, ids=[str(p.relative_to(ROOT)) for _, p in MODULES]
)
def test_imports_respect_the_layers_and_the_dependency_boundaries(pkg: str, path: Path) -> None:
    names = _imports(path)
    rel = path.relative_to(ROOT).as_posix()
    upward = {"store": {"workers", "orchestrator"}, "workers": {"orchestrator"}}.get(pkg, set())
    assert not names & upward, f"{rel} imports upward: {names & upward}"
    if pkg not in ("store", "migrations"):
        assert not names & {"sqlalchemy", "alembic"}, f"{rel} imports the database layer"
    if rel != "workers/providers/anthropic.py":
        assert "anthropic" not in names, f"{rel} imports the anthropic SDK"
    if rel != "workers/providers/openai.py":
        assert "httpx" not in names, f"{rel} does HTTP with httpx"


def _isort_style(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.replace("_", "").isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize(
    "pkg", ["store", "workers", "workers.tools", "workers.providers", "orchestrator"]
)
def test_each_package_exports_a_sorted_all_whose_names_resolve(pkg: str) -> None:
    module = importlib.import_module(pkg)
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_style), f"{pkg}.__all__ is not sorted"
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(module, name) is not None
