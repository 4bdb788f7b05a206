"""The pickup under faults: a drop file whose handling raises, or that kills daemons; a kill -9
between the steps of filing a group of drop files.

A real daemon takes in real drop files of a spool `taskq init --shared`
made. They are root's own (ids bound to uid 0, as a member's are to hers):
the pickup takes any owner's file the same way, and no throwaway user is
needed to see what it does with one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, read_stamps, run_until_it_dies, stamp_cmd, wait_for

from taskq.spool import drop
from taskq.spool.task import DEFAULT_PATH, TaskBody

StartDaemon = Callable[..., Daemon]
pytestmark = pytest.mark.slow  # real daemons, some killed: seconds apiece


@pytest.fixture
def shared(tq: Taskq) -> Taskq:
    tq.run("init", "--shared", "root", str(tq.spool))
    return tq


def put(tq: Taskq, stamps: Path, key: str | None = None) -> str:
    """A drop file as a member's submit writes one (NAME.part, then renamed); its task id."""
    now = time.time_ns() // 1000
    task_id, nonce = drop.member_id(os.geteuid(), now)
    body = TaskBody(
        id=task_id,
        argv=stamp_cmd(stamps),
        run_at=now,
        submitted_at=now,
        cwd="/",
        env={"PATH": DEFAULT_PATH},
        key=key,
    )
    path = tq.spool / "drop" / f"{task_id}.task"
    Path(f"{path}.part").write_bytes(drop.encode_submission(nonce, body))
    os.rename(f"{path}.part", path)
    return task_id


def answer(tq: Taskq, task_id: str) -> dict[str, object]:
    """The daemon's answer to a submission (written just after it is quarantined)."""
    path = tq.spool / "replies" / f"{task_id}.task"
    wait_for(path.exists, 30, f"an answer to {task_id}")
    doc: dict[str, object] = json.loads(path.read_text())
    return doc


def reasons(tq: Taskq) -> str:
    return "".join(p.read_text() for p in (tq.spool / "corrupt").glob("*.reason"))


def test_a_drop_file_whose_handling_raises_is_quarantined_and_the_loop_goes_on(
    shared: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    bad = put(shared, stamps)
    raises = {"TASKQ_CRASH_AT": "pickup.read", "TASKQ_CRASH_SIGNAL": "RAISE"}
    daemon = start_daemon("--rescan", "0.2s", env=raises)  # the first file read raises
    wait_for(lambda: "pickup failed: Injected" in reasons(shared), 30, "the file quarantined")
    reply = answer(shared, bad)
    assert reply["status"] != 0 and "pickup failed: Injected" in str(reply["message"]), reply
    good = put(shared, stamps)
    shared.run("wait", "--timeout", "30", good)
    assert [t for t, _, _ in read_stamps(stamps)] == [good]
    refused = [ln for ln in daemon.text().splitlines() if "quarantined" in ln]
    assert len(refused) == 1 and "pickup failed: Injected" in refused[0], daemon.text()
    assert daemon.proc.poll() is None


def test_a_drop_file_two_daemons_died_reading_is_quarantined_by_the_third(
    shared: Taskq, start_daemon: StartDaemon, tmp_path: Path, stamps: Path
) -> None:
    poison = put(shared, stamps)
    for n in (1, 2):  # each dies right after reading it, in the guard's handling
        assert run_until_it_dies(shared, tmp_path / f"dies{n}.log", "pickup.read") == -9
    assert "a second death sets it aside" in (tmp_path / "dies2.log").read_text()
    daemon = start_daemon()
    good = put(shared, stamps)
    shared.run("wait", "--timeout", "30", good)
    assert [t for t, _, _ in read_stamps(stamps)] == [good]
    assert f"{poison}.task" in reasons(shared) and "died twice" in reasons(shared)
    reply = answer(shared, poison)
    assert reply["status"] != 0 and "cannot be taken in" in str(reply["message"]), reply
    assert "died twice" in daemon.text()


# Steps of filing a group (client/submit.py submit_batch): every body in tmp/ and the keys
# bound, none placed; the second task placed in its bucket, the others not yet.
KILLED_AT = ["submit.key-bound", "submit.renamed:2"]


@pytest.mark.parametrize("point", KILLED_AT)
def test_a_daemon_killed_while_filing_a_group_loses_nothing(
    shared: Taskq, start_daemon: StartDaemon, tmp_path: Path, stamps: Path, point: str
) -> None:
    ids = [put(shared, stamps, key="k1"), put(shared, stamps), put(shared, stamps, key="k2")]
    ids.append(put(shared, stamps))
    assert run_until_it_dies(shared, tmp_path / "dies.log", point) == -9
    daemon = start_daemon()
    for task_id in ids:
        shared.run("wait", "--timeout", "30", task_id)
    assert sorted(t for t, _, _ in read_stamps(stamps)) == sorted(ids)  # each once
    assert not list((shared.spool / "corrupt").iterdir()), reasons(shared)
    assert not list((shared.spool / "pickup").iterdir())
    assert daemon.proc.poll() is None and "stopped" not in daemon.text()


def test_the_owner_waits_for_a_submission_still_in_the_drop(shared: Taskq, stamps: Path) -> None:
    """No daemon runs: the owner's `wait` of a member's submission waits (and times out, 124)
    rather than saying there is no such task (3), as the member's own wait does."""
    task_id = put(shared, stamps)
    proc = shared.run("wait", "--timeout", "1s", task_id, check=False)
    assert proc.returncode == 124, proc.stderr.decode()
    assert b"still in the drop" in proc.stderr
