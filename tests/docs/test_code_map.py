"""docs/design.md's map of the code names exactly the modules the folders hold."""

from __future__ import annotations

import re
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
SOURCE = TOP / "src" / "taskq"


def _mapped() -> set[str]:
    """The modules the map names, as paths below src/taskq/ (spool/layout.py)."""
    text = (TOP / "docs" / "design.md").read_text()
    block = text.split("## A map of the code", 1)[1].split("```", 2)[1]
    modules, package = set(), ""
    for line in block.splitlines():
        if m := re.match(r"(\S+)", line):
            name = m.group(1)
            package = name if name.endswith("/") else ""
            if not package:
                modules.add(name)
        elif m := re.match(r"  (\w+)\s", line):
            modules.add(f"{package}{m.group(1)}.py")
    return modules


def _folders() -> set[str]:
    found = {str(p.relative_to(SOURCE)) for p in SOURCE.rglob("*.py")}
    return {p for p in found if not p.endswith("__init__.py")}


def test_the_map_of_the_code_names_every_module_and_no_other() -> None:
    mapped, present = _mapped(), _folders()
    assert sorted(present - mapped) == [], "add these to docs/design.md's map of the code"
    assert sorted(mapped - present) == [], "docs/design.md's map names modules that are gone"
