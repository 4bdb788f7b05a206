"""An attempt's files in logs/<id>/: its output N.out and its supervisor's N.status.

The supervisor (daemon/runner.py) holds N.status flock()ed while the
command runs, writes `S` when it begins and the exit status when the
command ends; the lock and the status outlive the daemon. Recovery, the
attempts part and `taskq logs -f` read them here.
"""

from __future__ import annotations

import errno
import os
import stat

from taskq.errors import CorruptFile
from taskq.spool import locks
from taskq.spool.layout import out_path, status_path


def supervisor_alive(log_dir: str, attempt: int) -> bool:
    """Tell whether an attempt's supervisor still runs (holds the status lock)."""
    return locks.held(status_path(log_dir, attempt))


def read_status(log_dir: str, attempt: int) -> int | None:
    """The exit status the supervisor recorded, or None if it recorded none."""
    return read_supervisor(log_dir, attempt)[1]


def read_supervisor(log_dir: str, attempt: int) -> tuple[bool, int | None]:
    """(whether the supervisor began, the exit status it recorded if any).

    The status is a shell's $?, 0 to 255; a file that is no regular file,
    or holds anything else, recorded none.
    """
    try:
        fd = os.open(status_path(log_dir, attempt), _READ)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ELOOP):  # none, or a link: no supervisor wrote it
            return False, None
        raise
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        lines = os.read(fd, 64).split() if regular else []
    finally:
        os.close(fd)
    began = b"S" in lines
    last = lines[-1] if lines else b""
    code = int(last) if last.isdigit() and len(last) <= 3 and int(last) <= 255 else None
    return began or code is not None, code


def never_began(log_dir: str, attempt: int) -> bool:
    """Whether an attempt's files are as a start that never began leaves them: both empty.

    The daemon makes them ahead of a start (daemon/staging.py); a task
    cancelled then, or a start the keeper refused, leaves them so. A begun
    attempt's status holds "S" at least.
    """
    try:
        status = os.lstat(status_path(log_dir, attempt))
        output = os.lstat(out_path(log_dir, attempt))
    except FileNotFoundError:
        return False
    return status.st_size == 0 and output.st_size == 0


def read_output(log_dir: str, attempt: int, offset: int = 0, most: int = 1 << 20) -> bytes:
    """Up to `most` bytes of an attempt's output from offset (b"" at its end).

    Opened without blocking or following a link: what is not a regular
    file there is CorruptFile, never read (a FIFO would hang `taskq logs`).
    """
    fd = os.open(out_path(log_dir, attempt), _READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorruptFile(f"{out_path(log_dir, attempt)} is not a regular file")
        return os.pread(fd, most, offset)
    finally:
        os.close(fd)


_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
