"""The daemon end to end: real daemon subprocesses, real tasks, real signals."""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, events, read_stamps, stamp_cmd, wait_for

from taskq.spool import mounts
from taskq.times.timespec import SECOND
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]


def epoch(offset: float) -> str:
    return f"@{time.time() + offset:.6f}"


@pytest.mark.slow
def test_never_early_and_within_100ms(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    start_daemon("--rescan", "1h")  # only the doorbell can wake it for new work
    ids = [tq.submit("--at", epoch(1.0 + 0.15 * i), "--", *stamp_cmd(stamps)) for i in range(6)]
    for task_id in ids:
        tq.wait_state(task_id, ("done",))
    lateness = []
    for task_id, _, started in read_stamps(stamps):
        run_at = parse_when(tq.show(task_id)["run_at"], 0) / 1e6
        assert started >= run_at, f"{task_id} started {run_at - started:.6f}s early"
        lateness.append(started - run_at)
    assert len(lateness) == len(ids)
    assert statistics.median(lateness) < 0.1, lateness
    assert max(lateness) < 1.0, lateness
    recorded = [events(tq.show(i), "start")[0]["lateness"] for i in ids]
    assert all(0 <= r < 1.0 for r in recorded)


@pytest.mark.slow
def test_past_due_starts_at_once(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    start_daemon("--rescan", "1h")
    submitted = time.time()
    task_id = tq.submit("--at", "2001-02-03T04:05:06Z", "--", *stamp_cmd(stamps))
    tq.wait_state(task_id, ("done",))
    [(_, _, started)] = read_stamps(stamps)
    assert started - submitted < 2.0
    assert events(tq.show(task_id), "start")[0]["lateness"] > 10 * 365 * 86400


@pytest.mark.slow
def test_due_before_the_daemon_started(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    ids = [tq.submit("--", *stamp_cmd(stamps)) for _ in range(3)]
    start_daemon()
    for task_id in ids:
        tq.wait_state(task_id, ("done",))
    assert sorted(r[0] for r in read_stamps(stamps)) == sorted(ids)


@pytest.mark.slow
def test_retries_with_backoff_then_dead_letter(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    start_daemon("--retry-delay", "0.4s")
    task_id = tq.submit("--max-attempts", "3", "--", *stamp_cmd(stamps, "; exit 3"))
    doc = tq.wait_state(task_id, ("failed",), timeout=30)
    runs = read_stamps(stamps)
    assert [attempt for _, attempt, _ in runs] == [1, 2, 3]
    gaps = [b[2] - a[2] for a, b in itertools.pairwise(runs)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps  # jitter keeps at least half of 0.4s, 0.8s
    assert [r["exit_status"] for r in events(doc, "end")] == [3, 3, 3]
    assert len(events(doc, "retry")) == 2 and len(events(doc, "dead")) == 1
    assert doc["attempt"] == 3


@pytest.mark.slow
def test_retry_then_success(tq: Taskq, start_daemon: StartDaemon, tmp_path: Path) -> None:
    start_daemon("--retry-delay", "0.1s")
    flag = tmp_path / "flag"
    script = f"if [ -e {flag} ]; then exit 0; else touch {flag}; exit 1; fi"
    task_id = tq.submit("--", "sh", "-c", script)
    doc = tq.wait_state(task_id, ("done",))
    assert [r["exit_status"] for r in events(doc, "end")] == [1, 0]


@pytest.mark.slow
def test_key_runs_once(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    start_daemon()
    ids = {tq.submit("--key", "once", "--", *stamp_cmd(stamps)) for _ in range(3)}
    [task_id] = ids
    tq.wait_state(task_id, ("done",))
    assert len(read_stamps(stamps)) == 1


@pytest.mark.slow
def test_cancelled_task_never_runs(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    doomed = tq.submit("--at", epoch(0.5), "--", *stamp_cmd(stamps))
    sentinel = tq.submit("--at", epoch(0.7), "--", *stamp_cmd(stamps))
    assert tq.run("cancel", doomed).stdout.decode().strip() == f"cancelled {doomed}"
    start_daemon()  # after the cancel, however slow the machine: both are due by now
    tq.wait_state(sentinel, ("done",))
    assert [r[0] for r in read_stamps(stamps)] == [sentinel]
    assert tq.state(doomed) == "cancelled"
    again = tq.run("cancel", doomed, check=False)
    assert again.returncode == 4 and b"is already cancelled" in again.stderr
    finished = tq.run("cancel", sentinel, check=False)
    assert finished.returncode == 4 and b"is already done" in finished.stderr
    missing = tq.run("cancel", "0" * 26, check=False)
    assert missing.returncode == 3 and b"no task" in missing.stderr


@pytest.mark.slow
def test_stdin_payload_byte_for_byte(tq: Taskq, start_daemon: StartDaemon, tmp_path: Path) -> None:
    start_daemon()
    payload = bytes(range(256)) * 64 + os.urandom(10_000) + b"\0\n\r\xff"
    out = tmp_path / "out"
    task_id = tq.submit("--stdin", "--", "sh", "-c", f"cat > {out}", input=payload)
    tq.wait_state(task_id, ("done",))
    assert out.read_bytes() == payload
    assert tq.show(task_id)["stdin_bytes"] == len(payload)


@pytest.mark.slow
def test_environment_cwd_and_output(tq: Taskq, start_daemon: StartDaemon, tmp_path: Path) -> None:
    start_daemon()
    script = (
        'echo "$TASKQ_ID $TASKQ_ATTEMPT $TASKQ_RUN_AT $TASKQ_DUE_AT $FOO $(pwd)"; echo oops >&2'
    )
    task_id = tq.submit("--env", "FOO=bar baz", "--cwd", str(tmp_path), "--", "sh", "-c", script)
    doc = tq.wait_state(task_id, ("done",))
    out = tq.run("logs", task_id).stdout.decode()
    run_at = doc["run_at"]
    assert out == f"{task_id} 1 {run_at} {run_at} bar baz {tmp_path}\noops\n"


@pytest.mark.slow
def test_timeout_kills_the_process_group(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    start_daemon("--kill-grace", "1s")
    pidfile = tmp_path / "grandchild"
    # The grandchild ignores nothing; it must die with the group.
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    task_id = tq.submit("--timeout", "0.5s", "--max-attempts", "1", "--", "sh", "-c", script)
    doc = tq.wait_state(task_id, ("failed",))
    [start], [end] = events(doc, "start"), events(doc, "end")
    # TERM at 0.5 s, KILL 1 s later at most, as the journal records it.
    assert parse_when(end["time"], 0) - parse_when(start["time"], 0) < 10 * SECOND
    # The supervisor outlives the TERM and records the command's status: 128 + 15.
    assert end["exit_status"] == 128 + signal.SIGTERM and "timeout" in end["notes"][0]
    grandchild = int(pidfile.read_text())
    wait_for(
        lambda: not os.path.exists(f"/proc/{grandchild}") or _zombie(grandchild),
        5,
        "the grandchild to die",
    )


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_timeout_escalates_to_kill(tq: Taskq, start_daemon: StartDaemon) -> None:
    start_daemon("--kill-grace", "0.3s")
    script = "trap '' TERM; sleep 60"
    task_id = tq.submit("--timeout", "0.3s", "--max-attempts", "1", "--", "sh", "-c", script)
    doc = tq.wait_state(task_id, ("failed",), timeout=10)
    assert events(doc, "end")[0]["signal"] == signal.SIGKILL


@pytest.mark.slow
def test_expired_task_fails_without_running(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    late = tq.submit("--at", epoch(-5), "--expires", "1s", "--", *stamp_cmd(stamps))
    fine = tq.submit("--at", epoch(-5), "--expires", "1h", "--", *stamp_cmd(stamps))
    start_daemon()
    tq.wait_state(fine, ("done",))
    doc = tq.wait_state(late, ("failed",))
    assert doc["expired"] is True and events(doc, "start") == []
    assert "(expired)" in tq.run("show", late).stdout.decode()
    assert [r[0] for r in read_stamps(stamps)] == [fine]


@pytest.mark.slow
def test_garbage_is_quarantined_while_valid_tasks_run(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    first = tq.submit("--", *stamp_cmd(stamps))
    bucket = next((tq.spool / "pending").iterdir())
    (bucket / "garbage.txt").write_bytes(b"\x00\xffnot a task")
    minute = f"{bucket.name[:8]}T{bucket.name[8:]}00.000000Z"  # the bucket's own minute
    fake = bucket / f"{minute}_{'0' * 26}_1_default"
    fake.write_text('{"version": 1, "argv": "rm -rf /"')  # truncated JSON, valid name
    (tq.spool / "pending" / "notabucket").mkdir()
    os.symlink("/etc/passwd", bucket / f"{minute}_{'1' * 26}_1_default")
    linked = bucket / f"{minute}_{'2' * 26}_1_default"
    os.link(tq.spool / "doorbell", linked)
    daemon = start_daemon()
    second = tq.submit("--", *stamp_cmd(stamps))
    tq.wait_state(first, ("done",))
    tq.wait_state(second, ("done",))
    reasons = wait_for(
        lambda: (
            sorted((tq.spool / "corrupt").glob("*.reason"))
            if len(list((tq.spool / "corrupt").glob("*.reason"))) == 5
            else None
        ),
        10,
        "five quarantined files",
    )
    text = "".join(p.read_text() for p in reasons)
    for expected in (
        "not a task file name",
        "bad task body",
        "not a bucket name",
        "symbolic link",
        "hard links",
    ):
        assert expected in text
    assert daemon.proc.poll() is None
    assert "quarantined" in daemon.text()
    assert {oct(p.stat().st_mode & 0o777) for p in reasons} == {"0o600"}
    assert not fake.exists() and not (bucket / "garbage.txt").exists()


def _margin(tq: Taskq) -> float:
    """The clock margin the one daemon allows for: its uncertainty less its offset, seconds."""
    record = wait_for(lambda: _one_record(tq), 30, "the daemon's record")
    return float(record["uncertainty"]) - abs(float(record["offset"]))


def _one_record(tq: Taskq) -> dict[str, Any] | None:
    records = json.loads(tq.run("status", "--json").stdout)
    return records[0] if len(records) == 1 and "uncertainty" in records[0] else None


def test_on_a_local_filesystem_no_clock_margin_is_allowed_for_unless_given(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    """Its file times are this host's own clock: the uncertainty is the measured offset alone
    (microseconds), and a start waits for run_at itself; --clock-margin still adds one.
    The record's uncertainty is |offset| + margin, whatever the load makes the offset."""
    if not mounts.clock_stamped_here(str(tq.spool)):
        pytest.skip(f"{tq.spool} is not on a local filesystem")
    daemon = start_daemon()
    assert _margin(tq) < 0.0002  # (the offset moves by the wall clock's drift since measured)
    daemon.stop()
    start_daemon("--clock-margin", "5ms")
    assert 0.0048 < _margin(tq) < 0.0052
