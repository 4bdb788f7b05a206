"""A daemon's face to the outside: its lock in run/, health record and sd_notify.

run/HOST_PID.lock is flock()ed for the daemon's life (on this host a free
lock means a dead daemon, whose claims may be recovered at once).
run/HOST_PID.status is rewritten at each clock check for `taskq status`.
Under systemd (Type=notify) it sends READY=1 once dispatching, STATUS= as
the state changes, WATCHDOG=1 and STOPPING=1.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from typing import Any

from taskq.daemon.sdnotify import Notifier
from taskq.observe.snapshot import Snapshot
from taskq.spool import rundir as status
from taskq.spool.layout import LOCK, PROBE, daemon_file
from taskq.times.timespec import SECOND, format_iso

log = logging.getLogger("taskq")


class Health:
    """The lock, the status record and systemd notifications of one daemon."""

    def __init__(self, run_dir: str, host: str, pid: int, settings: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.daemon = f"{host}_{pid}"  # as claims name it: HOST_PID
        self.host = host
        self.pid = pid
        self.settings = settings  # workers, lease, clock_check, max_uncertainty (seconds)
        self.systemd = Notifier()
        self.started_at = 0
        self.told_ready = self.told_stopping = False
        self.next_status = self.next_watchdog = 0
        self._lock_fd = -1
        self._lock_id = (0, 0)  # (st_dev, st_ino) of the lock we hold

    @property
    def probe(self) -> str:
        return daemon_file(self.run_dir, self.daemon, PROBE)

    @property
    def _lock_path(self) -> str:
        return daemon_file(self.run_dir, self.daemon, LOCK)

    def lock(self, now: int) -> None:
        """Hold run/HOST_PID.lock for as long as the daemon lives."""
        self.started_at = now
        self._lock_fd = self._take()

    def _take(self) -> int:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        st = os.fstat(fd)
        self._lock_id = (st.st_dev, st.st_ino)
        return fd

    def lock_lost(self) -> bool:
        """Whether run/HOST_PID.lock is not the file we hold: removed, or the spool made anew.

        Then `taskq status` calls this daemon dead, and a daemon of this
        host would take its claims for orphans.
        """
        try:
            st = os.stat(self._lock_path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self._lock_id

    def relock(self) -> None:
        """Hold a new run/HOST_PID.lock (the old one is gone with its directory)."""
        old, self._lock_fd = self._lock_fd, self._take()
        os.close(old)

    def unlock(self) -> None:
        """Leave run/: claims left behind stay ours until another daemon sees the lock free."""
        if not self.told_stopping:
            self.systemd.send("STOPPING=1")
        status.remove(self.run_dir, self.daemon)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._lock_path)
        os.close(self._lock_fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.probe)

    def write(self, snap: Snapshot, now: int) -> None:
        """Rewrite the health record; a full disk only costs a warning."""
        record = {
            "owner": self.daemon,  # the record's key for its daemon (taskq-spool(5))
            "host": self.host,
            "pid": self.pid,
            "started_at": format_iso(self.started_at),
            "updated_at": format_iso(now),
            "dispatching": snap.dispatching,
            "reason": snap.reason,
            "stopping": snap.stopping,
            "uncertainty": snap.uncertainty / SECOND,
            "offset": snap.offset / SECOND,
            "busy": snap.busy,
            "claims_won": snap.claims_won,
            "claims_lost": snap.claims_lost,
            **self.settings,
        }
        try:
            status.write(self.run_dir, self.daemon, record)
        except OSError as e:
            log.warning("cannot write the status record: %s", e)

    def tell_systemd(self, snap: Snapshot, mono: int, workers: int) -> None:
        """READY=1 once dispatching, STATUS= as it changes, WATCHDOG=1, STOPPING=1."""
        if not self.systemd.enabled:
            return
        if snap.stopping:
            if not self.told_stopping:
                self.systemd.send("STOPPING=1", "STATUS=stopping: waiting for running attempts")
                self.told_stopping = True
        elif snap.dispatching and not self.told_ready:
            self.systemd.send("READY=1", f"STATUS={_text(snap, workers)}")
            self.told_ready = True
        elif mono >= self.next_status:
            self.systemd.status(_text(snap, workers))
            self.next_status = mono + SECOND
        interval = self.systemd.watchdog_interval
        if interval is not None and mono >= self.next_watchdog:
            self.systemd.send("WATCHDOG=1")
            self.next_watchdog = mono + round(interval * SECOND)

    def next_deadline(self) -> int | None:
        """When the watchdog must next be fed (monotonic µs), if systemd asked."""
        return self.next_watchdog if self.systemd.watchdog_interval is not None else None


def _text(snap: Snapshot, workers: int) -> str:
    busy = f"{snap.busy}/{workers} workers busy"
    if not snap.dispatching and not snap.stopping:
        return f"NOT dispatching: {snap.reason}; {busy}"
    return f"dispatching; {busy}; {snap.due_soon} task(s) due soon"
