"""The checkpoint package's modules are layered: at run time each imports
only modules below it, so there is no circle inside the package (an
import under ``if TYPE_CHECKING`` is for annotations only and not counted)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lgcli" / "checkpoint"


def sibling_imports(source: str) -> set[str]:
    """The package modules that `source` imports when it runs (``from .x import``,
    ``from . import x``), outside ``if TYPE_CHECKING`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module] if node.module else [alias.name for alias in node.names])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return {name.split(".")[0] for name in found}


def import_order(sources: dict[str, str]) -> list[str]:
    """The modules, each after those it imports; graphlib.CycleError if they import in a circle."""
    graph = {name: sibling_imports(text) & set(sources) for name, text in sources.items()}
    return list(graphlib.TopologicalSorter(graph).static_order())


def test_the_package_modules_import_in_one_direction():
    sources = {path.stem: path.read_text() for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    assert {"reading", "writing", "metadata", "companions", "atomic"} <= set(sources)
    order = import_order(sources)
    assert order.index("reading") > order.index("loaded") and order.index("writing") > order.index("atomic")


def test_the_check_finds_a_circle():
    sources = {"a": "from .b import x\n", "b": "from . import c\n", "c": "from .a import y\n",
               "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import z\n"}
    with pytest.raises(graphlib.CycleError):
        import_order(sources)
    assert sibling_imports(sources["d"]) == set()
