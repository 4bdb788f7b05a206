"""The daemon's path options never harm what is at the path, and never hang it.

--pidfile (and its FILE.lock), --metrics-file, --log-file and the spool are
each tried with a device node, a FIFO and a symbolic link in their place:
the daemon refuses to start (status 2, one line, before it blocks on
anything) and leaves the node as it was. The device nodes are made with
mknod in the test's own directory (a char device 1,3, as /dev/null is:
never the host's), so those cases need root; the FIFOs do not. Then what
a running daemon does when something changes under it: a pidfile replaced
is not removed at exit, a device put at the metrics file's name is left
alone, and a log directory removed before SIGHUP costs a warning, not the
daemon.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, wait_for

StartDaemon = Callable[..., Daemon]


def device(path: Path) -> Path:
    """A character device 1,3 (a null device) of our own; skip without the right to make one."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("needs root to make a device node (mknod)")
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def link(path: Path) -> Path:
    (path.parent / "target").write_text("precious\n")
    path.symlink_to("target")
    return path


MAKERS = {"device": device, "FIFO": fifo, "link": link}
KINDS = {"device": "a character device", "FIFO": "a FIFO", "link": "a symbolic link"}


def identity(path: Path) -> tuple[int, int, int, int]:
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_rdev, st.st_size


def refused(tq: Taskq, *args: str) -> str:
    """Start a daemon that must refuse at once; its one line."""
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    proc = subprocess.run(
        [*TASKQ, "daemon", "--host-id", "paths", *args],
        capture_output=True,
        env=env,
        timeout=60,  # a FIFO opened for writing with no reader blocks for ever
    )
    text = proc.stderr.decode()
    assert proc.returncode == 2, text
    assert text.startswith("taskq: ") and text.count("\n") == 1, text
    return text


@pytest.mark.parametrize("what", MAKERS)
@pytest.mark.parametrize(
    "option,name",
    [("--pidfile", "taskq.pid"), ("--metrics-file", "taskq.prom"), ("--log-file", "taskq.log")],
)
def test_a_node_at_a_file_option_is_refused_and_left_as_it_was(
    tq: Taskq, tmp_path: Path, option: str, name: str, what: str
) -> None:
    node = MAKERS[what](tmp_path / name)
    before = identity(node)
    text = refused(tq, option, str(node))
    assert f"{KINDS[what]}, not a regular file" in text
    assert identity(node) == before
    beside = {p.name for p in tmp_path.iterdir()} - {"spool"}
    assert beside == {name, *(["target"] if what == "link" else [])}, "nothing else was made"
    if what == "link":
        assert (tmp_path / "target").read_text() == "precious\n"


@pytest.mark.parametrize("what", MAKERS)
def test_a_node_at_the_pidfiles_lock_is_refused(tq: Taskq, tmp_path: Path, what: str) -> None:
    node = MAKERS[what](tmp_path / "taskq.pid.lock")
    before = identity(node)
    assert f"{KINDS[what]}, not a regular file" in refused(
        tq, "--pidfile", str(tmp_path / "taskq.pid")
    )
    assert identity(node) == before
    assert not (tmp_path / "taskq.pid").exists()


@pytest.mark.parametrize("what", ["device", "FIFO"])
def test_a_node_as_the_spool_is_refused(tmp_path: Path, what: str) -> None:
    node = MAKERS[what](tmp_path / "spool")
    before = identity(node)
    assert f"{KINDS[what]}, not a directory" in refused(Taskq(node))
    assert identity(node) == before


def test_file_options_in_a_missing_directory_are_bad_input(tq: Taskq, tmp_path: Path) -> None:
    for option, name in (
        ("--log-file", "x.log"),
        ("--pidfile", "x.pid"),
        ("--metrics-file", "x.prom"),
    ):
        assert "no directory" in refused(tq, option, str(tmp_path / "gone" / name))
    assert not (tmp_path / "gone").exists()


def test_a_metrics_file_not_named_prom_is_refused(tq: Taskq, tmp_path: Path) -> None:
    assert "must end in .prom" in refused(tq, "--metrics-file", str(tmp_path / "metrics.txt"))
    assert not (tmp_path / "metrics.txt").exists()


@pytest.mark.slow
def test_a_replaced_pidfile_is_not_removed_at_exit(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    pidfile = tmp_path / "taskq.pid"
    d = start_daemon("--pidfile", str(pidfile))
    wait_for(pidfile.exists, 15, "the pidfile")
    (tmp_path / "other.pid").write_text("12345\n")
    os.replace(tmp_path / "other.pid", pidfile)  # another daemon's, or an operator's
    assert d.stop() == 0
    assert pidfile.read_text() == "12345\n"


@pytest.mark.slow
def test_the_daemons_own_pidfile_is_removed_at_exit(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    pidfile = tmp_path / "taskq.pid"
    d = start_daemon("--pidfile", str(pidfile))
    wait_for(pidfile.exists, 15, "the pidfile")
    assert pidfile.read_text() == f"{d.proc.pid}\n"
    assert d.stop() == 0
    assert not pidfile.exists()


@pytest.mark.slow
def test_a_device_put_at_the_metrics_file_is_left_alone(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    prom = tmp_path / "taskq.prom"
    d = start_daemon("--metrics-file", str(prom))
    wait_for(prom.exists, 30, "the first metrics file")
    prom.unlink()
    node = device(prom)
    before = identity(node)
    wait_for(lambda: "not a regular file" in d.text(), 60, "the daemon to warn")
    assert identity(node) == before
    assert d.stop() == 0
    assert identity(node) == before  # the last write at exit too


@pytest.mark.slow
def test_sighup_with_its_log_directory_removed_keeps_the_daemon(tq: Taskq, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "taskq.log"
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    argv = [*TASKQ, "daemon", "--host-id", "paths", "--log-file", str(log)]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: log.exists() and "started on" in log.read_text(), 30, "the log file")
        with open(log) as opened:  # read on after its directory is gone
            log.unlink()
            logs.rmdir()
            proc.send_signal(signal.SIGHUP)
            seen: list[str] = []

            def warned() -> bool:
                seen.append(opened.read())
                return "cannot reopen the log file" in "".join(seen)

            wait_for(warned, 15, "the warning")
        task = tq.submit("--", "true")
        tq.wait_state(task, ("done",), timeout=60)  # it still dispatches
        assert proc.poll() is None
        logs.mkdir()
        proc.send_signal(signal.SIGHUP)  # the directory is back: a new file
        wait_for(lambda: log.exists() and "reopened the log file" in log.read_text(), 15, "it")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
