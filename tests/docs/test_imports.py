"""The import graph of taskq has no cycle, counting the imports inside functions too;
and each import inside a function says why it is there (docs/design.md's rule).

A cycle hidden by an import inside a function still ties two modules into
one: neither can be read, tested or moved without the other. grimp (which
import-linter uses for the layers contract in pyproject.toml) reads every
import statement, wherever it is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import grimp

SOURCE = Path(__file__).resolve().parents[2] / "src" / "taskq"


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle() -> None:
    assert _cycles(grimp.build_graph("taskq")) == []


def _inside_functions(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    yield inner


def test_every_import_inside_a_function_says_why() -> None:
    """docs/design.md's rule: an import is at the top of its module, or a comment says why not.

    The comment is on the import's line or the line above; imports one after
    another share the first one's.
    """
    silent = []
    for path in sorted(SOURCE.rglob("*.py")):
        lines = path.read_text().splitlines()
        said: set[int] = set()  # the last lines of imports whose reason is given
        for node in sorted(set(_inside_functions(ast.parse("\n".join(lines)))), key=_line):
            end = node.end_lineno or node.lineno
            above = node.lineno - 1
            if "#" in lines[end - 1] or lines[above - 1].strip().startswith("#") or above in said:
                said.add(end)
            else:
                silent.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    assert silent == []


def _line(node: ast.stmt) -> int:
    return node.lineno
