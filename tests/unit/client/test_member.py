"""A member's look at a submission while a daemon files it: never "no task" for a filed one.

A daemon files the task (or answers the drop file) before it removes the
drop file from pickup/, so a member who finds nothing in the spool, then
nothing in the drop, looks at the spool again: the task was filed between
the two looks. Here the daemon's step between the looks is made by the
lookup itself, on a real spool.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskq.client import member
from taskq.errors import NotFound
from taskq.spool.layout import DROP_DIRS, Spool
from taskq.spool.task import new_id
from taskq.times.clock import wall_us


def _shared(root: Path) -> Spool:
    spool = Spool(str(root))
    spool.init()
    for sub in DROP_DIRS:
        os.makedirs(os.path.join(spool.root, sub), exist_ok=True)
    return spool


def test_a_task_filed_between_the_looks_is_found(tmp_path: Path) -> None:
    spool = _shared(tmp_path / "spool")
    task_id = new_id(wall_us())
    claim = Path(spool.pickup, f"{task_id}.task_20300101T000000.000000Z_1_h")
    claim.touch()  # a daemon has it in pickup/
    looks: list[str] = []

    def lookup(wanted: str) -> str:
        looks.append(wanted)
        if len(looks) == 1:
            claim.unlink()  # meanwhile the daemon filed it and removed its claim
            raise NotFound(f"no task {wanted}")
        return "found"

    assert member.settle(spool, task_id, lookup, timeout=1) == "found"
    assert looks == [task_id, task_id]


def test_a_task_the_spool_never_knew_is_not_found(tmp_path: Path) -> None:
    spool = _shared(tmp_path / "spool")

    def lookup(wanted: str) -> str:
        raise NotFound(f"no task {wanted}")

    with pytest.raises(NotFound):
        member.settle(spool, new_id(wall_us()), lookup, timeout=1)
