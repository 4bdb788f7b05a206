"""The due index: in-memory heaps of the nearest pending tasks, one per queue.

It is a cache of the spool, rebuilt by listing only the buckets up to now
plus the first non-empty future bucket, so its cost grows with due work and
not with stored work. It never decides anything durable: a stale entry just
loses its claim with ENOENT. Due tasks are handed out oldest first within a
queue and round-robin across queues, so one queue's burst cannot starve
another. Names that cannot be tasks are handed back for quarantine; empty
past buckets are removed on the way (safely: rmdir fails on a bucket that
is not empty, and submitters recreate a vanished bucket).
"""

from __future__ import annotations

import heapq
import logging
import os
import stat
from collections.abc import Callable

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.layout import Spool, stray
from taskq.spool.task import TaskName, bucket_of, valid_bucket

Entry = tuple[TaskName, str]  # the name and the bucket its file is in
# In the heaps: (run_at, id, name, bucket). The heap compares ints and
# strings, in C; a burst's thousands of tasks share one run_at, and comparing
# their names (dataclasses) was a tenth of the loop's time.
_Item = tuple[int, str, TaskName, str]
log = logging.getLogger("taskq")


def bucket_problem(path: str) -> str | None:
    """Why a name in pending/ cannot be a bucket (a link, not a directory), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link, not a bucket"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory, not a bucket"
    return None


class DueIndex:
    """The nearest pending tasks, per queue, ordered by (run_at, id)."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._heaps: dict[str, list[_Item]] = {}
        self._turn: list[str] = []  # queues in round-robin order
        self.more_beyond = False  # buckets exist past the last one loaded

    def __len__(self) -> int:
        return sum(len(h) for h in self._heaps.values())

    def rescan(self, now: int) -> list[tuple[str, str]]:
        """Rebuild from the spool; return (path, reason) of entries to quarantine."""
        current = bucket_of(now)
        entries: list[Entry] = []
        bad: list[tuple[str, str]] = []
        self.more_beyond = False
        future_loaded = False
        for entry in fsutil.listdir(self.spool.pending):
            if stray(entry):
                continue
            path = self.spool.bucket_dir(entry)
            if not valid_bucket(entry):
                bad.append((path, "not a bucket name in pending/"))
                continue
            if future_loaded:
                self.more_beyond = True
                break
            hostile = bucket_problem(path)
            if hostile is not None:
                bad.append((path, hostile))
                continue
            before = len(entries)
            self._load_bucket(entry, path, entry < current, entries, bad)
            future_loaded = entry > current and len(entries) > before
        heaps: dict[str, list[_Item]] = {}
        for name, bucket in entries:
            heaps.setdefault(name.queue, []).append((name.run_at, name.id, name, bucket))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._heaps = heaps
        self._turn = [q for q in self._turn if q in heaps] + sorted(set(heaps) - set(self._turn))
        return bad

    def _load_bucket(
        self, bucket: str, path: str, past: bool, entries: list[Entry], bad: list[tuple[str, str]]
    ) -> None:
        try:
            fd = fsutil.open_dir(path)
        except (FileNotFoundError, CorruptFile):
            return  # gone, or replaced by a link since the look: the next rescan sees it
        try:
            self._guard(path, fd)
            names = sorted(os.listdir(fd))
        finally:
            os.close(fd)
        if not names and past:
            try:
                os.rmdir(path)
            except OSError:
                pass  # a submitter got there first, or it is already gone
        for entry in names:
            if stray(entry):
                continue
            try:
                name = TaskName.parse(entry)
            except ValueError:
                bad.append((os.path.join(path, entry), "not a task file name"))
                continue
            if name.bucket != bucket:
                reason = f"filed in pending/{bucket}, not in its minute's bucket {name.bucket}"
                bad.append((os.path.join(path, entry), reason))
                continue
            entries.append((name, bucket))

    def _guard(self, path: str, fd: int) -> None:
        """A root daemon keeps a shared spool's buckets: owned by root, not loosened.

        A member who made a bucket owns it, and its owner can rename or
        remove any task in it once he drops the sticky bit; so a root daemon
        takes the buckets it loads over, and undoes a loosened mode.
        """
        if os.geteuid() != 0:
            return
        st, parent = os.fstat(fd), os.stat(self.spool.pending)
        mode, want = stat.S_IMODE(st.st_mode), stat.S_IMODE(parent.st_mode)
        loose = mode & 0o002 or (mode & 0o020 and not mode & stat.S_ISVTX)
        if loose:
            os.fchmod(fd, want & ~0o002)
            log.warning(
                "pending/%s had mode %04o (others could rename its tasks); set to %04o",
                os.path.basename(path),
                mode,
                want & ~0o002,
            )
        if st.st_uid != 0 and (loose or mode == want):
            os.fchown(fd, 0, -1)
            os.fchmod(fd, want & ~0o002)  # chown drops setgid on some filesystems

    def push(self, name: TaskName) -> None:
        """Add a task we just put back in pending (a retry or a release)."""
        if name.queue not in self._heaps:
            self._heaps[name.queue] = []
            self._turn.append(name.queue)
        heapq.heappush(self._heaps[name.queue], (name.run_at, name.id, name, name.bucket))

    def due_in(self, queues: frozenset[str], now: int) -> list[Entry]:
        """The entries of these queues due by now, as (name, path)."""
        return [
            (name, os.path.join(self.spool.bucket_dir(bucket), str(name)))
            for queue in queues
            for run_at, _, name, bucket in self._heaps.get(queue, [])
            if run_at <= now
        ]

    def discard(self, name: TaskName) -> None:
        """Drop one entry (a paused task that expired)."""
        heap = self._heaps.get(name.queue, [])
        kept = [e for e in heap if e[2] != name]
        if len(kept) != len(heap):
            heapq.heapify(kept)
            self._heaps[name.queue] = kept

    def next_run_at(self, eligible: Callable[[str], bool] = lambda q: True) -> int | None:
        """The earliest run_at among the queues that may start a task now."""
        tops = [h[0][0] for q, h in self._heaps.items() if h and eligible(q)]
        return min(tops, default=None)

    def pop_due(self, due: Callable[[int], bool], eligible: Callable[[str], bool]) -> Entry | None:
        """Take the next due task, round-robin across eligible queues.

        The queue served goes to the back of the turn, so queues with due
        work take turns; within a queue the oldest run_at goes first.
        """
        for i, queue in enumerate(self._turn):
            heap = self._heaps.get(queue)
            if heap and eligible(queue) and due(heap[0][0]):
                self._turn.append(self._turn.pop(i))
                _, _, name, bucket = heapq.heappop(heap)
                return name, f"{self.spool.bucket_dir(bucket)}/{name}"
        return None
