"""Long, unhurried work of a daemon, off the dispatch loop: tmp/ cleaning and retention.

Pruning done/ or tmp/ can take seconds on a large spool or a slow disk; in
the loop, such a stall could let a lease lapse and get a running attempt
killed. So a thread does it: it only deletes what no transition uses
(abandoned submissions, old done/ days), and the loop never waits for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from taskq.spool import retention
from taskq.spool.layout import Spool
from taskq.times.timespec import HOUR, SECOND, format_duration

log = logging.getLogger("taskq")


class Housekeeper:
    """A background thread that cleans tmp/ every `every` and prunes done/ hourly."""

    def __init__(
        self,
        spool: Spool,
        wall: Callable[[], int],
        every: int,
        tmp_max_age: int,
        keep_done: int | None,
    ) -> None:
        self.spool = spool
        self.wall = wall
        self.every = every
        self.tmp_max_age = tmp_max_age
        self.keep_done = keep_done
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taskq-housekeeping", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        passes_per_gc = max(1, HOUR // max(self.every, 1))
        n = 0
        while True:
            try:
                self.one_pass(gc_too=n % passes_per_gc == 0)
            except Exception as e:  # a bad pass must not end housekeeping for good
                log.warning("housekeeping failed: %s", e)
            n += 1
            if self._stop.wait(self.every / SECOND):
                return

    def one_pass(self, gc_too: bool) -> None:
        now = self.wall()
        for line in retention.clean_tmp(self.spool, now, self.tmp_max_age):
            log.warning("%s", line)
        retention.clean_replies(self.spool, now)
        if gc_too and self.keep_done is not None:
            found = retention.collect(self.spool, now, self.keep_done)
            if found.tasks:
                kept = format_duration(self.keep_done)
                log.info("pruned %d done task(s) older than %s", found.tasks, kept)
