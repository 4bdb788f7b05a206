"""The pickup on its own, on a real spool: filed once, claims taken over, junk set aside.

The drop files here are the test's own (root's, uid 0), so they are checked
as a member's would be with uid 0; tests/shared/test_drop*.py run the same
through real members and a root daemon.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from taskq.daemon.commit import GroupCommit
from taskq.daemon.crew import Crew
from taskq.daemon.pickup import Pickup
from taskq.daemon.poison import PoisonGuard
from taskq.daemon.policy import Backoff
from taskq.daemon.settle import Settler
from taskq.spool import drop, fsutil, walk
from taskq.spool import runas as security
from taskq.spool.drop import Claimed, DropName, Request
from taskq.spool.layout import DROP_DIRS, Spool
from taskq.spool.task import TaskBody, new_id
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock
from taskq.times.timespec import HOUR, MS, SECOND

T0 = 1_800_000_000 * SECOND


class Bed:
    def __init__(self, root: Path, pid: int = 4242) -> None:
        self.spool = Spool(str(root))
        self.spool.init()
        for sub in DROP_DIRS:
            os.makedirs(os.path.join(self.spool.root, sub), exist_ok=True)
        self.wall = time.time_ns() // 1000  # the files' stamps are real: so is the clock
        self.mono = 5 * SECOND
        self.clock = Clock(1 * MS, 2 * SECOND, wall=lambda: self.wall, mono=lambda: self.mono)
        self.clock.set_offset(0)
        commit = GroupCommit(self.clock.mono)
        settler = Settler(self.spool, commit, Backoff(), lambda name: None)
        poison = PoisonGuard(self.spool, "h1", pid, self.clock.now)
        daemon = DaemonId("h1", pid)
        crew = Crew(self.spool, daemon, self.clock, 10 * SECOND, commit, settler, poison)
        self.pickup = Pickup(crew, security.UserRules(), HOUR)

    def later(self, us: int) -> None:
        self.wall += us
        self.mono += us

    def drop_task(self, **fields: object) -> str:
        task_id, nonce = drop.member_id(os.geteuid(), self.wall)
        body = TaskBody(
            id=task_id,
            argv=["true"],
            run_at=self.wall + HOUR,
            submitted_at=self.wall,
            **fields,  # type: ignore[arg-type]
        )
        self.put(f"{task_id}.task", drop.encode_submission(nonce, body))
        return task_id

    def put(self, name: str, data: bytes) -> None:
        with open(os.path.join(self.spool.drop, name), "wb") as f:
            f.write(data)

    def pending(self) -> list[str]:
        return [
            e
            for b in os.listdir(self.spool.pending)
            for e in os.listdir(f"{self.spool.pending}/{b}")
        ]

    def answer(self, name: str) -> dict[str, object]:
        doc: dict[str, object] = json.loads(Path(self.spool.replies, name).read_text())
        return doc


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    return Bed(tmp_path / "spool")


def test_a_submission_is_filed_once_even_when_taken_in_again(bed: Bed) -> None:
    task_id = bed.drop_task(key="k")
    data = Path(bed.spool.drop, f"{task_id}.task").read_bytes()
    took = bed.pickup.run(bed.wall)
    assert took.filed == 1 and not took.more
    assert [task_id in e for e in bed.pending()] == [True]
    assert os.listdir(bed.spool.drop) == [] and os.listdir(bed.spool.pickup) == []
    filed = TaskBody.from_json(
        Path(bed.spool.pending).glob(f"*/*{task_id}*").__next__().read_bytes()
    )
    assert filed.submitter == os.geteuid()
    bed.put(f"{task_id}.task", data)  # as if a daemon died before it removed the drop file
    assert bed.pickup.run(bed.wall).filed == 0
    assert len(bed.pending()) == 1 and os.listdir(bed.spool.drop) == []


def test_a_dead_daemons_claim_is_taken_over(bed: Bed) -> None:
    task_id = bed.drop_task()
    dead = Claimed(DropName(task_id, "task"), bed.wall + HOUR, 999_999, "h1")
    os.rename(f"{bed.spool.drop}/{task_id}.task", f"{bed.spool.pickup}/{dead}")
    other_host = Claimed(DropName(new_id(bed.wall), "cancel"), bed.wall + HOUR, 1, "h2")
    Path(bed.spool.pickup, str(other_host)).write_bytes(Request("cancel", task_id).encode())
    assert bed.pickup.run(bed.wall).filed == 1  # same host, no lock: its daemon is gone
    assert os.listdir(bed.spool.pickup) == [str(other_host)]  # another host's, lease running
    bed.later(2 * HOUR)
    bed.pickup.run(bed.wall)
    assert os.listdir(bed.spool.pickup) == []
    assert bed.answer(f"{other_host.name}")["status"] == 0  # cancelled: the task was ours


def test_junk_is_set_aside_and_unfinished_files_are_left(bed: Bed) -> None:
    bed.put("x\nforged log line", b"{}")
    bed.put(f"{new_id(T0)}.task.part", b"half")
    bed.put(".nfs0001", b"")
    os.mkfifo(f"{bed.spool.drop}/{new_id(T0)}.task")
    bed.pickup.run(bed.wall)
    reasons = "".join(p.read_text() for p in Path(bed.spool.corrupt).glob("*.reason"))
    assert "not a drop file name" in reasons and "not a regular file" in reasons
    assert sorted(os.listdir(bed.spool.drop)) == sorted(
        e for e in os.listdir(bed.spool.drop) if e.endswith(".part") or e.startswith(".")
    )
    assert len(os.listdir(bed.spool.drop)) == 2
    bed.later(2 * HOUR)  # abandoned since
    bed.pickup.run(bed.wall)
    assert os.listdir(bed.spool.drop) == []


def test_a_bad_body_or_a_foreign_id_is_refused_and_answered(bed: Bed) -> None:
    task_id, nonce = drop.member_id(os.geteuid() + 1, T0)  # made for another uid
    body = TaskBody(id=task_id, argv=["true"], run_at=T0, submitted_at=T0)
    bed.put(f"{task_id}.task", drop.encode_submission(nonce, body))
    deep = new_id(T0)
    bed.put(f"{deep}.cancel", b"[" * 100_000)
    bed.pickup.run(bed.wall)
    assert bed.pending() == []
    assert "was not made for uid" in str(bed.answer(f"{task_id}.task")["message"])
    assert bed.answer(f"{deep}.cancel")["status"] == 2


def test_a_request_for_no_task_costs_no_search(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request names a task by id: one hint to read, never a listing of the whole spool."""

    def no_search(spool: Spool, ids: set[str]) -> None:
        raise AssertionError("the spool was searched")

    monkeypatch.setattr(walk, "find", no_search)
    asked = new_id(bed.wall)
    bed.put(f"{asked}.cancel", Request("cancel", new_id(bed.wall)).encode())
    bed.pickup.run(bed.wall)
    answer = bed.answer(f"{asked}.cancel")
    assert answer["status"] == 3 and "no task" in str(answer["message"])


def test_a_pass_files_its_submissions_together(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """One sync barrier for the pass (submit_batch's syncs), not one submit's fsyncs each; and
    one key of two members is two keys."""
    syncs: list[str] = []

    def counted(name: str) -> None:
        real = getattr(fsutil, name)

        def sync(*args: Any) -> None:
            syncs.append(name.removesuffix("_fd"))
            real(*args)

        monkeypatch.setattr(fsutil, name, sync)

    counted("syncfs_fd")  # every syncfs, by path or (a batch's) through tmp/'s descriptor
    counted("fsync_dir")
    mine = [bed.drop_task(key="k")] + [bed.drop_task() for _ in range(4)]
    nobody = 65534
    task_id, nonce = drop.member_id(nobody, bed.wall)
    body = TaskBody(id=task_id, argv=["true"], run_at=bed.wall, submitted_at=bed.wall, key="k")
    bed.put(f"{task_id}.task", drop.encode_submission(nonce, body))
    os.chown(f"{bed.spool.drop}/{task_id}.task", nobody, -1)
    assert bed.pickup.run(bed.wall).filed == 6
    assert sorted(e.split("_")[1] for e in bed.pending()) == sorted([*mine, task_id])
    assert syncs.count("syncfs") == 3 and syncs.count("fsync_dir") <= 2, syncs
