"""The daemon speaks sd_notify to a real unix datagram socket, as systemd would."""

from __future__ import annotations

import glob
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Daemon, Taskq

StartDaemon = Callable[..., Daemon]
LIBFAKETIME: str | None = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), None)


class Listener:
    """A unix datagram socket read by a thread, as systemd reads NOTIFY_SOCKET."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.lines: list[str] = []
        self.closed = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.closed:
            try:
                self.lines += self.sock.recv(4096).decode().splitlines()
            except TimeoutError:
                continue

    def wait_for(self, until: Callable[[list[str]], bool], timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until(list(self.lines)):
            time.sleep(0.02)
        return list(self.lines)

    def close(self) -> None:
        self.closed = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    it = Listener(str(tmp_path / "notify"))
    yield it
    it.close()


@pytest.mark.slow
def test_ready_status_watchdog_stopping(
    tq: Taskq, start_daemon: StartDaemon, listener: Listener, tmp_path: Path
) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "200000"}
    daemon = start_daemon(env=env)
    lines = listener.wait_for(lambda ls: ls.count("WATCHDOG=1") >= 3, 10)
    assert "READY=1" in lines
    assert any(line.startswith("STATUS=dispatching; 0/8 workers busy") for line in lines), lines
    assert lines.count("WATCHDOG=1") >= 3  # every 0.1 s: half of WATCHDOG_USEC
    task_id = tq.submit("--", "sleep", "2")  # STATUS= is sent at most once a second
    busy = listener.wait_for(lambda ls: any("1/8 workers busy" in x for x in ls), 10)
    assert any("1/8 workers busy" in x for x in busy), busy
    tq.wait_state(task_id, ("done",))
    assert daemon.stop() == 0
    rest = listener.wait_for(lambda ls: "STOPPING=1" in ls, 5)
    assert "STOPPING=1" in rest and rest.index("STOPPING=1") > rest.index("READY=1")


@pytest.mark.slow
def test_abstract_socket_and_no_watchdog_for_another_pid(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    name = f"taskq-test-{time.time_ns()}"
    abstract = Listener("\0" + name)
    try:
        env = {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"}
        daemon = start_daemon(env=env)
        assert "READY=1" in abstract.wait_for(lambda ls: "READY=1" in ls, 10)
        time.sleep(0.5)  # five watchdog intervals in which none must come
        assert "WATCHDOG=1" not in abstract.lines  # WATCHDOG_PID names another process
        daemon.stop()
    finally:
        abstract.close()


@pytest.mark.slow
@pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime (Debian package faketime) is missing")
def test_not_ready_while_the_clock_is_not_trusted(
    tq: Taskq, start_daemon: StartDaemon, listener: Listener, tmp_path: Path
) -> None:
    env = {
        "NOTIFY_SOCKET": str(tmp_path / "notify"),
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": "+30s",
    }
    daemon = start_daemon(env=env)
    lines = listener.wait_for(lambda ls: any("NOT dispatching" in x for x in ls), 10)
    assert any(x.startswith("STATUS=NOT dispatching: clock uncertainty") for x in lines), lines
    time.sleep(1.0)  # a second of distrust in which READY=1 must not come
    assert "READY=1" not in listener.lines
    daemon.stop()
