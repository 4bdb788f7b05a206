"""Crash-point injection: kill -9 at every step of every transition, then recover.

Each case runs daemons (or submitters) with TASKQ_CRASH_AT naming one crash
point, so that they die there with SIGKILL, restarts them, and checks the
promises against each task's own record of its executions: nothing accepted
is lost, nothing starts before its run_at, no attempt runs twice, and a task
that always succeeds runs more than once only when the journal records a
lost attempt.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    TASKQ,
    Daemon,
    Taskq,
    journal_of,
    kill_left,
    read_stamps,
    stamp_cmd,
    wait_for,
)

from taskq.spool.faults import POINTS

StartDaemon = Callable[..., Daemon]
SRC = Path(__file__).resolve().parents[2] / "src" / "taskq"


def idle(tq: Taskq) -> bool:
    """Whether no task is left pending, claimed or running (a duplicate would be one)."""
    counts = json.loads(tq.run("stats", "--json").stdout)["counts"]
    return not any(counts[s] for s in ("pending", "claimed", "running", "cancelling"))


def test_every_crash_point_is_placed_and_listed() -> None:
    placed = set()
    for path in SRC.rglob("*.py"):
        placed |= set(re.findall(r'crash_point\("([a-z.-]+)"\)', path.read_text()))
    assert placed == set(POINTS)


def run_until_crash(tq: Taskq, tmp_path: Path, spec: str | None, n: int, wait: float) -> None:
    """A daemon with TASKQ_CRASH_AT=spec; it dies at the point, or we kill it after `wait`."""
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    if spec:
        env["TASKQ_CRASH_AT"] = spec
    log = open(tmp_path / f"crash-run-{n}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*TASKQ, "daemon", "--host-id", "testhost", "--lease", "1.2s", "--retry-delay", "0.1s"],
        env=env,
        stderr=log,
    )
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


# (crash point of the first run, of the second run): the second run of
# takeover and release points recovers what the first run left behind.
DAEMON_CASES = [
    ("daemon.claimed", "daemon.claimed"),
    ("daemon.started", "daemon.started"),
    ("daemon.committed", "daemon.committed"),
    ("daemon.staged", "daemon.staged"),  # its files made ahead of its instant, not handed over
    ("daemon.asked", "daemon.asked"),  # killed after the keeper took it, before its instant
    ("daemon.spawned", "daemon.spawned"),
    ("daemon.reaped", "daemon.reaped"),
    ("daemon.finished", "daemon.finished"),
    ("daemon.finished:3", "daemon.finished:2"),
    ("daemon.renewed", "daemon.renewed"),
    ("daemon.quarantined", "daemon.quarantined"),
    ("daemon.spawned", "daemon.taken-over"),
    ("daemon.claimed", "daemon.released"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("first", "second"), DAEMON_CASES, ids=[c[1] for c in DAEMON_CASES])
def test_daemon_crash_points(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path, stamps: Path, first: str, second: str
) -> None:
    ok_script = f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}; sleep 0.8'
    flaky_script = ok_script + '; [ "$TASKQ_ATTEMPT" -ge 2 ]'
    run_at = time.time() + 0.5
    lines = [{"command": ["sh", "-c", script], "run_at": f"@{run_at:.6f}"}
             for script in [ok_script] * 4 + [flaky_script] * 2]  # fmt: skip
    batch = "".join(json.dumps(line) + "\n" for line in lines).encode()
    ids = tq.submit("--batch", "-", input=batch).split()  # one process, not six
    ok = ids[:4]  # (and two flaky)
    bucket = next((tq.spool / "pending").iterdir())
    (bucket / "garbage").write_text("not a task")
    run_until_crash(tq, tmp_path, first, 1, 6)
    run_until_crash(tq, tmp_path, second, 2, 6)
    start_daemon("--lease", "1.2s", "--retry-delay", "0.1s")
    wait_for(lambda: all(tq.states().get(t) == "done" for t in ids), 120, "every task done")
    runs = collections.Counter((t, a) for t, a, _ in read_stamps(stamps))
    assert all(n == 1 for n in runs.values()), f"an attempt ran twice: {runs}"
    assert all(when >= run_at for _, _, when in read_stamps(stamps)), "a task started early"
    # One host, so every supervisor outlived its daemon: a daemon crash alone
    # must cost no execution and lose no attempt.
    for task_id in ids:
        records = journal_of(tq, task_id)
        assert not [e for e in records if e["event"] == "end" and e.get("lost")], records
        executions = sorted(a for t, a in runs if t == task_id)
        assert executions == ([1] if task_id in ok else [1, 2]), (task_id, records)
    assert list((tq.spool / "claimed").iterdir()) == []


def submit_with_key(
    tq: Taskq, crash: str | None, stamps: Path, key: str
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    if crash:
        env["TASKQ_CRASH_AT"] = crash
    cmd = ["sh", "-c", f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}']
    return subprocess.run(
        [*TASKQ, "submit", "--key", key, "--", *cmd], env=env, capture_output=True
    )


@pytest.mark.slow
@pytest.mark.parametrize("point", [p for p in POINTS if p.startswith("submit.")])
def test_submit_crash_then_retry_with_the_key_runs_once(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, point: str
) -> None:
    crashed = submit_with_key(tq, point, stamps, "the-key")
    assert crashed.returncode == -signal.SIGKILL and crashed.stdout == b""
    retried = submit_with_key(tq, None, stamps, "the-key")  # what a careful client does
    assert retried.returncode == 0
    task_id = retried.stdout.decode().strip()
    start_daemon()
    tq.wait_state(task_id, ("done",))
    wait_for(lambda: read_stamps(stamps), 5, "the task's stamp")
    wait_for(lambda: idle(tq), 30, "nothing left pending or running")  # a second copy ran
    assert [t for t, _, _ in read_stamps(stamps)] == [task_id]
    assert json.loads(tq.run("stats", "--json").stdout)["counts"]["pending"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("point", [p for p in POINTS if p.startswith("submit.")])
def test_batch_crash_leaves_a_consistent_spool(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, point: str
) -> None:
    lines = b"".join(
        json.dumps(
            {
                "command": ["sh", "-c", f'echo "$TASKQ_ID 1 $(date +%s.%N)" >> {stamps}'],
                "key": f"k{i}",
            }
        ).encode()
        + b"\n"
        for i in range(5)
    )
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "TASKQ_CRASH_AT": point}
    crashed = subprocess.run(
        [*TASKQ, "submit", "--batch", "-"], input=lines, env=env, capture_output=True
    )
    assert crashed.returncode == -signal.SIGKILL and crashed.stdout == b""
    ids = tq.run("submit", "--batch", "-", input=lines).stdout.decode().split()
    start_daemon()
    for task_id in ids:
        tq.wait_state(task_id, ("done",))
    wait_for(lambda: idle(tq), 30, "nothing left pending or running")
    assert sorted(t for t, _, _ in read_stamps(stamps)) == sorted(ids), "each key ran once"
    assert tq.run("fsck").returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("point", ["cancel.renamed", "reschedule.recorded"])
def test_operator_crash_points(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, point: str
) -> None:
    cmd = ["sh", "-c", f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}']
    task_id = tq.submit("--in", "1s", "--", *cmd)
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "TASKQ_CRASH_AT": point}
    verb = (
        ["cancel", task_id] if point.startswith("cancel") else ["reschedule", task_id, "--in", "2s"]
    )
    crashed = subprocess.run([*TASKQ, *verb], env=env, capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    start_daemon()
    doc = tq.wait_state(task_id, ("done", "cancelled"), timeout=15)
    ran = [t for t, _, _ in read_stamps(stamps)]
    assert ran == ([] if doc["state"] == "cancelled" else [task_id])
    assert tq.run("fsck").returncode == 0


@pytest.mark.slow
def test_operator_retry_crash_point(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    cmd = ["sh", "-c", f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}; exit 3']
    task_id = tq.submit("--max-attempts", "1", "--", *cmd)
    daemon = start_daemon()
    tq.wait_state(task_id, ("failed",))
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "TASKQ_CRASH_AT": "retry.recorded"}
    crashed = subprocess.run([*TASKQ, "retry", task_id], env=env, capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    assert tq.state(task_id) == "failed"  # the record came first; the move never happened
    assert tq.show(task_id)["budget_from"] == 1  # a retry that never moved the task is no retry
    tq.run("retry", task_id)
    tq.wait_state(task_id, ("failed",))
    assert [a for _, a, _ in read_stamps(stamps)] == [1, 2]
    daemon.stop()


@pytest.mark.slow
@pytest.mark.parametrize("after", ["--after-ok", "--after-any"])
def test_an_end_whose_marker_was_never_written_resolves_its_waiters_at_start_up(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, after: str
) -> None:
    # cancel.renamed is right after the end rename, before deps/ID/ended.cancelled.
    dependency = tq.submit("--in", "1h", "--", "true")
    waiter = tq.submit("--after", dependency, after, "--", *stamp_cmd(stamps))
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "TASKQ_CRASH_AT": "cancel.renamed"}
    crashed = subprocess.run([*TASKQ, "cancel", dependency], env=env, capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    assert tq.state(dependency) == "cancelled" and tq.state(waiter) == "waiting"
    start_daemon()
    if after == "--after-any":
        tq.wait_state(waiter, ("done",), timeout=30)
        assert [t for t, _, _ in read_stamps(stamps)] == [waiter]
    else:
        tq.wait_state(waiter, ("cancelled",), timeout=30)
        assert read_stamps(stamps) == []


def _died_or_ran(daemon: Daemon, stamps: Path) -> bool:
    return daemon.proc.poll() is not None or bool(read_stamps(stamps))


@pytest.mark.slow
def test_a_daemon_killed_with_an_attempt_staged_leaves_it_to_run_once_on_time(
    tmp_path: Path,
) -> None:
    """The attempt's files are made right after its start's commit, ahead of its instant
    (daemon/staging.py); a daemon killed then has run nothing, and the next one runs it.

    A loop that prepares the task within 5 ms of its instant (a loaded machine) starts it
    in place, unstaged: that try runs it, and the test tries again on a fresh spool. A task
    run first lets the daemon's prepare lead grow with its commits' times on a busy disk."""
    for n in range(5):
        tq, stamps = Taskq(tmp_path / f"spool{n}"), tmp_path / f"stamps{n}"
        crash = {"TASKQ_CRASH_AT": "daemon.staged"}
        dying = Daemon(tq, tmp_path / f"dies{n}.log", "--host-id", "testhost", env=crash)
        # A first task's commits set the prepare lead (twice the slowest recent commit):
        # on a loaded machine it then leaves room to stage the second one ahead.
        warm = tq.submit("--", "true")
        tq.wait_state(warm, ("done",), timeout=60)
        run_at = time.time() + 2
        task_id = tq.submit("--at", f"@{run_at:.6f}", "--", *stamp_cmd(stamps))
        wait_for(functools.partial(_died_or_ran, dying, stamps), 60, "death, or the task run")
        if dying.proc.poll() is not None:
            assert dying.stop() == -signal.SIGKILL, dying.text()
            break
        dying.kill()  # it started the task in place
        kill_left(tq.spool)
    else:
        pytest.fail("no daemon reached daemon.staged in five tries: the task never staged")
    log_dir = tq.spool / "logs" / task_id
    assert (log_dir / "1.out").stat().st_size == 0 and (log_dir / "1.status").stat().st_size == 0
    assert len(list((tq.spool / "claimed").iterdir())) == 1 and not read_stamps(stamps)
    told = tq.run("logs", task_id, check=False)
    assert told.returncode != 0 and b"has not run yet" in told.stderr, told
    after = Daemon(tq, tmp_path / "after.log", "--host-id", "testhost")
    try:
        tq.wait_state(task_id, ("done",))
        wait_for(lambda: read_stamps(stamps), 10, "the task's stamp")
    finally:
        after.stop()
    [(_, attempt, when)] = read_stamps(stamps)
    assert attempt == 1 and when >= run_at
    records = journal_of(tq, task_id)
    assert [e.get("reason") for e in records if e["event"] == "released"] == ["never began"]
    assert not [e for e in records if e["event"] == "end" and e.get("lost")], records
