"""Classic daemon mode: the pidfile, held with filelock, and detaching.

FILE holds the daemon's pid; FILE.lock is held with a filelock lock for the
daemon's whole life, so a second daemon given the same pidfile refuses to
start with a clear message instead of running beside the first. Neither
may be anything but a regular file. Detaching (double fork, new session,
chdir /, stdio to /dev/null) is python-daemon's.
"""

from __future__ import annotations

import os

import filelock

from taskq.errors import BadInput, Conflict, CorruptFile
from taskq.spool import fsutil


class PidFile:
    """A pidfile guarded by a lock that lives as long as its daemon.

    FILE and FILE.lock must each be a regular file or nothing: a device, a
    FIFO, a socket or a link there is refused (`--pidfile /dev/null`, a
    common way to say "none", must never replace /dev/null). FILE is
    written through a temporary name and renamed into place; at exit it is
    removed only if it is still the file this daemon wrote.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.lock_path = self.path + ".lock"
        self._lock: filelock.BaseFileLock | None = None
        self._written: tuple[int, int] | None = None  # (st_dev, st_ino) of our FILE

    def _refuse(self) -> Conflict:
        try:  # never blocking on a FIFO, never through a link
            pid = fsutil.read_small(self.path, 32)[0].decode("ascii", "replace").strip()
        except (OSError, CorruptFile):
            pid = "unknown"
        return Conflict(f"another taskq daemon (pid {pid}) holds the pidfile {self.path}")

    def _check_kinds(self) -> None:
        for path in (self.path, self.lock_path):
            found = fsutil.not_regular(path)
            if found is not None:
                raise BadInput(f"--pidfile {path}: {found}, not a regular file")

    def check(self) -> None:
        """Fail now, in the foreground, if another daemon holds the pidfile."""
        self._check_kinds()
        self._take().release()

    def _take(self) -> filelock.BaseFileLock:
        # A lock object must not cross a fork (filelock refuses it), so each
        # process (before and after detaching) makes its own.
        lock = filelock.FileLock(self.lock_path, timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise self._refuse() from None
        return lock

    def acquire(self) -> None:
        """Take the lock for good and write our pid; Conflict if another daemon has it."""
        self._check_kinds()
        self._lock = self._take()
        written: list[os.stat_result] = []

        def last_look(staged: str) -> None:
            self._check_kinds()  # once more, right before the rename that replaces FILE
            written.append(os.lstat(staged))

        fsutil.replace_file(
            self.path,
            f"{os.getpid()}\n".encode(),
            sync=False,
            staging=f"{self.path}.{os.getpid()}.tmp",  # a crashed daemon of this pid's is removed
            mode=0o644,
            umask=True,
            check=last_look,
        )
        self._written = (written[0].st_dev, written[0].st_ino)

    def release(self) -> None:
        """Remove FILE if it is still ours (not another daemon's, nor put there since)."""
        try:
            st = os.lstat(self.path)
            if self._written == (st.st_dev, st.st_ino):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self._lock is not None:
            self._lock.release()


def detach() -> None:
    """Become a background daemon (python-daemon); returns in the daemon."""
    import daemon  # type: ignore[import-untyped]  # python-daemon only for --detach

    # signal_map={} leaves signals to the scheduler's own handlers.
    daemon.DaemonContext(working_directory="/", umask=0o077, signal_map={}).open()
