"""The daemon's idea of now, measured against the spool filesystem's clock.

A task may start only when now - uncertainty >= run_at. The uncertainty is
|offset| + a configured margin, where offset bounds how far our clock runs
ahead of (positive) or behind (negative) the spool filesystem's clock: we
write to a probe file, so that the filesystem stamps its mtime, and compare.
On a shared filesystem that makes the file server the one reference clock
for every host; on one host the offset is about the timestamp granularity.
Intervals (leases, timeouts, re-measuring) use the monotonic clock instead.
"""

from __future__ import annotations

import os
import time

from taskq.timespec import MS, SECOND

SAMPLES = 5  # probe writes per measurement; the tightest bound is kept


def wall_us() -> int:
    """The wall clock in microseconds since the epoch."""
    return time.time_ns() // 1000


class Clock:
    """Wall-clock readings with a measured uncertainty bound."""

    def __init__(self, margin: int = 1 * MS, max_uncertainty: int = 2 * SECOND) -> None:
        self.margin = margin
        self.max_uncertainty = max_uncertainty
        self.offset = 0  # our clock minus the reference clock, microseconds
        self.measured = False

    def now(self) -> int:
        return wall_us()

    def uncertainty(self) -> int:
        """The bound on how far our clock may run ahead of the reference."""
        return abs(self.offset) + self.margin

    def trusted(self) -> bool:
        """Whether the uncertainty is small enough to dispatch on."""
        return self.uncertainty() <= self.max_uncertainty

    def earliest_start(self, run_at: int) -> int:
        """The first reading of our clock at which run_at has surely passed."""
        return run_at + self.uncertainty()

    def may_start(self, run_at: int, now: int) -> bool:
        return now >= self.earliest_start(run_at)

    def measure(self, probe: str) -> int:
        """Measure the offset against the filesystem that holds probe; return it.

        Each sample brackets the filesystem's stamp between two readings of
        our clock: t_after - mtime is an upper bound on how far we are ahead
        (it also includes the stamp's granularity), so the smallest one over
        a few samples is the tightest safe estimate.
        """
        best: int | None = None
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            for i in range(SAMPLES):
                # A write, not utime(): the kernel (or file server) stamps it,
                # and a faked clock in this process cannot supply the time.
                os.pwrite(fd, bytes([i]), 0)
                mtime = os.fstat(fd).st_mtime_ns // 1000
                ahead = wall_us() - mtime
                best = ahead if best is None or ahead < best else best
                time.sleep(0.0003)
        finally:
            os.close(fd)
        assert best is not None
        self.offset = best
        self.measured = True
        return best
