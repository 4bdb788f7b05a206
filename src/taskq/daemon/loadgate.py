"""The load gate: a queue's attempts start only while the load average is below its limit.

This is atd's batch rule (atd -l LOAD, -b SECONDS): a batch job starts
only while the 1-minute load average is below the limit, and at least an
interval after the queue's previous start, so that the load a start adds
shows in the average before the next one is judged. `--load-limit
QUEUE=LOAD` gates a queue (`taskq batch` submits to `batch`, gated at 1.5
unless said otherwise); `--load-interval` is atd's -b. Each daemon reads
its own host's load, from /proc/loadavg as atd does, at most once per
LOAD_READ (the kernel moves it every 5 seconds); `wake_at` tells the loop
when to look again while a gated queue holds due work. Times are
monotonic microseconds. A claim holds the queue shut, and the interval
counts from the attempt's start, which follows the claim within the
commit lead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from taskq.times.clock import mono_us
from taskq.times.timespec import SECOND

BATCH_QUEUE = "batch"  # where taskq batch puts its jobs
DEFAULT_LIMITS = {BATCH_QUEUE: 1.5}  # atd's compile-time default
DEFAULT_INTERVAL = 60 * SECOND  # atd -b's default
LOAD_READ = 5 * SECOND


LOADAVG = "/proc/loadavg"  # atd's source (at(1), FILES)


def one_minute_load() -> float:
    """This host's 1-minute load average, from LOADAVG; none readable counts as high."""
    try:
        with open(LOADAVG, "rb") as f:
            return float(f.read(64).split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("inf")


class LoadGate:
    """Whether a queue may start an attempt now, by the load average and its last start."""

    def __init__(
        self,
        limits: Mapping[str, float],
        interval: int = DEFAULT_INTERVAL,
        load: Callable[[], float] = one_minute_load,
        mono: Callable[[], int] = mono_us,
    ) -> None:
        self.limits = dict(limits)
        self.interval = interval
        self.load = load
        self.mono = mono
        self._read_at: int | None = None
        self._load = 0.0
        self._last_start: dict[str, int] = {}
        self._retry: dict[str, int] = {}  # a refused queue: when to look again

    def open(self, queue: str) -> bool:
        limit = self.limits.get(queue)
        if limit is None:
            return True
        now = self.mono()
        after = self._last_start.get(queue)
        if after is not None and now < after + self.interval:
            self._retry[queue] = after + self.interval
            return False
        if self._current(now) >= limit:
            self._retry[queue] = (self._read_at or now) + LOAD_READ
            return False
        self._retry.pop(queue, None)
        return True

    def took(self, queue: str) -> None:
        """A gated queue's attempt was claimed: none other until an interval after its start."""
        if queue in self.limits:
            self._last_start[queue] = self.mono()

    def started(self, queues: Iterable[str]) -> None:
        """Attempts of these queues have started: a gated one's interval counts from now."""
        for queue in queues:
            if queue in self.limits:
                self._last_start[queue] = self.mono()

    def wake_at(self) -> int | None:
        """When a queue refused since the last call may open (monotonic), or None."""
        soonest = min(self._retry.values(), default=None)
        self._retry.clear()
        return soonest

    def _current(self, now: int) -> float:
        if self._read_at is None or now >= self._read_at + LOAD_READ:
            self._load, self._read_at = self.load(), now
        return self._load
