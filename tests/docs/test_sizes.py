"""The house limits on size: no class over 250 lines, no function over 60 (STYLE.md).

A function that fits on a screen can be read whole; a class over 250 lines
holds more than one job, which composition (daemon/wiring.build_parts,
daemon/inhand.py, daemon/wakeplan.py) splits into parts.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src" / "taskq"
MAX_CLASS = 250
MAX_FUNCTION = 60


def _too_long() -> list[str]:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        if "_vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = MAX_FUNCTION
            else:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_no_class_over_250_lines_and_no_function_over_60() -> None:
    assert _too_long() == []
