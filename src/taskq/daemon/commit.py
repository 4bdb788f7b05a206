"""Group commit: the directories an iteration's transitions touched, fsynced together.

Transitions report the directories whose entries they changed; the daemon
makes them durable in one pass (one fsync per directory, not a syncfs,
which would also wait for every other process's dirty data) before any
attempt they concern is started. How long commits take decides how far
ahead the daemon prepares due work, so that at the instant itself only the
spawn remains.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

from taskq.spool import fsutil
from taskq.spool.transitions import CLAIM_LEAD_MAX
from taskq.times.timespec import MS, format_duration

log = logging.getLogger("taskq")

PREPARE_LEAD = 20 * MS  # the least lead: claim and commit this far ahead of a start
SLOW = 100 * MS  # a commit slower than this is worth a warning


class GroupCommit:
    """Collects touched directories and fsyncs them at once."""

    def __init__(self, mono: Callable[[], int], stops: Callable[[], int] = lambda: 0) -> None:
        self.touched: set[str] = set()
        self.mono = mono
        self.stops = stops  # how many times the process was stopped and continued so far
        self.times: collections.deque[int] = collections.deque(maxlen=32)
        self._slow: tuple[int, int] | None = None  # (took, stops before it) to review

    def __bool__(self) -> bool:
        return bool(self.touched)

    def add(self, *directories: str) -> None:
        self.touched.update(directories)

    def commit(self) -> None:
        """Make every touched directory's entries durable; a vanished one is fine."""
        if not self.touched:
            return
        began, stops = self.mono(), self.stops()
        for directory in sorted(self.touched):
            try:
                fsutil.fsync_dir(directory)
            except FileNotFoundError:
                pass  # its parent is gone too: nothing in it to keep
        self.touched.clear()
        took = self.mono() - began
        if took > SLOW:
            self._slow = (took, stops)  # judged once SIGCONT's handler has surely run
        else:
            self.times.append(took)

    def review(self) -> None:
        """Count and report a slow commit, unless the process was stopped during it.

        A daemon stopped (SIGSTOP, a debugger) in the middle of a commit
        measures the stop, not the disk; that must neither raise the lead nor
        blame the disk. Called at the start of the next iteration.
        """
        if self._slow is None:
            return
        took, stops = self._slow
        self._slow = None
        if self.stops() != stops:
            log.info("a commit spanned a stop of this process (SIGCONT); not timed")
            return
        self.times.append(took)
        log.warning("slow disk: a commit took %s", format_duration(took))

    def lead(self) -> int:
        """How far ahead to claim and commit: 20 ms, or twice the slowest recent commit."""
        return min(CLAIM_LEAD_MAX, max(PREPARE_LEAD, 2 * max(self.times, default=0)))
