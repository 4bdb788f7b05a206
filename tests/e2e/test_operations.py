"""Operator commands through the real CLI: reschedule, retry, cancel, wait, logs -f, fsck."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, events, read_stamps, stamp_cmd, until, wait_for

from taskq.times.timespec import SECOND
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]


@pytest.mark.slow
def test_reschedule_moves_a_pending_task(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    task_id = tq.submit("--in", "1h", "--expires", "60s", "--", *stamp_cmd(stamps))
    out = tq.run("reschedule", task_id, "--in", "0.5s").stdout.decode()
    assert out.startswith(f"rescheduled {task_id} to ")
    start_daemon()
    doc = tq.wait_state(task_id, ("done",))  # the deadline moved with the run time
    assert events(doc, "rescheduled")[0]["previous"] != doc["run_at"]
    [(_, _, started)] = read_stamps(stamps)
    assert started >= time.time() - 10
    again = tq.run("reschedule", task_id, "--in", "1h", check=False)
    assert again.returncode == 4 and b"only a pending task can be rescheduled" in again.stderr
    assert tq.run("reschedule", task_id, check=False).returncode == 2


@pytest.mark.slow
def test_reschedule_races_a_claim_cleanly(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    """Reschedules fired while a daemon claims: each one wins whole or is told it lost."""
    start_daemon()
    ids = [tq.submit("--in", "0.3s", "--", *stamp_cmd(stamps)) for _ in range(5)]
    time.sleep(0.25)
    results = [tq.run("reschedule", i, "--in", "1h", check=False) for i in ids]
    for task_id, proc in zip(ids, results, strict=True):
        state = tq.state(task_id)
        if proc.returncode == 0:
            assert state == "pending", "a won reschedule leaves it pending"
        else:
            assert proc.returncode == 4 and state in ("running", "done", "claimed")
    ran = {r[0] for r in read_stamps(stamps)}
    won = {i for i, p in zip(ids, results, strict=True) if p.returncode == 0}
    wait_for(lambda: {r[0] for r in read_stamps(stamps)} >= set(ids) - won, 10, "the losers to run")
    assert not (ran & won)


@pytest.mark.slow
def test_retry_gives_a_fresh_budget(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    start_daemon("--retry-delay", "0.1s")
    task_id = tq.submit("--max-attempts", "2", "--", *stamp_cmd(stamps, "; exit 7"))
    proc = tq.run("wait", task_id, check=False)
    assert proc.returncode == 7 and proc.stdout.decode() == f"{task_id} failed (exit status 7)\n"
    out = tq.run("retry", task_id).stdout.decode()
    assert out.startswith(f"retrying {task_id} as attempt 3 at ")
    assert tq.run("wait", task_id, check=False).returncode == 7
    assert [r[1] for r in read_stamps(stamps)] == [1, 2, 3, 4]
    done = tq.submit("--", "true")
    tq.wait_state(done, ("done",))
    refused = tq.run("retry", done, check=False)
    assert refused.returncode == 4 and b"only a failed task can be retried" in refused.stderr


@pytest.mark.slow
def test_cancel_a_running_task_terms_then_kills(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    start_daemon("--kill-grace", "0.5s")
    marker = tmp_path / "term"
    script = f"trap 'echo got TERM > {marker}' TERM; echo started; while :; do sleep 0.1; done"
    task_id = tq.submit("--", "sh", "-c", script)
    wait_for(lambda: tq.state(task_id) == "running", 10, "the task to run")
    wait_for(lambda: (tq.spool / "logs" / task_id / "1.out").exists(), 10, "output")
    out = tq.run("cancel", task_id).stdout.decode()
    assert out.startswith(f"cancelling {task_id} (running")
    assert tq.state(task_id) in ("cancelling", "cancelled")
    proc = tq.run("wait", task_id, check=False)
    assert proc.returncode == 120
    pid = events(tq.show(task_id), "start")[0]["pid"]
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 10, "the attempt to be stopped")
    wait_for(lambda: marker.exists(), 5, "the TERM to reach the command")
    doc = wait_for(lambda: (d := tq.show(task_id)) and events(d, "end") and d, 10, "the end record")
    [end], [asked] = events(doc, "end"), events(doc, "cancel-requested")
    assert "cancelled while running" in end["notes"][0]
    # Stopped at once (the doorbell), not at the next lease renewal (20 s), as recorded.
    assert parse_when(end["time"], 0) - parse_when(asked["time"], 0) < 8 * SECOND


@pytest.mark.slow
def test_wait_statuses(tq: Taskq, start_daemon: StartDaemon) -> None:
    start_daemon()
    ok = tq.submit("--", "true")
    late = tq.submit("--at", "2001-01-01T00:00:00Z", "--expires", "1s", "--", "true")
    pending = tq.submit("--in", "1h", "--", "true")
    assert tq.run("wait", ok).returncode == 0
    assert tq.run("wait", late, check=False).returncode == 121
    timed = tq.run("wait", "--timeout", "0.3s", pending, check=False)
    assert timed.returncode == 124 and b"timed out" in timed.stderr
    wrapped = subprocess.run(  # wait under timeout(1): every status keeps one meaning
        ["timeout", "30", *TASKQ, "wait", late],
        capture_output=True,
        env={**os.environ, "TASKQ_SPOOL": str(tq.spool)},
    )
    assert wrapped.returncode == 121 and wrapped.returncode not in (124, 125, 126, 127)
    both = tq.run("wait", ok, late, check=False)
    assert both.returncode == 1 and sorted(both.stdout.decode().split()) == sorted(
        [ok, "done", late, "expired"]
    )
    assert tq.run("wait", ok, ok).returncode == 0
    assert tq.run("wait", "0" * 26, check=False).returncode == 3


@pytest.mark.slow
def test_logs_follow_streams_until_the_attempt_ends(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    start_daemon()
    gate = tmp_path / "gate"
    script = f"echo one{until(gate)}; echo two{until(gate.with_suffix('.2'))}; echo three"
    task_id = tq.submit("--", "sh", "-c", script)
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    argv = [*TASKQ, "logs", "-f", task_id]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, env=env) as follower:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"one\n" and tq.state(task_id) == "running"
        gate.touch()
        assert follower.stdout.readline() == b"two\n"
        gate.with_suffix(".2").touch()
        assert follower.stdout.read() == b"three\n"  # and then EOF: the attempt ended
        assert follower.wait(timeout=30) == 0


@pytest.mark.slow
def test_fsck_reports_quarantines_and_repairs(tq: Taskq, tmp_path: Path) -> None:
    good = tq.submit("--in", "1h", "--key", "k", "--", "true")
    assert tq.run("fsck").stdout.decode() == "fsck: 0 problem(s), 0 fixed\n"
    bucket = next((tq.spool / "pending").iterdir())
    (bucket / "junk").write_text("x")
    [task] = bucket.glob(f"*_{good}_*")
    writable = bucket / task.name.replace(good, "1" * 26)
    writable.write_bytes(task.read_bytes().replace(good.encode(), b"1" * 26))
    writable.chmod(0o666)
    (tq.spool / "logs").chmod(0o755)
    (tq.spool / "keys" / "deadbeef").write_text(f"{task.name.replace(good, '2' * 26)}\n")
    (tq.spool / "logs" / ("3" * 26)).mkdir()
    dry = tq.run("fsck", "--dry-run", check=False)
    assert dry.returncode == 1 and b"would be quarantined" in dry.stderr + dry.stdout
    assert (bucket / "junk").exists()
    report = json.loads(tq.run("fsck", "--json", check=False).stdout)
    text = "\n".join(report["findings"])
    assert "junk: not a task file name: quarantined" in text
    assert "writable by group or others (mode 0666)" in text
    assert "logs/ has mode 0755: set to 0700" in text
    assert "keys/deadbeef: names task " in text and "which is gone: removed" in text
    assert f"logs/{'3' * 26}: no task with this id; left for the operator" in text
    assert report["problems"] == report["fixed"] + 1
    assert not (bucket / "junk").exists() and not writable.exists()
    assert tq.state(good) == "pending" and (tq.spool / "keys").exists()
    assert tq.run("fsck", check=False).returncode == 1  # the orphaned logs remain


@pytest.mark.slow
def test_fsck_never_follows_a_link_where_a_layout_directory_should_be(
    tq: Taskq, tmp_path: Path
) -> None:
    """A link planted where ids/ was is set aside; what it points at is left alone."""
    task = tq.submit("--in", "1h", "--", "true")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o755)
    shutil.rmtree(tq.spool / "ids")  # documented as safe: fsck rebuilds the hints
    (tq.spool / "ids").symlink_to(elsewhere)
    report = json.loads(tq.run("fsck", "--json", check=False).stdout)
    text = "\n".join(report["findings"])
    assert "ids: a symbolic link where a directory of the layout should be" in text, text
    assert elsewhere.stat().st_mode & 0o7777 == 0o755  # never chmodded through the link
    assert not (tq.spool / "ids").is_symlink() and (tq.spool / "ids").is_dir()
    assert [p for p in (tq.spool / "corrupt").iterdir() if p.is_symlink()]
    assert tq.state(task) == "pending"
    assert tq.run("fsck").stdout.decode() == "fsck: 0 problem(s), 0 fixed\n"


@pytest.mark.slow
def test_cancel_survives_the_death_of_the_attempts_daemon(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """Asked to cancel while its daemon is dead: the next daemon stops it and settles it."""
    first = start_daemon()
    task_id = tq.submit("--", "sleep", "60")
    wait_for(lambda: tq.state(task_id) == "running", 10, "the task to run")
    pid = events(tq.show(task_id), "start")[0]["pid"]
    first.kill()
    assert tq.run("cancel", task_id).stdout.decode().startswith(f"cancelling {task_id}")
    assert tq.state(task_id) == "cancelling" and os.path.exists(f"/proc/{pid}")
    start_daemon()
    assert tq.run("wait", "--timeout", "20s", task_id, check=False).returncode == 120
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 10, "the orphan to be stopped")
    doc = tq.show(task_id)
    assert events(doc, "adopted") and events(doc, "cancel-requested")
    assert len(events(doc, "start")) == 1


@pytest.mark.slow
def test_wait_json_tells_a_failed_status_from_waits_own(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    """A task that exits 124 makes wait exit 124 too; --json says it failed, not timed out."""
    start_daemon()
    clash = tq.submit("--", "sh", "-c", "exit 124")
    cancelled = tq.submit("--in", "1h", "--", "true")
    tq.run("cancel", cancelled)
    proc = tq.run("wait", "--json", clash, check=False)
    assert proc.returncode == 124
    assert json.loads(proc.stdout) == {"id": clash, "outcome": "failed", "exit_status": 124}
    both = tq.run("wait", "--json", clash, cancelled, check=False)
    outcomes = {d["id"]: d["outcome"] for d in map(json.loads, both.stdout.splitlines())}
    assert both.returncode == 1 and outcomes == {clash: "failed", cancelled: "cancelled"}
    assert tq.run("wait", cancelled, check=False).returncode == 120
