"""When the loop wakes: its own timers, and the earliest instant any of its parts waits for.

The loop sleeps in Wakeups.wait until a signal, the doorbell or a pidfd
wakes it, or until the earliest of these monotonic instants: its timers
(the next rescan, lease renewal, poll of adopted attempts, pickup pass),
the clock guard's next check, the attempts' timeouts, systemd's watchdog,
the shutdown grace, the next due task less the prepare lead, a schedule's
next pass, the end of a pause or of a full spool, the load gate opening,
and a prepared attempt's start less the starter's lead.
"""

from __future__ import annotations

from taskq.daemon.inhand import InHand
from taskq.daemon.starter import LEAD
from taskq.daemon.wiring import Parts
from taskq.times.clock import Clock
from taskq.times.timespec import SECOND

NEVER = 1 << 62  # a timer that is not armed


class WakePlan:
    """The loop's timers (monotonic µs), and how long it may sleep."""

    def __init__(self, parts: Parts, clock: Clock, inhand: InHand) -> None:
        self.parts = parts
        self.clock = clock
        self.inhand = inhand
        self.next = {"rescan": 0, "renew": 0, "poll": NEVER, "pickup": 0}

    def rearm(self) -> None:
        """Every timer due at once (after an error, or a monotonic clock that went back)."""
        self.next = dict.fromkeys(self.next, 0)

    def timeout(self, stop_deadline: int | None, at_once: bool) -> float:
        """Seconds the loop may sleep.

        stop_deadline is the end of the shutdown grace while the daemon
        stops (None otherwise); at_once says that work waits which the next
        turn takes (drop files left, tasks filed), unless the daemon stops.
        """
        out = self._deadlines(stop_deadline, at_once)
        return max(0, min(out) - self.clock.mono()) / SECOND

    def _deadlines(self, stop_deadline: int | None, at_once: bool) -> list[int]:
        """Monotonic instants the loop must wake at: renewals, checks, due work, kills."""
        mono = self.clock.mono()
        out = [self.next["renew"], self.parts.guard.next_check, self.next["poll"]]
        out += self.parts.attempts.deadlines()
        watchdog = self.parts.health.next_deadline()
        if watchdog is not None:
            out.append(watchdog)
        if stop_deadline is not None:
            out.append(stop_deadline)
        else:
            out += self._dispatch_deadlines(mono, at_once)
        for ready in self.inhand.prepared:
            wait = self.clock.earliest_start(ready.claim.task.run_at) - LEAD - self.clock.now()
            out.append(mono + wait)
        return out

    def _dispatch_deadlines(self, mono: int, at_once: bool) -> list[int]:
        index = self.parts.dispatcher.index
        out = [self.next["rescan"]]
        busy = bool(self.inhand.prepared)
        if self.parts.guard.ok:
            wake = self.parts.schedules.wake_at(busy=busy, lead=self.parts.commit.lead())
            out.append(mono + wake - self.clock.now())
        if (not index and index.more_beyond) or at_once:
            out.append(mono)  # the index ran dry, drop files wait, or tasks were filed: at once
        if mono < self.parts.starter.full_until:
            out.append(self.parts.starter.full_until)
            return out
        lapses = self.parts.dispatcher.pauses.next_end(self.clock.now())
        if lapses is not None:  # a pause --until ends: its queue's due tasks start
            out.append(mono + lapses - self.clock.now())
        nxt = index.next_run_at(self.inhand.caps().open)
        gate_opens = self.parts.loadgate.wake_at()  # a load-gated queue with work: look again then
        free = self.inhand.free()
        if nxt is not None and free > 0 and self.parts.guard.ok:
            prepare_at = self.clock.earliest_start(nxt) - self.parts.commit.lead()
            out.append(mono + prepare_at - self.clock.now())
        if gate_opens is not None and free > 0 and self.parts.guard.ok:
            out.append(gate_opens)
        return out
