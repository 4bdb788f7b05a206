"""The due index: in-memory heaps of the nearest pending tasks, one per queue.

It is a cache of the spool, rebuilt by listing only the buckets up to now
plus the first non-empty future bucket, so its cost grows with due work and
not with stored work. It never decides anything durable: a stale entry just
loses its claim with ENOENT. Due tasks are handed out round-robin across
queues, so one queue's burst cannot starve another, and within a queue in
the claim order (claimorder.py): this daemon's own tasks oldest first, the
other daemons' once they have had their chance, so that daemons sharing a
spool reach for different files. Once the spool says some task has a
--priority (its `priorities` file), what the claim order lets a queue try
now is ranked, highest priority first (ranking.py): a priority never makes
a task start early nor jump another queue's turn. A task in a later bucket
than its run_at's is indexed from where it is (it starts late); names that
cannot be tasks, and tasks in an earlier bucket, are handed back for
quarantine; empty past buckets are removed on the way (safely: rmdir fails
on a bucket that is not empty, and submitters recreate a vanished bucket).
"""

from __future__ import annotations

import heapq
import logging
import os
import stat
from collections.abc import Callable

from taskq.daemon.claimorder import ClaimOrder
from taskq.daemon.ranking import Ranks
from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.layout import Spool, stray
from taskq.spool.task import TaskName, bucket_of, bucket_start, valid_bucket

Entry = tuple[TaskName, str]  # the name and the bucket its file is in
# In a queue's heap of our own tasks: (run_at, id, name, bucket); in its
# heap of the others': (when we may try it, our hash of its id, name,
# bucket). So the heaps compare ints and strings, in C, never names: a
# burst's thousands of tasks share one run_at (python bench/run.py --only
# burst; bench/profile_burst.py).
_Item = tuple[int, str, TaskName, str]
_Theirs = tuple[int, int, TaskName, str]
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


class _Queue:
    """One queue's due tasks: our own by (run_at, id), the others' by the claim order."""

    __slots__ = ("mine", "theirs")

    def __init__(self) -> None:
        self.mine: list[_Item] = []
        self.theirs: list[_Theirs] = []

    def __len__(self) -> int:
        return len(self.mine) + len(self.theirs)

    def add(self, name: TaskName, bucket: str, order: ClaimOrder) -> None:
        """Append unordered (heapify later)."""
        if order.mine(name.id):
            self.mine.append((name.run_at, name.id, name, bucket))
        else:
            self.theirs.append((*order.steal_key(name.run_at, name.id), name, bucket))

    def push(self, name: TaskName, bucket: str, order: ClaimOrder) -> None:
        if order.mine(name.id):
            heapq.heappush(self.mine, (name.run_at, name.id, name, bucket))
        else:
            heapq.heappush(self.theirs, (*order.steal_key(name.run_at, name.id), name, bucket))

    def heapify(self) -> None:
        heapq.heapify(self.mine)
        heapq.heapify(self.theirs)

    def entries(self) -> list[tuple[TaskName, str]]:
        return [(e[2], e[3]) for e in self.mine] + [(e[2], e[3]) for e in self.theirs]

    def next_at(self) -> int | None:
        """When the next of these may be tried: our own at its run_at, another's later."""
        tops = [h[0][0] for h in (self.mine, self.theirs) if h]
        return min(tops, default=None)

    def pop(self, due: Callable[[int], bool]) -> tuple[TaskName, str] | None:
        """Take the task to try next, if one may be tried now."""
        mine = self.mine[0] if self.mine and due(self.mine[0][0]) else None
        theirs = self.theirs[0] if self.theirs and due(self.theirs[0][0]) else None
        if theirs is not None and (
            mine is None or ClaimOrder.older_first(mine[0], theirs[2].run_at)
        ):
            heapq.heappop(self.theirs)
            return theirs[2], theirs[3]
        if mine is not None:
            heapq.heappop(self.mine)
            return mine[2], mine[3]
        return None


class DueIndex:
    """The nearest pending tasks, per queue, in this daemon's claim order."""

    def __init__(self, spool: Spool, order: ClaimOrder | None = None) -> None:
        self.spool = spool
        self.order = order or ClaimOrder("", 1)  # alone: every task is ours
        self._queues: dict[str, _Queue] = {}
        self._turn: list[str] = []  # queues in round-robin order
        # The first instant of the first bucket not loaded, if there is one:
        # nothing in it can be due before then, and it must be loaded by then
        # even when what was loaded cannot start (a paused queue, one at its
        # limit), or its tasks would wait for the safety-net rescan.
        self.horizon: int | None = None
        self.ranks = Ranks(spool)  # what may be tried now, by priority, once the spool has any

    @property
    def more_beyond(self) -> bool:
        """Buckets exist past the last one loaded."""
        return self.horizon is not None

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values()) + len(self.ranks)

    def rescan(self, now: int) -> list[tuple[str, str]]:
        """Rebuild from the spool; return (path, reason) of entries to quarantine."""
        current = bucket_of(now)
        entries: list[Entry] = []
        bad: list[tuple[str, str]] = []
        self.horizon = None
        future_loaded = False
        for entry in fsutil.listdir(self.spool.pending):
            if stray(entry):
                continue
            path = self.spool.bucket_dir(entry)
            if not valid_bucket(entry):
                bad.append((path, "not a bucket name in pending/"))
                continue
            if future_loaded:
                self.horizon = bucket_start(entry)
                break
            hostile = bucket_problem(path)
            if hostile is not None:
                bad.append((path, hostile))
                continue
            before = len(entries)
            self._load_bucket(entry, path, entry < current, entries, bad)
            future_loaded = entry > current and len(entries) > before
        queues: dict[str, _Queue] = {}
        for name, bucket in entries:
            queue = queues.get(name.queue)
            if queue is None:
                queue = queues[name.queue] = _Queue()
            queue.add(name, bucket, self.order)
        for queue in queues.values():
            queue.heapify()
        self._queues = queues
        self._turn = [q for q in self._turn if q in queues] + sorted(set(queues) - set(self._turn))
        self.ranks.reset(entries)
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
            if name.bucket > bucket:
                # Filed early, it would stand for a later minute among the
                # first future bucket's tasks and hold back what is due
                # before it. Filed late (moved by hand), it runs from where
                # it is once its bucket is read: late, never early.
                reason = f"filed in pending/{bucket}, before its minute's bucket {name.bucket}"
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

    def resort(self) -> None:
        """Put every entry where the claim order, as it is now, wants it."""
        for name, queue in list(self._queues.items()):
            fresh = _Queue()
            for task, bucket in queue.entries():
                fresh.add(task, bucket, self.order)
            fresh.heapify()
            self._queues[name] = fresh

    def push(self, name: TaskName) -> None:
        """Add a task we just put back in pending (a retry or a release)."""
        if name.queue not in self._queues:
            self._queues[name.queue] = _Queue()
            self._turn.append(name.queue)
        self._queues[name.queue].push(name, name.bucket, self.order)

    def due_in(self, queues: frozenset[str], now: int) -> list[Entry]:
        """The entries of these queues due by now, as (name, path)."""
        return [
            (name, os.path.join(self.spool.bucket_dir(bucket), str(name)))
            for queue in queues
            for name, bucket in self._entries(queue)
            if name.run_at <= now
        ]

    def _entries(self, queue: str) -> list[tuple[TaskName, str]]:
        found = self._queues.get(queue)
        return [*([] if found is None else found.entries()), *self.ranks.items(queue)]

    def discard(self, name: TaskName) -> None:
        """Drop one entry (a paused task that expired)."""
        found = self._queues.get(name.queue)
        if found is None:
            return
        kept = _Queue()
        for other, bucket in found.entries():
            if other != name:
                kept.add(other, bucket, self.order)
        kept.heapify()
        self._queues[name.queue] = kept
        self.ranks.discard(name)

    def next_run_at(self, eligible: Callable[[str], bool] = lambda q: True) -> int | None:
        """The earliest instant a task of a queue that may start one now may be tried."""
        tops = [q.next_at() for name, q in self._queues.items() if q and eligible(name)]
        ready = self.ranks.earliest(eligible)
        return min([t for t in tops if t is not None] + ready, default=None)

    def pop_due(self, due: Callable[[int], bool], eligible: Callable[[str], bool]) -> Entry | None:
        """Take the next due task, round-robin across eligible queues.

        The queue served goes to the back of the turn, so queues with due
        work take turns; within a queue the claim order decides.
        """
        for i, name in enumerate(self._turn):
            queue = self._queues.get(name)
            if not eligible(name) or not (queue or self.ranks.holds(name)):
                continue
            if self.ranks.on:
                picked = self.ranks.pop(name, _taker(queue, due))
            else:
                picked = queue.pop(due) if queue else None
            if picked is not None:
                self._turn.append(self._turn.pop(i))
                task, bucket = picked
                return task, f"{self.spool.bucket_dir(bucket)}/{task}"
        return None


def _taker(
    queue: _Queue | None, due: Callable[[int], bool]
) -> Callable[[], tuple[TaskName, str] | None]:
    """What ranking draws from: the tasks the claim order lets this queue try now."""
    return lambda: queue.pop(due) if queue else None
