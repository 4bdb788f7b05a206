"""The daemon's idea of now, and the never-early rule.

A task may start only when now - uncertainty >= run_at. The uncertainty is a
configured margin for now; measuring it against the spool filesystem's clock
(a probe file's mtime) plugs in here without touching the scheduler.
"""

from __future__ import annotations

import time

from taskq.timespec import MS


def wall_us() -> int:
    """The wall clock in microseconds since the epoch."""
    return time.time_ns() // 1000


class Clock:
    """Wall-clock readings with an uncertainty bound."""

    def __init__(self, margin: int = 1 * MS) -> None:
        self.margin = margin

    def now(self) -> int:
        return wall_us()

    def uncertainty(self) -> int:
        """The bound on how far our clock may run ahead of the reference."""
        return self.margin

    def earliest_start(self, run_at: int) -> int:
        """The first reading of our clock at which run_at has surely passed."""
        return run_at + self.uncertainty()

    def may_start(self, run_at: int, now: int) -> bool:
        return now >= self.earliest_start(run_at)
