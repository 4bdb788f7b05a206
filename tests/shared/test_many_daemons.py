"""Several daemons on one spool, with skewed clocks, pauses and crashes.

Hosts are simulated by distinct --host-id values over one spool directory;
skewed clocks by libfaketime (Debian package faketime), which shifts a
process's clock but not the file timestamps the kernel stamps.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, events, journal_of, read_stamps, stamp_cmd, wait_for

from taskq.client.submit import submit
from taskq.spool.layout import Spool
from taskq.spool.states import Phase
from taskq.spool.task import DEFAULT_PATH, TaskBody, new_id
from taskq.times.timespec import SECOND
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]
# The library itself, not the faketime(1) wrapper: the wrapper forks, so a
# signal sent to it would not reach the daemon.
LIBFAKETIME: str | None = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)
needs_faketime = pytest.mark.skipif(
    LIBFAKETIME is None, reason="libfaketime (Debian package faketime) is missing"
)


@pytest.fixture
def start_host(start_daemon: StartDaemon) -> StartDaemon:
    """Start daemons acting as other hosts; under libfaketime when skew is given."""

    def start(host: str, *args: str, skew: str | None = None) -> Daemon:
        env = None
        if skew is not None:
            env = {"LD_PRELOAD": str(LIBFAKETIME)}
            if skew:
                env["FAKETIME"] = skew
        return start_daemon(*args, host=host, env=env)

    return start


def real_stamp(stamps: Path, extra: str = "") -> list[str]:
    """Like stamp_cmd, but sure to read the real clock even if LD_PRELOAD leaked."""
    date = "env -u LD_PRELOAD -u FAKETIME date +%s.%N"
    return ["sh", "-c", f'echo "$TASKQ_ID $TASKQ_ATTEMPT $({date})" >> {stamps}{extra}']


@pytest.mark.slow
@needs_faketime
def test_four_daemons_skewed_clocks_never_early_exactly_once(
    tq: Taskq, tmp_path: Path, start_host: StartDaemon, stamps: Path
) -> None:
    n = int(os.environ.get("TASKQ_TEST_TASKS", "400"))  # more with TASKQ_TEST_TASKS
    common = ["--workers", "8", "--lease", "10s", "--clock-check", "1s"]
    daemons = {
        "plain-a": start_host("plain-a", *common),
        "plain-b": start_host("plain-b", *common),
        "ahead": start_host("ahead", *common, skew="+30s"),
        "behind": start_host("behind", *common, skew="-30s"),
    }
    spool = Spool(str(tq.spool))
    base = time.time_ns() // 1000 + 3 * SECOND
    ids = []
    for i in range(n):
        due = base + i * 20 * SECOND // n
        body = TaskBody(
            id=new_id(time.time_ns() // 1000),
            argv=real_stamp(stamps),
            run_at=due,
            submitted_at=time.time_ns() // 1000,
            cwd=str(tmp_path),
            env={"PATH": DEFAULT_PATH},
        )
        ids.append(submit(spool, body)[0].id)
    wait_for(lambda: len(read_stamps(stamps)) >= n, 300, f"all {n} tasks to run")
    for d in daemons.values():
        assert d.stop() == 0
    runs = collections.Counter(task_id for task_id, _, _ in read_stamps(stamps))
    assert set(runs) == set(ids) and set(runs.values()) == {1}, "every task exactly once"
    run_at = {task_id: base + i * 20 * SECOND // n for i, task_id in enumerate(ids)}
    early = [(t, run_at[t] / 1e6 - s) for t, _, s in read_stamps(stamps) if s * 1e6 < run_at[t]]
    assert early == [], f"started before run_at by the real clock: {early[:5]}"
    assert "exceeds --max-uncertainty" in daemons["ahead"].text()
    assert "exceeds --max-uncertainty" in daemons["behind"].text()
    hosts: collections.Counter[str] = collections.Counter()
    for task_id in ids[:: max(1, n // 200)]:
        for r in journal_of(tq, task_id):
            if r["event"] == "start":
                hosts[r["host"]] += 1
    assert set(hosts) <= {"plain-a", "plain-b"}, hosts


def _rewritten(tq: Taskq, since: str) -> Callable[[], dict[str, Any] | None]:
    """The one daemon's status record once it is newer than `since` (its next clock check)."""

    def newer() -> dict[str, Any] | None:
        [record] = json.loads(tq.run("status", "--json").stdout)
        return record if record["updated_at"] != since else None

    return newer


@pytest.mark.slow
@needs_faketime
def test_skewed_daemon_reports_and_waits(
    tq: Taskq, tmp_path: Path, start_host: StartDaemon
) -> None:
    ahead = start_host("ahead", "--clock-check", "1s", skew="+30s")
    task_id = tq.submit("--", "true")
    out = tq.run("status").stdout.decode()
    assert "ahead_" in out and "NOT dispatching" in out and "offset +30" in out
    [record] = json.loads(tq.run("status", "--json").stdout)
    assert record["dispatching"] is False and record["uncertainty"] > 29
    for _ in range(2):  # two more clock checks (each rewrites its record), still refusing
        record = wait_for(_rewritten(tq, record["updated_at"]), 30, "the next clock check")
        assert record["dispatching"] is False
    assert tq.state(task_id) == "pending"
    start_host("plain")
    tq.wait_state(task_id, ("done",))
    assert events(tq.show(task_id), "start")[0]["host"] == "plain"
    ahead.stop()


@pytest.mark.slow
def test_paused_daemon_loses_its_lease_and_kills_its_child(
    tq: Taskq, tmp_path: Path, start_host: StartDaemon, stamps: Path
) -> None:
    a = start_host("host-a", "--lease", "2s")
    script = '; [ "$TASKQ_ATTEMPT" = 1 ] && exec sleep 60; exit 0'
    task_id = tq.submit("--", *stamp_cmd(stamps, script))
    wait_for(lambda: read_stamps(stamps), 10, "attempt 1 to start on host-a")
    first = events(tq.show(task_id), "start")[0]
    assert first["host"] == "host-a"
    a.proc.send_signal(signal.SIGSTOP)
    try:
        start_host("host-b", "--lease", "2s")
        doc = tq.wait_state(task_id, ("done",), timeout=20)
    finally:
        a.proc.send_signal(signal.SIGCONT)
    starts = events(doc, "start")
    assert [(r["attempt"], r["host"]) for r in starts] == [(1, "host-a"), (2, "host-b")]
    taken = events(doc, "taken-over")[0]
    assert taken["reason"] == "its lease expired" and taken["previous_owner"].startswith("host-a_")

    # Continued, host-a finds its renewal refused and kills attempt 1 at once.
    def lease_lost() -> bool:
        return bool(events(tq.show(task_id), "lease-lost"))

    wait_for(lease_lost, 10, "host-a to notice its lost lease")
    wait_for(lambda: not os.path.exists(f"/proc/{first['pid']}"), 10, "attempt 1 to be killed")
    assert "lost the lease" in a.text()
    assert tq.state(task_id) == "done"
    assert a.stop() == 0


@pytest.mark.slow
def test_kill_9_of_one_daemon_others_finish_its_tasks(
    tq: Taskq, tmp_path: Path, start_host: StartDaemon, stamps: Path
) -> None:
    gate = tmp_path / "gate"  # opened after the kill: the attempts outlive their daemon
    victim = start_host("victim", "--workers", "4", "--lease", "2s")
    wait = f"; while [ ! -e {gate} ]; do sleep 0.05; done"
    ids = [tq.submit("--", *stamp_cmd(stamps, wait)) for _ in range(4)]
    wait_for(lambda: len(read_stamps(stamps)) == 4, 30, "the victim to start 4 tasks")
    assert all(tq.state(t) == "running" for t in ids), "precondition: all 4 still running"
    victim.kill()
    gate.touch()
    survivor = start_host("survivor", "--lease", "2s")
    ids += [tq.submit("--", *stamp_cmd(stamps)) for _ in range(4)]
    for task_id in ids:
        tq.wait_state(task_id, ("done",), timeout=20)
    runs = collections.Counter(t for t, _, _ in read_stamps(stamps))
    assert all(runs[t] == 1 for t in ids), runs
    for task_id in ids[:4]:
        doc = tq.show(task_id)
        taken = events(doc, "taken-over")
        assert taken and taken[0]["reason"] == "its lease expired"
        assert events(doc, "end")[0]["exit_status"] == 0
    assert survivor.stop() == 0


@pytest.mark.slow
def test_claim_expiry_is_judged_with_uncertainty(
    tq: Taskq, tmp_path: Path, start_host: StartDaemon
) -> None:
    """A claim whose lease has not surely expired is left alone."""
    from taskq.spool.task import ClaimName, TaskName

    task_id = tq.submit("--", "true")
    [path] = (tq.spool / "pending").glob(f"*/*_{task_id}_1_*")
    expiry = time.time_ns() // 1000 + 15 * SECOND  # ample, however slow the machine
    claim = ClaimName(TaskName.parse(path.name), Phase.CLAIMED, expiry, 12345, "elsewhere")
    os.rename(path, tq.spool / "claimed" / str(claim))
    start_host("here", "--lease", "0.6s", "--rescan", "0.2s")
    sentinel = tq.submit("--", "true")
    tq.wait_state(sentinel, ("done",), timeout=30)  # the daemon is up and scanning
    for _ in range(3):  # three more rescans' worth of rings, each one a takeover scan
        tq.submit("--", "true")
    assert time.time_ns() // 1000 < expiry, "precondition: the lease is still valid"
    assert tq.state(task_id) == "claimed"
    doc = tq.wait_state(task_id, ("done",), timeout=60)
    taken = events(doc, "taken-over")[0]
    assert parse_when(taken["time"], 0) >= expiry


@pytest.mark.slow
@needs_faketime
def test_dispatching_resumes_when_the_clocks_agree(
    tq: Taskq, tmp_path: Path, start_host: StartDaemon
) -> None:
    """A clock stepped back into agreement (as NTP would) lets the daemon resume."""
    skew = tmp_path / "skew"
    skew.write_text("+30s\n")
    # libfaketime steps the monotonic clock with the wall clock here (a real
    # step would not); the daemon re-arms its timers when it sees that.
    env = {"FAKETIME_TIMESTAMP_FILE": str(skew), "FAKETIME_NO_CACHE": "1"}
    tq.env.update(env)
    try:
        daemon = start_host("stepped", "--clock-check", "0.2s", skew="")
    finally:
        for k in env:
            del tq.env[k]
    task_id = tq.submit("--", "true")
    wait_for(lambda: "exceeds --max-uncertainty" in daemon.text(), 10, "the uncertainty report")
    assert tq.state(task_id) == "pending"
    skew.write_text("+0s\n")
    tq.wait_state(task_id, ("done",), timeout=10)
    assert "within bounds again: dispatching" in daemon.text()
