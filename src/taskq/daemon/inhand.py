"""The work a daemon holds: attempts prepared and running, the workers left, the queue caps.

A prepared attempt is claimed and its start made durable at the next group
commit; the starter turns it into a running one at its instant, handing it
to the keeper, whose answer is heard in the next turn. All three kinds
(prepared, asked, running) count against --workers and each queue's caps,
and all are this daemon's claims, which a recovery scan must not take back
and the cluster limits must not sweep.
"""

from __future__ import annotations

from taskq.daemon.attempts import Prepared
from taskq.daemon.dispatch import QueueCaps
from taskq.daemon.settings import Settings
from taskq.daemon.wiring import Parts
from taskq.spool.faults import crash_point
from taskq.times.clock import Clock


class InHand:
    """The attempts prepared and running: claimed to the free workers, started when due."""

    def __init__(self, parts: Parts, settings: Settings, clock: Clock) -> None:
        self.parts = parts
        self.cfg = settings
        self.clock = clock
        self.prepared: list[Prepared] = []

    def waiting(self) -> list[Prepared]:
        """Attempts not running yet: prepared, or asked of the keeper and not yet answered."""
        return self.prepared + [ready for ready, _ in self.parts.starter.asked]

    def ids(self) -> set[str]:
        """The ids of every task this daemon holds a claim on for an attempt."""
        return self.parts.attempts.ids() | {p.claim.task.id for p in self.waiting()}

    def free(self) -> int:
        """How many more attempts --workers leaves room for."""
        return self.cfg.workers - len(self.parts.attempts) - len(self.waiting())

    def caps(self) -> QueueCaps:
        """Each queue's room now: its limit, what it has in hand, pauses, permits, load."""
        busy = [r.body.queue for r in self.parts.attempts.all()]
        busy += [p.body.queue for p in self.waiting()]
        paused = self.parts.dispatcher.pauses.held(self.clock.now())
        return QueueCaps(
            self.cfg.queue_limits,
            self.cfg.workers,
            busy,
            paused,
            cluster=self.parts.limits.open,
            gate=self.parts.loadgate,
        )

    def claim(self, now: int) -> None:
        """Claim and prepare as many due tasks as the workers and the caps leave room for."""
        free = self.free()
        if free > 0:
            self.prepared += self.parts.dispatcher.claim_due(now, free, self.caps())

    def asking(self) -> bool:
        """Whether the keeper has yet to answer requests of the last turn (hear() takes them)."""
        return bool(self.parts.starter.asked)

    def hear(self) -> None:
        """The keeper's answers to the last turn's spawns: running attempts now, or ended
        (or prepared again: the keeper found the wall clock short of their instant)."""
        self.prepared += self.parts.starter.hear()

    def start(self) -> None:
        """Start the prepared attempts that are due (their starts are committed)."""
        if not self.prepared:
            return
        crash_point("daemon.committed")
        prepared = self.prepared
        self.prepared = self.parts.starter.start_due(prepared)
        left = {p.claim.task.id for p in self.prepared}
        started = [p for p in prepared if p.claim.task.id not in left]
        self.parts.limits.started({p.claim.task.id for p in started}, self.clock.now())
        self.parts.loadgate.started(p.body.queue for p in started)
