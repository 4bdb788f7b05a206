"""Every command tells the truth, and no input can lose an accepted task.

Regression tests for the hostile tester's findings, each through the real
CLI: limits checked before acceptance, commands that report success for the
changes they made even when a daemon removes a bucket under them, operator
schedules the daemon obeys, one `end` per attempt, one-line errors for
hostile input, daemon options checked at start-up, and spool path edge cases.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, events, read_stamps, stamp_cmd, until, wait_for

from taskq.times.timespec import format_iso
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]

PAST = "2001-02-03T04:05:06Z"  # an overdue run time; its bucket is a past minute
PAST_BUCKET = "200102030405"


def spool_files(tq: Taskq, sub: str) -> list[str]:
    root = tq.spool / sub
    return (
        [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()] if root.exists() else []
    )


def one_line_error(proc: subprocess.CompletedProcess[bytes], status: int) -> str:
    text = proc.stderr.decode()
    assert proc.returncode == status, text
    assert text.startswith("taskq: ") and text.count("\n") == 1, text
    return text


# -- 1. limits are checked before a task is accepted -------------------------


@pytest.mark.slow
def test_a_body_over_the_file_limit_is_refused_not_lost(tq: Taskq) -> None:
    line = json.dumps({"command": ["echo", "x" * (5 << 20)], "in": 2, "key": "big-1"})
    proc = tq.run("submit", "--batch", "-", input=line.encode(), check=False)
    assert "exec() takes at most" in one_line_error(proc, 2)
    # Control bytes grow sixfold as JSON escapes: the file limit counts them.
    args = ["\x01" * 100_000 for _ in range(7)]
    proc = tq.run("submit", "--", "echo", *args, check=False)
    assert "over the limit of 4194304" in one_line_error(proc, 2)
    assert spool_files(tq, "pending") == spool_files(tq, "tmp") == spool_files(tq, "keys") == []
    task_id = tq.submit("--key", "big-1", "--", "true")  # the key was never bound
    assert tq.state(task_id) == "pending"


def test_arguments_exec_could_not_take_are_refused(tq: Taskq) -> None:
    line = json.dumps({"command": ["echo", *["y" * 100_000 for _ in range(25)]]})
    proc = tq.run("submit", "--batch", "-", input=line.encode(), check=False)  # E2BIG at spawn
    assert "exec() is given at most 1048576" in one_line_error(proc, 2)
    line = json.dumps({"command": ["true"], "env": {"BIG": "z" * 140_000}})
    proc = tq.run("submit", "--batch", "-", input=line.encode(), check=False)
    assert "variable BIG is 140004 bytes" in one_line_error(proc, 2)
    assert spool_files(tq, "pending") == []


@pytest.mark.slow
def test_a_task_just_within_the_limits_runs(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    out = tmp_path / "sizes"
    args = ["w" * 131_000 for _ in range(7)]  # 917 kB of arguments, each one string long
    task_id = tq.submit("--", "sh", "-c", f'echo "$#" >> {out}', "sh", *args)
    start_daemon()
    tq.wait_state(task_id, ("done",), timeout=30)
    assert out.read_text() == "7\n"


# -- 2. a command whose bucket a daemon removed still tells the truth --------


def stopped_at(tq: Taskq, point: str, *args: str) -> subprocess.Popen[bytes]:
    """Run taskq so that it stops itself (SIGSTOP) at a crash point."""
    env = {
        **os.environ,
        "TASKQ_SPOOL": str(tq.spool),
        "TASKQ_CRASH_AT": point,
        "TASKQ_CRASH_SIGNAL": "STOP",
    }
    proc = subprocess.Popen(
        [*TASKQ, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def stopped() -> bool:
        if proc.poll() is not None:
            return True
        with open(f"/proc/{proc.pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "T"

    wait_for(stopped, 30, f"taskq {args[0]} to stop at {point}")
    assert proc.poll() is None, proc.communicate()
    return proc


def go_on(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
def test_cancel_reports_success_when_its_emptied_bucket_vanishes(tq: Taskq) -> None:
    task_id = tq.submit("--at", PAST, "--", "true")
    proc = stopped_at(tq, "cancel.renamed", "cancel", task_id)
    (tq.spool / "pending" / PAST_BUCKET).rmdir()  # what a daemon's rescan does to it
    status, _, err = go_on(proc)
    assert status == 0, err
    doc = tq.show(task_id)
    assert doc["state"] == "cancelled" and len(events(doc, "cancelled")) == 1


@pytest.mark.slow
def test_reschedule_reports_success_when_its_emptied_bucket_vanishes(tq: Taskq) -> None:
    task_id = tq.submit("--at", PAST, "--", "true")
    proc = stopped_at(tq, "reschedule.moved", "reschedule", task_id, "--in", "1h")
    (tq.spool / "pending" / PAST_BUCKET).rmdir()
    status, out, err = go_on(proc)
    assert status == 0 and out.startswith(f"rescheduled {task_id}"), err
    doc = tq.show(task_id)
    assert len(events(doc, "rescheduled")) == 1 and not events(doc, "revoked")


@pytest.mark.slow
def test_submit_and_retry_report_success_when_a_daemon_empties_their_bucket(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    start_daemon("--rescan", "0.2s", "--retry-delay", "0.1s")
    proc = stopped_at(tq, "submit.renamed", "submit", "--at", PAST, "--max-attempts", "1", "false")
    wait_for(lambda: spool_files(tq, "failed"), 30, "the daemon to run the submitted task")
    bucket = tq.spool / "pending" / PAST_BUCKET
    wait_for(lambda: not bucket.exists(), 30, "the daemon to remove the emptied bucket")
    status, out, err = go_on(proc)
    assert status == 0, err
    task_id = out.strip()
    assert tq.state(task_id) == "failed"

    proc = stopped_at(tq, "retry.moved", "retry", task_id, "--at", PAST)
    wait_for(lambda: events(tq.show(task_id), "end")[1:], 30, "attempt 2 to run")
    wait_for(lambda: not bucket.exists(), 30, "the daemon to remove the emptied bucket")
    status, _, err = go_on(proc)
    assert status == 0, err
    assert len(events(tq.show(task_id), "retried")) == 1


# -- 3. the daemon obeys a reschedule of a task waiting for its retry --------


@pytest.mark.slow
def test_rescheduling_a_retry_moves_its_schedule(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    script = '; [ "$TASKQ_ATTEMPT" = 1 ] && exit 1; echo "$TASKQ_RUN_AT" >> ' + f"{stamps}.at"
    task_id = tq.submit("--expires", "1h", "--", *stamp_cmd(stamps, script))
    start_daemon("--retry-delay", "1h")
    wait_for(lambda: events(tq.show(task_id), "retry"), 30, "attempt 1 to fail")
    new = tq.run("reschedule", task_id, "--in", "0.5s").stdout.decode().split()[-1]
    tq.wait_state(task_id, ("done",), timeout=30)
    assert Path(f"{stamps}.at").read_text().split() == [format_iso(parse_when(new, 0))]


# -- 4 and 5. two daemons, one attempt, one end --------------------------------


@pytest.mark.slow
def test_same_host_id_daemon_hands_over_instead_of_killing(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    a = start_daemon("--lease", "2s", host="shared")
    task_id = tq.submit("--", *stamp_cmd(stamps, until(gate)))
    wait_for(lambda: read_stamps(stamps), 30, "the attempt to start under daemon a")
    a.proc.send_signal(signal.SIGSTOP)
    try:
        start_daemon("--lease", "2s", host="shared")
        wait_for(lambda: events(tq.show(task_id), "adopted"), 30, "daemon b to adopt it")
    finally:
        a.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: events(tq.show(task_id), "handed-over"), 30, "daemon a to step back")
    gate.touch()
    doc = tq.wait_state(task_id, ("done",), timeout=30)
    assert len(read_stamps(stamps)) == 1  # it ran once, and was never killed
    [end] = events(doc, "end")
    assert end["exit_status"] == 0 and not events(doc, "late-end")
    assert "it watches attempt 1 now" in a.text() and "slow disk" not in a.text()
    assert a.stop() == 0


@pytest.mark.slow
def test_a_late_end_after_a_takeover_does_not_change_the_outcome(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    script = f'; [ "$TASKQ_ATTEMPT" = 1 ] && {{ {until(gate)[2:]}; exit 0; }}; exit 3'
    a = start_daemon("--lease", "2s", "--retry-delay", "0.1s", host="host-a")
    task_id = tq.submit("--max-attempts", "2", "--", *stamp_cmd(stamps, script))
    wait_for(lambda: read_stamps(stamps), 30, "attempt 1 to start on host-a")
    a.proc.send_signal(signal.SIGSTOP)
    try:
        start_daemon("--lease", "2s", "--retry-delay", "0.1s", host="host-b")
        tq.wait_state(task_id, ("failed",), timeout=30)
        assert tq.run("wait", task_id, check=False).returncode == 3
    finally:
        a.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: events(tq.show(task_id), "late-end"), 30, "host-a's late end")
    doc = tq.show(task_id)
    assert [r["attempt"] for r in events(doc, "end")] == [1, 2]  # one end per attempt
    assert tq.run("wait", task_id, check=False).returncode == 3
    assert doc["exit_status"] == 3  # show reads the outcome as wait does
    assert "after its lease was lost" in a.text()
    gate.touch()
    a.stop()


# -- 6. hostile input gets one line and changes nothing ----------------------


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "--", "echo", "\udcff"],
        ["submit", "--env", "X=\udcff", "--", "true"],
        ["submit", "--key", "k\udcff", "--", "true"],
        ["submit", "--in", "999999w", "--", "true"],
        ["submit", "--timeout", "1e400", "--", "true"],
    ],
)
def test_hostile_submit_options_get_one_line(tq: Taskq, args: list[str]) -> None:
    proc = tq.run(*args, check=False)  # a lone surrogate goes out as the byte it escapes
    one_line_error(proc, 2)
    assert spool_files(tq, "pending") == spool_files(tq, "tmp") == []


def test_a_non_utf8_working_directory_is_refused(tq: Taskq, tmp_path: Path) -> None:
    odd = os.fsencode(str(tmp_path)) + b"/\xff"
    os.mkdir(odd)
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    proc = subprocess.run(
        [*TASKQ, "submit", "--", "true"], cwd=odd, env=env, capture_output=True, timeout=60
    )
    assert "working directory is not valid UTF-8" in one_line_error(proc, 2)


@pytest.mark.parametrize(
    "bad_line",
    [
        b'{"command": ["true"], "in": Infinity}',
        b'{"command": ["true"], "in": NaN}',
        b'{"command": ["true"], "in": 1e300}',
        b'{"command": ["true"], "timeout": 1e300}',
        b'{"command": ["true"], "run_at": -Infinity}',
        b'{"command": ["\\udc80"]}',
        b'{"command": ["true"], "env": {"A": "\\ud800"}}',
    ],
)
@pytest.mark.slow
def test_a_bad_third_batch_line_leaves_nothing(tq: Taskq, bad_line: bytes) -> None:
    good = b'{"command": ["true"], "key": "k-%d"}\n'
    data = good % 1 + good % 2 + bad_line + b"\n"
    proc = tq.run("submit", "--batch", "-", input=data, check=False)
    assert "batch line 3" in one_line_error(proc, 2)
    assert spool_files(tq, "pending") == spool_files(tq, "tmp") == spool_files(tq, "keys") == []


def test_reschedule_by_a_huge_duration_gets_one_line(tq: Taskq) -> None:
    task_id = tq.submit("--in", "1h", "--", "true")
    proc = tq.run("reschedule", task_id, "--in", "999999w", check=False)
    assert "longer than the limit" in one_line_error(proc, 2)


# -- 7. daemon options are checked at start-up -------------------------------


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--retry-delay", "999999w", "longer than the limit"),
        ("--lease", "999999w", "longer than the limit"),
        ("--lease", "1us", "--lease 0.001ms is out of range"),
        ("--lease", "2d", "--lease 2d00h is out of range"),
        ("--rescan", "1ms", "--rescan 1ms is out of range"),
        ("--doorbell-poll", "1us", "--doorbell-poll 0.001ms is out of range"),
        ("--retry-cap", "31d", "--retry-cap 31d00h is out of range"),
    ],
)
@pytest.mark.slow
def test_daemon_options_out_of_range_are_refused(
    tq: Taskq, option: str, value: str, says: str
) -> None:
    proc = tq.run("daemon", option, value, check=False)
    assert says in one_line_error(proc, 2)


# -- 8. spool path edge cases -------------------------------------------------


@pytest.mark.slow
def test_a_spool_given_as_a_symlink_works_for_every_command(
    tmp_path: Path, start_daemon: StartDaemon
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    linked = Taskq(tmp_path / "link")
    task_id = linked.submit("--", "true")
    log = tmp_path / "linked-daemon.log"
    d = Daemon(linked, log, "--host-id", "linked")
    try:
        linked.wait_state(task_id, ("done",), timeout=30)
    finally:
        d.stop()
    assert task_id in linked.run("ls").stdout.decode()
    first = linked.run("fsck").stdout.decode()
    assert first.endswith("0 problem(s), 0 fixed\n"), first
    assert oct(real.stat().st_mode & 0o777) == "0o700"


@pytest.mark.slow
def test_an_unreadable_spool_is_a_permission_error() -> None:
    from test_submit import as_nobody

    prefix = as_nobody()
    if prefix and not reachable_by_nobody(TASKQ[0]):
        pytest.skip(f"{TASKQ[0]} is not reachable by nobody (a private checkout)")
    base = Path(tempfile.mkdtemp())  # under /tmp: reachable by anyone, unlike tmp_path
    try:
        base.chmod(0o755)
        private = Taskq(base / "spool")
        private.submit("--", "true")
        if not prefix:
            private.spool.chmod(0o000)
        env = {**os.environ, "TASKQ_SPOOL": str(private.spool)}
        for args in (["ls"], ["stats"], ["submit", "--", "true"]):
            cmd = [*prefix, *TASKQ, *args]
            proc = subprocess.run(cmd, env=env, capture_output=True, timeout=60)
            one_line_error(proc, 77)
    finally:
        shutil.rmtree(base)


def reachable_by_nobody(path: str) -> bool:
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "test", "-x", path]
    )
    return proc.returncode == 0


@pytest.mark.slow
def test_reschedule_on_a_read_only_spool_says_so_once(tq: Taskq, tmp_path: Path) -> None:
    mnt = tmp_path / "ro"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        spooled = Taskq(mnt / "spool")
        task_id = spooled.submit("--in", "1h", "--", "true")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        for args in (["reschedule", task_id, "--in", "2h"], ["cancel", task_id]):
            text = one_line_error(spooled.run(*args, check=False), 75)
            assert "Read-only file system" in text
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)
