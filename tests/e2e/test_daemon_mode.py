"""Classic daemon mode (--detach, --pidfile), log files with SIGHUP, journald prefixes."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, wait_for

StartDaemon = Callable[..., Daemon]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_detach_pidfile_and_sighup(tq: Taskq, tmp_path: Path) -> None:
    pidfile, log = tmp_path / "taskq.pid", tmp_path / "taskq.log"
    args = ["daemon", "--detach", "--pidfile", str(pidfile), "--log-file", str(log)]
    first = tq.run(*args)
    assert first.stdout == b"" and first.stderr == b""  # the foreground part returns at once
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 60, "the pidfile"))
    try:
        assert alive(pid) and os.getsid(pid) != os.getsid(0)  # detached into its own session
        second = tq.run(*args, check=False)
        assert second.returncode == 4
        assert second.stderr.decode() == (
            f"taskq: another taskq daemon (pid {pid}) holds the pidfile {pidfile}\n"
        )
        task_id = tq.submit("--", "true")
        tq.wait_state(task_id, ("done",))
        assert f"started {task_id}" in log.read_text()
        log.rename(tmp_path / "taskq.log.1")
        os.kill(pid, signal.SIGHUP)
        later = tq.submit("--", "true")
        tq.wait_state(later, ("done",))
        wait_for(lambda: log.exists() and f"ended {later}" in log.read_text(), 60, "the new log")
        assert "SIGHUP: reopened the log file" in log.read_text()
        assert f"started {task_id}" in (tmp_path / "taskq.log.1").read_text()
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not alive(pid), 60, "the daemon to exit")
    assert not pidfile.exists()


@pytest.mark.slow
def test_foreground_pidfile_refuses_a_second_daemon(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    pidfile = tmp_path / "taskq.pid"
    first = start_daemon("--pidfile", str(pidfile))
    wait_for(lambda: pidfile.exists(), 60, "the pidfile")
    assert int(pidfile.read_text()) == first.proc.pid
    second = tq.run("daemon", "--pidfile", str(pidfile), check=False)
    assert second.returncode == 4 and b"holds the pidfile" in second.stderr
    assert first.stop() == 0 and not pidfile.exists()


def test_journal_stream_gets_priority_prefixes(tq: Taskq, tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    with open(err, "wb") as f:
        st = os.fstat(f.fileno())
        env = {
            **os.environ,
            "TASKQ_SPOOL": str(tq.spool),
            "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}",
        }
        proc = subprocess.Popen([*TASKQ, "daemon"], stderr=f, env=env)
        try:
            wait_for(lambda: b"started on" in err.read_bytes(), 60, "the daemon to start")
        finally:
            proc.terminate()
            proc.wait(60)
    lines = err.read_text().splitlines()
    assert lines[0].startswith("<6>taskq daemon ") and all(x.startswith("<") for x in lines)


def test_plain_stderr_without_the_journal(tq: Taskq, start_daemon: StartDaemon) -> None:
    daemon = start_daemon()
    daemon.stop()
    assert daemon.text().splitlines()[0].startswith(f"taskq[{daemon.proc.pid}]: taskq daemon ")
