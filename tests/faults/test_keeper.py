"""The keeper that supervises a daemon's attempts: killed, hung, or outliving its daemon.

Real daemons, a real keeper, real signals: an attempt of a dead or hung
keeper is killed and recorded lost (then retried, never beside itself); a
keeper whose daemon died goes on recording exit statuses, which the next
daemon adopts and settles.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    Daemon,
    Taskq,
    events,
    kill_left,
    read_stamps,
    stamp_cmd,
    until,
    wait_for,
)

StartDaemon = Callable[..., Daemon]


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None


def gone(pid: int) -> bool:
    """Whether a process has ended (gone, or a zombie no one reaped yet)."""
    fields = _stat(pid)
    return fields is None or fields[0] == "Z"


def keeper_of(tq: Taskq, task_id: str) -> tuple[int, int]:
    """(the attempt's pid, its keeper's pid): the keeper is the command's parent."""
    pid = int(events(tq.show(task_id), "start")[-1]["pid"])
    fields = _stat(pid)
    assert fields is not None, "the attempt is not running"
    keeper = int(fields[1])
    with open(f"/proc/{keeper}/cmdline", "rb") as f:
        assert b"taskq.daemon.keeper" in f.read()
    return pid, keeper


def _lost_then_done(tq: Taskq, ids: list[str], stamps: Path, why: str) -> None:
    for task_id in ids:
        doc = tq.wait_state(task_id, ("done",), timeout=60)
        first, second = events(doc, "end")
        assert first["lost"] and why in first["notes"][-1], first
        assert second["attempt"] == 2 and second["exit_status"] == 0
    runs = sorted((r[0], r[1]) for r in read_stamps(stamps))
    assert runs == sorted((t, a) for t in ids for a in (1, 2))  # each attempt ran once


@pytest.mark.slow
def test_keeper_killed_with_attempts_in_flight(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    gate = stamps.parent / "gate"
    start_daemon("--retry-delay", "0.1s")
    ids = [tq.submit("--", *stamp_cmd(stamps, until(gate))) for _ in range(3)]
    wait_for(lambda: len(read_stamps(stamps)) == 3, 30, "three attempts to start")
    pids = [keeper_of(tq, t)[0] for t in ids]
    keeper = keeper_of(tq, ids[0])[1]
    os.kill(keeper, signal.SIGKILL)
    # Every attempt of the dead keeper is killed, none left to run beside its retry.
    wait_for(lambda: all(gone(p) for p in pids), 30, "the dead keeper's attempts to be killed")
    wait_for(lambda: len(read_stamps(stamps)) == 6, 30, "the retries to start")
    assert keeper_of(tq, ids[0])[1] != keeper  # a new keeper runs them
    gate.touch()
    _lost_then_done(tq, ids, stamps, "keeper died")


@pytest.mark.slow
def test_daemon_killed_while_its_keeper_lives(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    early, late = stamps.parent / "early", stamps.parent / "late"
    first = start_daemon()
    ended_alone = tq.submit(
        "--max-attempts", "1", "--", *stamp_cmd(stamps, until(early) + "; exit 5")
    )
    adopted = tq.submit("--", *stamp_cmd(stamps, until(late) + "; exit 0"))
    wait_for(lambda: len(read_stamps(stamps)) == 2, 30, "both attempts to start")
    keeper = keeper_of(tq, adopted)[1]
    first.kill()
    early.touch()  # ends while no daemon runs: the keeper records its status
    status = tq.spool / "logs" / ended_alone / "1.status"
    wait_for(lambda: status.read_text() == "S\n5\n", 30, "the keeper to record exit 5")
    assert not gone(keeper)
    start_daemon()
    doc = tq.wait_state(ended_alone, ("failed",), timeout=30)
    [end] = events(doc, "end")
    assert end["exit_status"] == 5 and "no daemon watched" in end["notes"][0]
    wait_for(lambda: events(tq.show(adopted), "adopted"), 30, "the running attempt's adoption")
    late.touch()
    doc = tq.wait_state(adopted, ("done",), timeout=30)
    assert [e["exit_status"] for e in events(doc, "end")] == [0]
    assert len(events(doc, "start")) == 1 and len(read_stamps(stamps)) == 2  # none ran twice
    # With its daemon gone and nothing left to run, the old keeper exits.
    wait_for(lambda: gone(keeper), 30, "the orphaned keeper to exit")


def test_a_command_deaf_to_term_left_by_a_killed_daemon_ends_with_its_test(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    # The keeper outlives its daemon's SIGKILL by design, and so does what it runs: the
    # fixture's teardown (kill_left) must end both, or a test leaves them running.
    daemon = start_daemon()
    task_id = tq.submit("--", *stamp_cmd(stamps, "; trap '' TERM; sleep 300"))
    wait_for(lambda: read_stamps(stamps), 30, "the attempt to start")
    pid, keeper = keeper_of(tq, task_id)
    daemon.kill()
    assert not gone(pid) and not gone(keeper)
    kill_left(tq.spool)
    wait_for(lambda: gone(pid) and gone(keeper), 30, "the command and its keeper killed")


@pytest.mark.slow
def test_hung_keeper_is_killed_and_its_attempts_retried(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    gate = stamps.parent / "gate"
    daemon = start_daemon("--lease", "1.5s", "--retry-delay", "0.1s")
    task_id = tq.submit("--", *stamp_cmd(stamps, until(gate)))
    wait_for(lambda: read_stamps(stamps), 30, "the attempt to start")
    pid, keeper = keeper_of(tq, task_id)
    os.kill(keeper, signal.SIGSTOP)  # hung: it answers nothing, records nothing
    try:
        wait_for(lambda: gone(keeper) and gone(pid), 60, "the hung keeper and its attempt killed")
    finally:
        if not gone(keeper):
            os.kill(keeper, signal.SIGKILL)
    wait_for(lambda: len(read_stamps(stamps)) == 2, 30, "the retry to start")
    gate.touch()
    _lost_then_done(tq, [task_id], stamps, "keeper died")
    assert "did not answer a ping" in daemon.text()


@pytest.mark.slow
def test_a_keeper_stalled_past_5s_is_not_hung_under_a_long_lease(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    # A shared filesystem's write stall (MooseFS: 3.9 s) stalls the keeper's answers
    # as long. Under a 30 s lease it is hung only after 10 s, not at 5 s.
    gate = stamps.parent / "gate"
    daemon = start_daemon("--lease", "30s")
    running = tq.submit("--", *stamp_cmd(stamps, until(gate)))
    wait_for(lambda: read_stamps(stamps), 30, "the first attempt to start")
    keeper = keeper_of(tq, running)[1]
    os.kill(keeper, signal.SIGSTOP)
    try:
        asked = tq.submit("--", *stamp_cmd(stamps))
        status = tq.spool / "logs" / asked / "1.status"
        wait_for(status.exists, 30, "the daemon to ask the stalled keeper for a spawn")
        time.sleep(6)  # the stall itself: longer than 5 s, shorter than a third of the lease
    finally:
        with contextlib.suppress(ProcessLookupError):  # (killed as hung: the asserts say so)
            os.kill(keeper, signal.SIGCONT)
    tq.wait_state(asked, ("done",), timeout=30)
    gate.touch()
    for task_id in (running, asked):
        doc = tq.wait_state(task_id, ("done",), timeout=30)
        assert [e.get("exit_status") for e in events(doc, "end")] == [0], doc
    assert not gone(keeper)
    assert "killing the attempts' keeper" not in daemon.text()
