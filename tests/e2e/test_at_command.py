"""`taskq at`, `atq`, `atrm` and `batch` as at(1) users type them, through real daemons.

The submitter's clock is moved with libfaketime where a test needs
`now + 1 minute` to come soon; the daemon's load average is a file
bind-mounted over /proc/loadavg in a mount namespace of the daemon's own.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import TASKQ, Daemon, Taskq, read_stamps, until, wait_for

StartDaemon = Callable[..., Daemon]
LIBFAKETIME = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)
DATE_LINE = re.compile(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \w+ \d{4}\n$")  # date(1)'s
JOB_LINE = re.compile(r"^job (\w{26}) at \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$")
WARNING = "warning: commands will be executed using /bin/sh"


def taskq(
    tq: Taskq, *args: str, cwd: Path, input: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The real CLI, run in a directory of the test's (as a user at a shell prompt)."""
    full = {**os.environ, "TASKQ_SPOOL": str(tq.spool), **tq.env, **(env or {})}
    return subprocess.run(
        [*TASKQ, *args], input=input, capture_output=True, env=full, cwd=cwd, timeout=60
    )


def _starts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The start records of a task's journal, as `taskq show --json` gives them."""
    return [r for r in doc["attempts"] if r["event"] == "start"]


def _job_id(done: subprocess.CompletedProcess[bytes]) -> str:
    """The id `taskq at` printed, checked against at's two lines on standard error."""
    assert done.returncode == 0, done.stderr
    warning, job = done.stderr.decode().splitlines()
    m = JOB_LINE.match(job)
    assert warning == WARNING and m is not None, done.stderr
    assert done.stdout.decode() == f"{m.group(1)}\n"
    return m.group(1)


@pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime (Debian package faketime) is missing")
@pytest.mark.slow
def test_echo_date_into_a_file_now_plus_one_minute(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    # echo 'date > out.txt' | taskq at now + 1 minute, typed 55 s "earlier" (the
    # submitter's clock runs 55 s behind) so that its minute ends in 5 s of real time.
    start_daemon()
    assert LIBFAKETIME is not None
    behind = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "-55s"}
    done = taskq(tq, "at", "now", "+", "1", "minute", cwd=tmp_path, input=b"date > out.txt\n",
                 env=behind)  # fmt: skip
    task_id = _job_id(done)
    shown = tq.show(task_id)
    assert shown["command"] == ["/bin/sh"] and shown["cwd"] == str(tmp_path)
    assert shown["max_attempts"] == 1  # at(1) runs a job once
    doc = tq.wait_state(task_id, ("done",), timeout=90)
    out = tmp_path / "out.txt"
    assert DATE_LINE.match(out.read_text()), out.read_text()
    [start] = _starts(doc)
    assert datetime.fromisoformat(start["time"]) >= datetime.fromisoformat(doc["run_at"])


@pytest.mark.slow
def test_the_job_is_a_shell_script_run_in_the_submitter_s_environment(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    start_daemon()
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    job = tmp_path / "job.sh"
    job.write_text('cd sub && echo "$GREETING" > here.txt\npwd > ../where.txt\nexit 3\n')
    done = taskq(tq, "at", "-f", str(job), "now", cwd=work, env={"GREETING": "hello there"})
    task_id = _job_id(done)
    doc = tq.wait_state(task_id, ("failed",), timeout=60)  # exit 3, and no retry
    assert len(_starts(doc)) == 1 and doc["exit_status"] == 3
    assert (work / "sub" / "here.txt").read_text() == "hello there\n"
    assert (work / "where.txt").read_text() == f"{work / 'sub'}\n"


@pytest.mark.slow
def test_the_umask_is_kept(tq: Taskq, start_daemon: StartDaemon, tmp_path: Path) -> None:
    start_daemon()
    submit = f"umask 027 && exec {' '.join(TASKQ)} at now"
    done = subprocess.run(
        ["sh", "-c", submit],
        input=b"touch made\n",
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "TASKQ_SPOOL": str(tq.spool)},
        timeout=60,
    )
    tq.wait_state(_job_id(done), ("done",), timeout=60)
    assert (tmp_path / "made").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(
    ("flags", "mail", "queue"),
    [([], None, "default"), (["-m"], "always", "default"), (["-M", "-q", "b"], "never", "b")],
)
def test_mail_and_queue_flags(
    tq: Taskq, tmp_path: Path, flags: list[str], mail: str | None, queue: str
) -> None:
    done = taskq(tq, "at", *flags, "now", "+", "1", "hour", cwd=tmp_path, input=b"true\n")
    shown = tq.show(_job_id(done))
    assert (shown["mail"], shown["queue"], shown["stdin_bytes"]) == (mail, queue, 5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "taskq: missing TIMESPEC (e.g. now + 1 hour, 4pm tomorrow) or -t TIME\n"),
        (["-t", "12241830", "now"], "taskq: give TIMESPEC or -t TIME, not both\n"),
        (["-m", "-M", "now"], "taskq: give -m or -M, not both\n"),
        (["-f", "/nonexistent/job", "now"], "taskq: cannot read the job from /nonexistent/job"),
        (["-t", "1224"], "taskq: bad -t '1224': use [[CC]YY]MMDDhhmm[.ss]\n"),
        (["half", "past", "nine"], "taskq: bad time 'half past nine': not a time;"),
        (["-q", "a/b", "now"], "taskq: bad queue"),
    ],
)
def test_bad_input_is_one_line_and_submits_nothing(
    tq: Taskq, tmp_path: Path, args: list[str], message: str
) -> None:
    done = taskq(tq, "at", *args, cwd=tmp_path, input=b"true\n")
    err = done.stderr.decode()
    assert done.returncode == 2 and done.stdout == b"" and err.startswith(message), err
    assert err.count("\n") == 1
    assert not list((tq.spool / "pending").glob("*/*"))


@pytest.mark.slow
def test_atq_lists_as_atq_does_and_atrm_removes(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    utc = Taskq(tq.spool, env={"TZ": "UTC"})
    first = _job_id(taskq(utc, "at", "-t", "203012240900", cwd=tmp_path, input=b"true\n"))
    second = _job_id(
        taskq(utc, "at", "-q", "reports", "-t", "203012251830", cwd=tmp_path, input=b"true\n")
    )
    gate = tmp_path / "gate"
    start_daemon()
    running = _job_id(taskq(utc, "at", "now", cwd=tmp_path, input=f"true{until(gate)}\n".encode()))
    tq.wait_state(running, ("running",), timeout=60)
    me = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    listed = taskq(utc, "atq", cwd=tmp_path).stdout.decode().splitlines()
    assert listed[1:] == [
        f"{first}\tTue Dec 24 09:00:00 2030 default {me}",
        f"{second}\tWed Dec 25 18:30:00 2030 reports {me}",
    ]
    assert re.fullmatch(rf"{running}\t\w{{3}} \w{{3}} [ \d]\d [\d:]{{8}} \d{{4}} = {me}", listed[0])
    only = taskq(utc, "atq", "-q", "reports", cwd=tmp_path).stdout.decode()
    assert only == f"{second}\tWed Dec 25 18:30:00 2030 reports {me}\n"
    removed = taskq(utc, "atrm", first, cwd=tmp_path)
    assert (removed.returncode, removed.stdout.decode()) == (0, f"cancelled {first}\n")
    assert tq.state(first) == "cancelled"
    missing = "01M8ZZZZZZZZZZZZZZZZZZZZZZ"
    mixed = taskq(utc, "atrm", missing, second, cwd=tmp_path)
    assert mixed.returncode == 3 and mixed.stdout.decode() == f"cancelled {second}\n"
    assert mixed.stderr.decode().startswith(f"taskq: no task {missing}")
    gate.touch()
    tq.wait_state(running, ("done",), timeout=60)
    assert taskq(utc, "atq", cwd=tmp_path).stdout == b""


# -- batch: the daemon's load gate, with the load average the test sets ---------


class LoadedDaemon:
    """A daemon in a mount namespace of its own, whose /proc/loadavg is a test's file."""

    def __init__(self, tq: Taskq, tmp_path: Path, load: str, *args: str) -> None:
        self.loadavg = tmp_path / "loadavg"
        self.set(load)
        self.log = tmp_path / "loaded-daemon.log"
        wrapper = 'mount --bind "$0" /proc/loadavg && exec "$@"'
        argv = ["unshare", "-m", "sh", "-c", wrapper, str(self.loadavg), *TASKQ, "daemon"]
        env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*argv, "--host-id", "loaded", *args], stderr=log, env=env)
        wait_for(
            lambda: b"started on" in self.log.read_bytes() or self.proc.poll() is not None,
            30,
            "the daemon to start",
        )
        if self.proc.poll() is not None:
            raise AssertionError(f"the daemon exited at once: {self.log.read_text()}")

    def set(self, one_minute: str) -> None:
        """Write the load average it reads (in place: a bind mount follows the inode)."""
        with open(self.loadavg, "w") as f:
            f.write(f"{one_minute} 0.50 0.50 1/100 4242\n")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def _can_bind_over_proc() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-m", "sh", "-c", "mount --bind /dev/null /proc/loadavg"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


needs_namespace = pytest.mark.skipif(
    not _can_bind_over_proc(), reason="needs root, unshare(1) and a mount namespace"
)


@pytest.fixture
def loaded(tq: Taskq, tmp_path: Path) -> Iterator[Callable[..., LoadedDaemon]]:
    started: list[LoadedDaemon] = []

    def start(load: str, *args: str) -> LoadedDaemon:
        started.append(LoadedDaemon(tq, tmp_path, load, *args))
        return started[-1]

    yield start
    for d in started:
        d.stop()


@needs_namespace
@pytest.mark.slow
def test_batch_waits_until_the_load_average_is_below_the_limit(
    tq: Taskq, loaded: Callable[..., LoadedDaemon], tmp_path: Path, stamps: Path
) -> None:
    daemon = loaded("3.00", "--load-limit", "batch=1.5")  # busy
    job = f'echo "$TASKQ_ID 1 $(date +%s.%N)" >> {stamps}\n'.encode()
    batched = _job_id(taskq(tq, "batch", cwd=tmp_path, input=job))
    assert tq.show(batched)["queue"] == "batch"
    ungated = _job_id(taskq(tq, "at", "now", cwd=tmp_path, input=job))
    tq.wait_state(ungated, ("done",), timeout=60)
    # Submitted first and due first, the batch job was passed over for the load.
    assert tq.state(batched) == "pending"
    lowered = time.time()
    daemon.set("0.20")
    tq.wait_state(batched, ("done",), timeout=60)
    started = {task_id: when for task_id, _, when in read_stamps(stamps)}
    assert started[batched] >= lowered


@needs_namespace
@pytest.mark.slow
def test_batch_jobs_start_an_interval_apart(
    tq: Taskq, loaded: Callable[..., LoadedDaemon], tmp_path: Path
) -> None:
    loaded("0.10", "--load-interval", "3s")  # the default gate, batch=1.5
    ids = [_job_id(taskq(tq, "batch", cwd=tmp_path, input=b"true\n")) for _ in range(2)]
    starts = []
    for task_id in ids:
        [start] = _starts(tq.wait_state(task_id, ("done",), timeout=60))
        starts.append(datetime.fromisoformat(start["time"]))
    first, second = sorted(starts)
    assert (second - first).total_seconds() >= 3.0  # the daemon's own start records


@needs_namespace
@pytest.mark.slow
def test_a_gate_can_be_taken_off(
    tq: Taskq, loaded: Callable[..., LoadedDaemon], tmp_path: Path
) -> None:
    loaded("50.00", "--load-limit", "batch=off")
    tq.wait_state(_job_id(taskq(tq, "batch", cwd=tmp_path, input=b"true\n")), ("done",), 60)


def test_bad_load_limits_are_refused(tq: Taskq, tmp_path: Path) -> None:
    for value in ("batch", "batch=0", "batch=-1", "batch=high", "a/b=1"):
        done = taskq(tq, "daemon", "--load-limit", value, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.decode().startswith("taskq: "), value
        assert done.stderr.decode().count("\n") == 1, done.stderr


def test_batch_prints_as_at_does(tq: Taskq, tmp_path: Path) -> None:
    done = taskq(tq, "batch", "-q", "nightly", cwd=tmp_path, input=b"true\n")
    assert json.loads(tq.run("show", "--json", _job_id(done)).stdout)["queue"] == "nightly"
