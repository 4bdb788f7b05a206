"""The poison guard, in process: what escapes a handling, and the second-death rule."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import time
from pathlib import Path

import pytest

from taskq.daemon.poison import SLOT, PoisonGuard
from taskq.spool.layout import Spool
from taskq.spool.task import TaskBody, TaskName, new_id

IN_CREATE, IN_MOVED_TO = 0x100, 0x80  # <sys/inotify.h>


def a_task(spool: Spool) -> TaskName:
    now = time.time_ns() // 1000
    name = TaskName(now, new_id(now), 1)
    os.makedirs(spool.bucket_dir(name.bucket), exist_ok=True)
    body = TaskBody(id=name.id, argv=["true"], run_at=now, submitted_at=now)
    Path(spool.pending_path(name)).write_bytes(body.to_json())
    return name


def path_of(spool: Spool, name: TaskName) -> str:
    return spool.pending_path(name)


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    return spool


def guard(spool: Spool, pid: int) -> PoisonGuard:
    g = PoisonGuard(spool, "h", pid, lambda: time.time_ns() // 1000)
    g.start()
    return g


def test_what_escapes_a_handling_quarantines_the_file_and_is_swallowed(spool: Spool) -> None:
    name = a_task(spool)
    g = guard(spool, os.getpid())
    with g.handling("task", name.id, path_of(spool, name), "prepare"):
        raise OverflowError("cannot convert float infinity to integer")
    (reason,) = Path(spool.corrupt).glob("*.reason")
    assert "prepare failed: OverflowError: cannot convert float infinity" in reason.read_text()
    assert not os.path.exists(path_of(spool, name))


def test_transient_trouble_goes_on_to_the_loop(spool: Spool) -> None:
    name = a_task(spool)
    g = guard(spool, os.getpid())
    with pytest.raises(OSError), g.handling("task", name.id, path_of(spool, name), "start"):
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(MemoryError), g.handling("task", name.id, path_of(spool, name), "start"):
        raise MemoryError
    assert os.path.exists(path_of(spool, name)) and not os.listdir(spool.corrupt)


def die_handling(spool: Spool, pid: int, name: TaskName) -> None:
    """A daemon (pid, long gone) that died while handling name: its marker says so."""
    g = PoisonGuard(spool, "h", pid, lambda: 0)
    g.start()
    g.handling("task", name.id, path_of(spool, name), "prepare").__enter__()
    os.close(g._fd)  # it dies: no exit, no clearing


def test_one_death_is_a_suspicion_two_in_a_row_a_quarantine(spool: Spool) -> None:
    name = a_task(spool)
    die_handling(spool, 999_991, name)
    guard(spool, 999_992)  # reads the dead marker: a suspect, nothing moved
    assert os.path.exists(path_of(spool, name))
    assert os.path.exists(os.path.join(spool.run, "h.suspects"))
    die_handling(spool, 999_993, name)
    guard(spool, 999_994)
    assert not os.path.exists(path_of(spool, name))
    (reason,) = Path(spool.corrupt).glob("*.reason")
    assert "died twice while handling it (prepare)" in reason.read_text()
    left = {e for e in os.listdir(spool.run) if e.endswith(".handling")}
    assert left == {"h_999994.handling"}  # the dead daemons' markers were each read once


def test_a_handling_completed_between_two_deaths_clears_the_suspicion(spool: Spool) -> None:
    name = a_task(spool)
    die_handling(spool, 999_981, name)
    g = guard(spool, 999_982)
    with g.handling("task", name.id, path_of(spool, name), "prepare"):
        pass  # handled to the end: a good file a daemon merely died beside
    die_handling(spool, 999_983, name)
    guard(spool, 999_984)
    assert os.path.exists(path_of(spool, name)) and not os.listdir(spool.corrupt)


def test_a_marker_holds_one_slot_per_thread(spool: Spool) -> None:
    name = a_task(spool)
    g = guard(spool, os.getpid())
    with g.handling("task", name.id, path_of(spool, name), "resolve", slot=1):
        data = Path(g.marker).read_bytes()
        assert data[SLOT:].startswith(f"task {name.id}\tresolve\n".encode())
    assert Path(g.marker).read_bytes()[SLOT : SLOT + 1] == b"\n"


def test_a_reason_appears_in_corrupt_whole_never_created_there(spool: Spool) -> None:
    # inotify says how a name came into corrupt/: created there (so a reader,
    # taskq wait among them, could read it empty) or renamed in, whole.
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0
    try:
        assert libc.inotify_add_watch(fd, spool.corrupt.encode(), IN_CREATE | IN_MOVED_TO) >= 0
        name = a_task(spool)
        assert spool.quarantine(path_of(spool, name), "a reason", time.time_ns() // 1000)
        events, data = {}, os.read(fd, 65536)
        while data:
            _, mask, _, size = struct.unpack_from("iIII", data)
            events[data[16 : 16 + size].rstrip(b"\0").decode()] = mask
            data = data[16 + size :]
    finally:
        os.close(fd)
    reasons = {n: mask for n, mask in events.items() if n.endswith(".reason")}
    assert reasons and all(mask & IN_MOVED_TO for mask in reasons.values()), events
