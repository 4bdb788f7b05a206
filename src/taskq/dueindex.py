"""The due index: an in-memory heap of the nearest pending tasks.

It is a cache of the spool, rebuilt by listing only the buckets up to now
plus the first non-empty future bucket, so its cost grows with due work and
not with stored work. It never decides anything durable: a stale entry just
loses its claim with ENOENT. Names that cannot be tasks are handed back for
quarantine; empty past buckets are removed on the way (safely: rmdir fails
on a bucket that is not empty, and submitters recreate a vanished bucket).
"""

from __future__ import annotations

import heapq
import os

from taskq import fsutil
from taskq.spool import Spool
from taskq.task import TaskName, bucket_of, valid_bucket


class DueIndex:
    """The nearest pending tasks, ordered by (run_at, id)."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._heap: list[tuple[TaskName, str]] = []
        self.more_beyond = False  # buckets exist past the last one loaded

    def __len__(self) -> int:
        return len(self._heap)

    def rescan(self, now: int) -> list[tuple[str, str]]:
        """Rebuild from the spool; return (path, reason) of entries to quarantine."""
        current = bucket_of(now)
        heap: list[tuple[TaskName, str]] = []
        bad: list[tuple[str, str]] = []
        self.more_beyond = False
        future_loaded = False
        for entry in fsutil.listdir(self.spool.pending):
            path = self.spool.bucket_dir(entry)
            if not valid_bucket(entry):
                bad.append((path, "not a bucket name in pending/"))
                continue
            if future_loaded:
                self.more_beyond = True
                break
            before = len(heap)
            self._load_bucket(entry, path, entry < current, heap, bad)
            future_loaded = entry > current and len(heap) > before
        heapq.heapify(heap)
        self._heap = heap
        return bad

    def _load_bucket(
        self,
        bucket: str,
        path: str,
        past: bool,
        heap: list[tuple[TaskName, str]],
        bad: list[tuple[str, str]],
    ) -> None:
        names = fsutil.listdir(path)
        if not names and past:
            try:
                os.rmdir(path)
            except OSError:
                pass  # a submitter got there first, or it is already gone
        for entry in names:
            try:
                heap.append((TaskName.parse(entry), bucket))
            except ValueError:
                bad.append((os.path.join(path, entry), "not a task file name"))

    def push(self, name: TaskName) -> None:
        """Add a task we just put back in pending (a retry or a release)."""
        heapq.heappush(self._heap, (name, name.bucket))

    def next_run_at(self) -> int | None:
        return self._heap[0][0].run_at if self._heap else None

    def pop(self) -> tuple[TaskName, str]:
        """Remove and return the earliest task and its pending path."""
        name, bucket = heapq.heappop(self._heap)
        return name, os.path.join(self.spool.bucket_dir(bucket), str(name))
