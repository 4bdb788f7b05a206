"""A start handed to a real keeper ahead of its instant: never before it, by the command's
own stamp; not at all on a wall clock that has not reached it; and at its instant still
when the daemon that asked dies in between (the keeper outlives it)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for

from taskq.daemon.keeper import LONGEST_WAIT
from taskq.daemon.keeperlink import Began, Early, KeeperLink

# s: how far ahead of its instant each request goes (the daemon's lead is 5 ms), as
# far as the keeper waits: time enough for the test to act before the instant.
AHEAD = LONGEST_WAIT * 0.9 / 1e6
TRIES = 5


def serving() -> KeeperLink:
    link = KeeperLink(lambda fd, key: None, lambda fd: None)
    link.start()
    wait_for(lambda: link.ended() and link.ready, 60, "the keeper to serve")
    return link


@pytest.fixture
def keeper() -> Iterator[KeeperLink]:
    link = serving()
    yield link
    link.close()  # the keeper exits once nothing of it runs


def attempt_files(tmp_path: Path) -> tuple[list[int], Path, Path]:
    """Standard input, a fresh output file and a locked status file, as the daemon passes them."""
    out, status = tmp_path / "1.out", tmp_path / "1.status"
    status_fd = os.open(status, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(status_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    out_fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC)
    return [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), out_fd, status_fd], out, status


def ask(link: KeeperLink, tmp_path: Path, wall_ahead: float) -> tuple[int, Path, Path]:
    """Send `date +%s.%N` to start AHEAD from now by the monotonic clock, wall_ahead by the
    wall clock; the wall instant (µs), the output and the status file."""
    wall, mono = time.time_ns() // 1000, time.monotonic_ns() // 1000
    instant = (wall + round(wall_ahead * 1e6), mono + round(AHEAD * 1e6))
    request = link.request(["date", "+%s.%N"], {"PATH": os.defpath}, str(tmp_path), None, instant)
    assert request is not None
    fds, out, status = attempt_files(tmp_path)
    try:
        link.send(request, fds)
    finally:
        for fd in fds:
            os.close(fd)
    return instant[0], out, status


def test_a_request_sent_early_starts_at_its_instant_never_before(
    keeper: KeeperLink, tmp_path: Path
) -> None:
    instant, out, status = ask(keeper, tmp_path, AHEAD)
    [answer] = keeper.answers()
    assert isinstance(answer, Began), answer
    assert answer.at >= instant  # the keeper's clock just before its spawn
    wait_for(lambda: status.read_text() == "S\n0\n", 30, "the command's exit status")
    stamp = float(out.read_text())
    assert stamp * 1e6 >= answer.at >= instant, (stamp, answer.at, instant)


def test_a_wall_clock_behind_the_instant_starts_nothing(keeper: KeeperLink, tmp_path: Path) -> None:
    # As after a step back of the wall clock: the monotonic instant comes, the wall one
    # is an hour off. The daemon is told, and the attempt's files stay as fresh as before.
    _, out, status = ask(keeper, tmp_path, 3600.0)
    [answer] = keeper.answers()
    assert isinstance(answer, Early), answer
    assert status.read_bytes() == b"" and out.read_bytes() == b""
    fd = os.open(status, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the keeper let the lock go
    finally:
        os.close(fd)


def exited(status: Path) -> None:
    wait_for(lambda: status.read_text() == "S\n0\n", 30, "the command's exit status")


def test_the_keeper_starts_at_the_instant_though_its_daemon_died_before_it(
    tmp_path: Path,
) -> None:
    # The request goes 90 ms ahead; a loaded machine may not close the socket within
    # that, which tests nothing: then again, with a fresh keeper, up to TRIES times.
    for n in range(TRIES):
        link, where = serving(), tmp_path / str(n)
        where.mkdir()
        instant, out, status = ask(link, where, AHEAD)
        link.close()  # what a daemon killed -9 leaves the keeper: its end of the socket closed
        closed = time.time_ns() // 1000
        exited(status)
        assert float(out.read_text()) * 1e6 >= instant
        if closed < instant:
            return
    pytest.fail(f"too slow to close before the instant in {TRIES} tries: nothing was tested")
