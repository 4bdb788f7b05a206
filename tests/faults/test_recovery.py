"""kill -9 of the daemon at any moment: nothing accepted is lost, nothing runs twice
unless an attempt was lost in flight, and the journal says so."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, events, journal_of, read_stamps, stamp_cmd, until, wait_for

from taskq.spool.defaults import default_host_id
from taskq.spool.states import Phase
from taskq.spool.task import ClaimName, TaskName

StartDaemon = Callable[..., Daemon]


def all_in(tq: Taskq, ids: list[str], states: tuple[str, ...]) -> bool:
    now = tq.states()
    return all(now.get(i) in states for i in ids)


@pytest.mark.slow
def test_running_children_are_adopted_not_rerun(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    gate = stamps.parent / "gate"  # opened after the kill: the attempts outlive their daemon
    first = start_daemon()
    ids = [tq.submit("--", *stamp_cmd(stamps, until(gate))) for _ in range(3)]
    wait_for(lambda: len(read_stamps(stamps)) == 3, 30, "three tasks to start")
    first.kill()
    start_daemon()
    wait_for(lambda: all(events(tq.show(t), "adopted") for t in ids), 30, "adoption of all 3")
    gate.touch()
    for task_id in ids:
        doc = tq.wait_state(task_id, ("done",))
        assert len(events(doc, "start")) == 1
        assert events(doc, "adopted") and events(doc, "end")[0]["exit_status"] == 0
    assert sorted(r[0] for r in read_stamps(stamps)) == sorted(ids)


@pytest.mark.slow
def test_attempt_that_ended_while_no_daemon_ran(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    first = start_daemon()
    task_id = tq.submit("--", *stamp_cmd(stamps, "; sleep 0.3; exit 5"))
    wait_for(lambda: read_stamps(stamps), 10, "the task to start")
    first.kill()
    status = tq.spool / "logs" / task_id / "1.status"
    wait_for(lambda: status.read_text() == "S\n5\n", 10, "the supervisor to record a status")
    start_daemon("--retry-delay", "0.1s")
    doc = tq.wait_state(task_id, ("done", "failed"), timeout=20)
    ends = events(doc, "end")
    assert ends[0]["exit_status"] == 5 and "no daemon watched" in ends[0]["notes"][0]
    # exit 5 is a failure: retried as attempt 2 and so on, each attempt once.
    assert [r[1] for r in read_stamps(stamps)] == [e["attempt"] for e in ends]


@pytest.mark.slow
def test_lost_attempt_is_recorded_and_retried(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    first = start_daemon()
    task_id = tq.submit("--", *stamp_cmd(stamps, "; sleep 30"))
    wait_for(lambda: read_stamps(stamps), 10, "the task to start")
    pid = events(tq.show(task_id), "start")[0]["pid"]
    with open(f"/proc/{pid}/stat") as f:
        keeper = int(f.read().rsplit(")", 1)[1].split()[1])  # its supervisor, the keeper
    first.kill()
    # The host lost the attempt too: its supervisor and its group, no status recorded.
    os.kill(keeper, signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)
    start_daemon()
    wait_for(lambda: len(read_stamps(stamps)) == 2, 10, "the retry to start")
    doc = tq.show(task_id)
    [lost] = [e for e in events(doc, "end") if e.get("lost")]
    assert lost["attempt"] == 1 and "may have run in part" in lost["notes"][0]
    assert events(doc, "retry")[0]["next_attempt"] == 2
    tq.run("cancel", task_id, check=False)  # stop the retry's 30-second sleep


@pytest.mark.slow
def test_sigterm_waits_for_children_then_exits_zero(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    daemon = start_daemon("--shutdown-grace", "20s")
    task_id = tq.submit("--", *stamp_cmd(stamps, "; sleep 0.5"))
    wait_for(lambda: read_stamps(stamps), 10, "the task to start")
    assert daemon.stop(signal.SIGTERM) == 0
    assert tq.state(task_id) == "done"
    assert not list((tq.spool / "run").iterdir())


@pytest.mark.slow
def test_shutdown_grace_leaves_attempts_for_the_next_daemon(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    gate = stamps.parent / "gate"  # the attempt runs until the test has looked
    daemon = start_daemon("--shutdown-grace", "0.2s")
    later = tq.submit("--in", "3s", "--", *stamp_cmd(stamps))
    task_id = tq.submit("--", *stamp_cmd(stamps, until(gate)))
    wait_for(lambda: read_stamps(stamps), 30, "the task to start")
    assert daemon.stop(signal.SIGINT) == 0  # after the 0.2 s grace, not the attempt's end
    assert tq.state(task_id) == "running" and tq.state(later) == "pending"
    gate.touch()
    start_daemon()
    tq.wait_state(task_id, ("done",))
    tq.wait_state(later, ("done",))
    assert sorted(r[0] for r in read_stamps(stamps)) == sorted([task_id, later])


@pytest.mark.slow
def test_surviving_daemon_recovers_a_dead_neighbour(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    gate = stamps.parent / "gate"  # opened after the kill: the attempts outlive their daemon
    victim = start_daemon()
    ids = [tq.submit("--", *stamp_cmd(stamps, until(gate))) for _ in range(2)]
    wait_for(lambda: len(read_stamps(stamps)) == 2, 30, "both tasks to start")
    start_daemon("--lease", "1.5s")
    victim.kill()
    wait_for(lambda: all(events(tq.show(t), "adopted") for t in ids), 30, "adoption of both")
    gate.touch()
    for task_id in ids:
        doc = tq.wait_state(task_id, ("done",))
        assert events(doc, "adopted")
    assert len(read_stamps(stamps)) == 2


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_nothing(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    rng = random.Random(int(os.environ.get("TASKQ_TEST_SEED", "1")))
    now = time.time()
    lines = [
        {
            "command": stamp_cmd(stamps, f"; sleep {rng.uniform(0, 0.4):.3f}"),
            "run_at": f"@{now + rng.uniform(0, 3):.6f}",
        }
        for _ in range(40)
    ]  # one batch: forty `taskq submit` processes took the CPU of the daemons under test
    batch = "".join(json.dumps(line) + "\n" for line in lines).encode()
    ids = tq.submit("--batch", "-", input=batch).split()
    for _ in range(6):
        daemon = start_daemon("--workers", "6", "--retry-delay", "0.1s")
        time.sleep(rng.uniform(0.05, 0.6))  # a random crash point, not a wait for a result
        daemon.kill()
    start_daemon("--workers", "6", "--retry-delay", "0.1s")
    wait_for(lambda: all_in(tq, ids, ("done",)), 60, "every task to finish")
    runs = collections.Counter(r[0] for r in read_stamps(stamps))
    for task_id in ids:
        records = journal_of(tq, task_id)
        lost = [e for e in records if e["event"] == "end" and e.get("lost")]
        assert 1 <= runs[task_id] <= 1 + len(lost), (task_id, records)
    assert list((tq.spool / "claimed").iterdir()) == []


def _orphan(tq: Taskq, task_id: str, phase: Phase) -> None:
    """Move a pending task into claimed/ as a dead daemon on this host left it."""
    [path] = (tq.spool / "pending").glob(f"*/*_{task_id}_1_*")
    claim = ClaimName(TaskName.parse(path.name), phase, 0, 999_999_999, "testhost")
    os.rename(path, tq.spool / "claimed" / str(claim))


@pytest.mark.slow
def test_claims_of_a_dead_daemon_that_never_spawned_are_released(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    claimed = tq.submit("--", *stamp_cmd(stamps))
    started = tq.submit("--", *stamp_cmd(stamps))
    _orphan(tq, claimed, Phase.CLAIMED)
    _orphan(tq, started, Phase.STARTED)
    assert tq.state(claimed) == "claimed" and tq.state(started) == "running"
    start_daemon()
    for task_id in (claimed, started):
        doc = tq.wait_state(task_id, ("done",))
        assert events(doc, "released") and doc["attempt"] == 1
    assert sorted(r[0] for r in read_stamps(stamps)) == sorted([claimed, started])


@pytest.mark.slow
def test_status_tells_a_dead_daemon_from_a_live_one(tq: Taskq, start_daemon: StartDaemon) -> None:
    here = default_host_id()
    live = start_daemon("--host-id", here)
    dead = start_daemon("--host-id", here)
    dead.kill()
    records = {r["pid"]: r for r in json.loads(tq.run("status", "--json").stdout)}
    assert records[live.proc.pid]["alive"] is True
    assert records[dead.proc.pid]["alive"] is False
    text = tq.run("status").stdout.decode()
    assert f"{here}_{dead.proc.pid}: NOT running" in text
    assert f"{here}_{live.proc.pid}: dispatching" in text
    status_file = tq.spool / "run" / f"{here}_{live.proc.pid}.status"
    assert oct(status_file.stat().st_mode & 0o777) == "0o600"
    assert oct((tq.spool / "doorbell").stat().st_mode & 0o777) == "0o600"


@pytest.mark.slow
def test_an_attempt_that_never_began_is_released_not_lost(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    """Its daemon died after creating the status file, before the spawn: no attempt used."""
    task_id = tq.submit("--", *stamp_cmd(stamps))
    _orphan(tq, task_id, Phase.STARTED)
    log_dir = tq.spool / "logs" / task_id
    log_dir.mkdir(parents=True)
    (log_dir / "1.status").write_bytes(b"")  # created, never written by a supervisor
    start_daemon()
    doc = tq.wait_state(task_id, ("done",))
    assert events(doc, "released")[0]["reason"] == "never began"
    assert [r[1] for r in read_stamps(stamps)] == [1] and not any(
        e.get("lost") for e in events(doc, "end")
    )
