"""--priority in the due index: the due tasks of each queue, highest priority first.

A task's priority is in its body, not its name, so ranking costs a read of
the body; the due index ranks only once the spool's `priorities` file says
some task has one (otherwise nothing changes, at no cost), and only tasks
that are due, each read once (the file, not parsed: task.priority_of)
and remembered by id. As the claim order lets a queue's tasks be tried
(claimorder.py; never before their time less the prepare lead), they move
to the queue's heap by (-priority, run_at, id), and the queue hands out
the top of that one. A
body that cannot be read ranks 0 (its claim or its start deals with it).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterator

from taskq.errors import TaskqError
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import MAX_BODY, TaskName, priority_of

Entry = tuple[TaskName, str]  # a task's name and its bucket
_Ranked = tuple[int, int, str, TaskName, str]  # -priority, run_at, id, name, bucket


class Ranks:
    """The ranked due tasks of each queue, and the priorities read so far."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.on = False
        self._ready: dict[str, list[_Ranked]] = {}
        self._known: dict[str, int] = {}  # id -> priority

    def __len__(self) -> int:
        return sum(len(h) for h in self._ready.values())

    def reset(self, entries: list[tuple[TaskName, str]]) -> None:
        """After a rescan: every entry is back in the heaps by time; forget the gone."""
        self.on = os.path.exists(self.spool.ranked)
        self._ready = {}
        ids = {name.id for name, _ in entries}
        self._known = {k: v for k, v in self._known.items() if k in ids}

    def pop(self, queue: str, take: Callable[[], Entry | None]) -> Entry | None:
        """Rank what the claim order lets this queue try now (take()); the first of them."""
        ready = self._ready.setdefault(queue, [])
        while (entry := take()) is not None:
            name, bucket = entry
            rank = (-self._priority(name, bucket), name.run_at, name.id, name, bucket)
            heapq.heappush(ready, rank)
        if not ready:
            return None
        _, _, _, name, bucket = heapq.heappop(ready)
        return name, bucket

    def holds(self, queue: str) -> bool:
        return bool(self._ready.get(queue))

    def items(self, queue: str) -> Iterator[Entry]:
        for _, _, _, name, bucket in self._ready.get(queue, []):
            yield name, bucket

    def earliest(self, eligible: Callable[[str], bool]) -> list[int]:
        return [min(e[1] for e in h) for q, h in self._ready.items() if h and eligible(q)]

    def discard(self, name: TaskName) -> None:
        ready = self._ready.get(name.queue, [])
        kept = [e for e in ready if e[3] != name]
        if len(kept) != len(ready):
            heapq.heapify(kept)
            self._ready[name.queue] = kept

    def _priority(self, name: TaskName, bucket: str) -> int:
        known = self._known.get(name.id)
        if known is None:
            path = f"{self.spool.bucket_dir(bucket)}/{name}"
            try:
                known = priority_of(fsutil.read_small(path, MAX_BODY)[0])
            except (TaskqError, OSError):  # gone (claimed elsewhere) or bad: its claim tells
                known = 0
            self._known[name.id] = known
        return known
