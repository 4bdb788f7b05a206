"""Classic daemon mode: the pidfile, held with filelock, and detaching.

FILE holds the daemon's pid; FILE.lock is held with a filelock lock for the
daemon's whole life, so a second daemon given the same pidfile refuses to
start with a clear message instead of running beside the first. Detaching
(double fork, new session, chdir /, stdio to /dev/null) is python-daemon's.
"""

from __future__ import annotations

import contextlib
import os

import filelock

from taskq.errors import Conflict


class PidFile:
    """A pidfile guarded by a lock that lives as long as its daemon."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._lock: filelock.BaseFileLock | None = None

    def _refuse(self) -> Conflict:
        try:
            with open(self.path) as f:
                pid = f.read().strip()
        except OSError:
            pid = "unknown"
        return Conflict(f"another taskq daemon (pid {pid}) holds the pidfile {self.path}")

    def check(self) -> None:
        """Fail now, in the foreground, if another daemon holds the pidfile."""
        self._take().release()

    def _take(self) -> filelock.BaseFileLock:
        # A lock object must not cross a fork (filelock refuses it), so each
        # process (before and after detaching) makes its own.
        lock = filelock.FileLock(self.path + ".lock", timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise self._refuse() from None
        return lock

    def acquire(self) -> None:
        """Take the lock for good and write our pid; Conflict if another daemon has it."""
        self._lock = self._take()
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, self.path)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if self._lock is not None:
            self._lock.release()


def detach() -> None:
    """Become a background daemon (python-daemon); returns in the daemon."""
    import daemon  # type: ignore[import-untyped]

    # signal_map={} leaves signals to the scheduler's own handlers.
    daemon.DaemonContext(working_directory="/", umask=0o077, signal_map={}).open()
