"""Releasing or cancelling the dependents of ended tasks, in a thread of its own.

The daemon hands over each ended task that something waits for (it has a
deps/ directory) once the end is durable; this thread resolves its waiters
(deps.cascade): those whose dependencies have all ended move to pending/,
and the doorbell rings so that every daemon sees them; under --after-ok,
those with a failed or cancelled dependency move to cancelled/, are told
about like any ended task, and their own waiters are resolved in turn.
A safety pass at start-up and every --rescan resolves what a killed
daemon or submitter left: every deps/ directory with an end marker. Its
cost grows with the dependencies that have ended and still hold waiters,
never with the waiting tasks themselves. The start-up pass also looks up
each dependency that holds waiters but no marker, and marks one found
ended (its ender was killed between its end rename and its marker).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from taskq.notify.event import Ended
from taskq.spool import deps
from taskq.spool.layout import Handling, Spool, unguarded
from taskq.spool.states import State
from taskq.times.timespec import SECOND

log = logging.getLogger("taskq")


class Resolver:
    """A thread that resolves the waiters of tasks that ended."""

    def __init__(
        self,
        spool: Spool,
        wall: Callable[[], int],
        every: int,
        tell: Callable[[Ended], None],
        handling: Handling = unguarded,
    ) -> None:
        self.spool = spool
        self.handling = handling  # the poison guard, per waiting file
        self.wall = wall
        self.every = every / SECOND
        self.tell = tell
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="taskq-resolver", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._queue.put(None)

    def ended(self, task_id: str) -> None:
        self._queue.put(task_id)

    def _run(self) -> None:
        next_pass = 0.0
        while True:
            if time.monotonic() >= next_pass:
                self._guarded(None, first=next_pass == 0.0)
                next_pass = time.monotonic() + self.every
            try:
                first = self._queue.get(timeout=max(0.0, next_pass - time.monotonic()))
            except queue.Empty:
                continue
            ids = [first]
            while not self._queue.empty():
                ids.append(self._queue.get())
            if None in ids:
                return
            self._guarded([i for i in ids if i is not None])

    def _guarded(self, ids: list[str] | None, first: bool = False) -> None:
        """Resolve these ids' waiters (None: the safety pass's); log, never raise."""
        try:
            if ids is None:
                ids = deps.pending_ends(self.spool, unmarked=first)
            if ids:
                self.resolve(ids)
        except Exception as e:  # a bad pass must not end resolution for good
            log.warning("resolving dependencies failed: %s", e)

    def resolve(self, ids: list[str]) -> None:
        """Resolve the waiters of these ended tasks; ring for the released ones."""
        resolved = deps.cascade(self.spool, ids, self.wall(), self.handling)
        for r in resolved:
            if r.state == State.CANCELLED:
                log.info("cancelled %s: %s", r.name.id, r.reason)
                self.tell(Ended(r.name, State.CANCELLED, r.path, r.reason))
            else:
                log.info("released %s: %s", r.name.id, r.reason)
        if any(r.state == State.PENDING for r in resolved):
            self.spool.ring()
