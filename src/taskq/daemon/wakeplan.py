"""When the loop wakes: its own timers, and the earliest instant any of its parts waits for.

The loop sleeps in Wakeups.wait until a signal, the doorbell or a pidfd
wakes it, or until the earliest of these monotonic instants: its timers
(the next rescan, lease renewal, poll of adopted attempts, pickup pass),
the clock guard's next check, the attempts' timeouts, systemd's watchdog,
the shutdown grace, the next due task less the prepare lead, a schedule's
next pass, the end of a pause or of a full spool, the load gate opening,
and a prepared attempt's start less the starter's lead.

The timed chores (a clock measurement, the renewals and recovery scan, the
safety-net rescan: milliseconds each) wait while an attempt is prepared
and not yet handed to the keeper, for at most CHORE_HOLD, so that one
falling due in the moments before a start does not make the start late.
"""

from __future__ import annotations

from taskq.daemon.attempts import Prepared
from taskq.daemon.inhand import InHand
from taskq.daemon.starter import LEAD
from taskq.daemon.wiring import Parts
from taskq.times.clock import Clock
from taskq.times.timespec import MS, SECOND

NEVER = 1 << 62  # a timer that is not armed
# The longest a timed chore waits for a prepared attempt's hand-off: well within the
# renewal's slack of the shortest --lease (500 ms, renewed every third of it).
CHORE_HOLD = 50 * MS


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

    def due(self, timer: int) -> bool:
        """Whether a timed chore armed for `timer` runs now (not held for a hand-off)."""
        mono = self.clock.mono()
        return mono >= timer and not self.held(timer, mono)

    def held(self, timer: int, mono: int) -> bool:
        """Whether a chore armed for `timer` waits: an attempt is prepared, not yet handed over."""
        return bool(self.inhand.prepared) and mono < timer + CHORE_HOLD

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
        chores = [self.next["renew"], self.parts.guard.next_check]
        out = [self._chore(timer) for timer in chores] + [self.next["poll"]]
        out += self.parts.attempts.deadlines()
        watchdog = self.parts.health.next_deadline()
        if watchdog is not None:
            out.append(watchdog)
        if stop_deadline is not None:
            out.append(stop_deadline)
        else:
            out += self._dispatch_deadlines(mono, at_once)
        out += [self._handoff(ready) for ready in self.inhand.prepared]
        return out

    def _chore(self, timer: int) -> int:
        """When a timed chore can run: its timer, or after the prepared attempts' hand-off."""
        if not self.inhand.prepared:
            return timer
        handoff = min(self._handoff(ready) for ready in self.inhand.prepared)
        return timer if timer >= handoff else min(handoff, timer + CHORE_HOLD)

    def _handoff(self, ready: Prepared) -> int:
        """The monotonic instant a prepared attempt is handed over: its start less LEAD."""
        wait = self.clock.earliest_start(ready.claim.task.run_at) - LEAD - self.clock.now()
        return self.clock.mono() + wait

    def _dispatch_deadlines(self, mono: int, at_once: bool) -> list[int]:
        index = self.parts.dispatcher.index
        out = [self._chore(self.next["rescan"])]
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
