"""A lock as a sign of life: whether some process holds an flock() on a file.

A daemon holds run/HOST_PID.lock for its whole life, and an attempt's
supervisor holds logs/ID/N.status while its command runs; on the same
host, a lock nobody holds is a holder that is gone. (Over a shared
filesystem a lock may not be seen from another host: the callers judge
other hosts' records otherwise.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat


def held(path: str) -> bool:
    """Whether a process holds an flock() on path; a missing file is held by nobody.

    Whatever stands at the name is opened without blocking and without
    following a link: a FIFO, a device or a link there is no one's lock.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as e:
        if e.errno == errno.ELOOP:
            return False
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
