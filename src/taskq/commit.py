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

from taskq import fsutil
from taskq.timespec import MS, SECOND, format_duration

log = logging.getLogger("taskq")

PREPARE_LEAD = 20 * MS  # the least lead: claim and commit this far ahead of a start
SLOW = 100 * MS  # a commit slower than this is worth a warning


class GroupCommit:
    """Collects touched directories and fsyncs them at once."""

    def __init__(self, mono: Callable[[], int]) -> None:
        self.touched: set[str] = set()
        self.mono = mono
        self.times: collections.deque[int] = collections.deque(maxlen=32)

    def __bool__(self) -> bool:
        return bool(self.touched)

    def add(self, *directories: str) -> None:
        self.touched.update(directories)

    def commit(self) -> None:
        """Make every touched directory's entries durable; a vanished one is fine."""
        if not self.touched:
            return
        began = self.mono()
        for directory in sorted(self.touched):
            try:
                fsutil.fsync_dir(directory)
            except FileNotFoundError:
                pass  # an empty bucket removed meanwhile: nothing in it to keep
        self.touched.clear()
        took = self.mono() - began
        self.times.append(took)
        if took > SLOW:
            log.warning("slow disk: a commit took %s", format_duration(took))

    def lead(self) -> int:
        """How far ahead to claim and commit: 20 ms, or twice the slowest recent commit."""
        return min(SECOND, max(PREPARE_LEAD, 2 * max(self.times, default=0)))
