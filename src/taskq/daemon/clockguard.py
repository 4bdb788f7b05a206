"""The clock guard: may the daemon dispatch on its clock right now?

It measures the clock against the spool at start-up, every --clock-check
(every second while the clock is not trusted), at once when the wall clock
steps, and says why not when the uncertainty exceeds --max-uncertainty or
the probe cannot be written. It also notices a monotonic clock that went
back, after which the loop re-arms its timers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from taskq.times.clock import Clock
from taskq.times.timespec import SECOND, format_duration

log = logging.getLogger("taskq")


class ClockGuard:
    """Trust in the clock, measured against the spool filesystem's."""

    def __init__(
        self,
        clock: Clock,
        probe: str,
        every: int,
        max_uncertainty: int,
        measured: Callable[[bool], None],
    ) -> None:
        self.clock = clock
        self.measured = measured  # after each measurement; True when trust came back
        self.probe = probe
        self.every = every
        self.max_uncertainty = max_uncertainty
        self.ok = True
        self.problem: str | None = None
        self.next_check = 0  # monotonic µs
        self.last_mono = clock.mono()

    def guard(self, due: Callable[[int], bool] | None = None) -> bool:
        """Measure again if due or if the wall clock stepped; True if monotonic time went back.

        due(next_check) says whether a measurement that is due may be made
        now (the loop holds it back for a start that is about to be handed
        over); a step is measured at once whatever it says.
        """
        mono = self.clock.mono()
        went_back = mono < self.last_mono
        if went_back:
            # It must not, but VMs and time-faking libraries have been seen to
            # do it; then every interval would silently stretch.
            back = format_duration(self.last_mono - mono)
            log.warning("the monotonic clock went back %s; re-arming timers", back)
            self.next_check = 0
        self.last_mono = mono
        if self.clock.stepped():
            drift = self.clock.drift()
            way = "forward" if drift > 0 else "back"
            self.check(f"the wall clock stepped {way} by {format_duration(abs(drift))}; ")
        elif mono >= self.next_check if due is None else due(self.next_check):
            self.check()
        return went_back

    def check(self, why: str = "") -> None:
        """Measure our offset from the spool's clock; stop or resume dispatching."""
        try:
            offset = self.clock.measure(self.probe)
            trusted, problem = self.clock.trusted(), None
        except OSError as e:
            # A full or read-only disk: keep the last measurement if there is
            # one; without any, do not trust the clock, and try again soon.
            offset, trusted = self.clock.offset, self.clock.measured and self.clock.trusted()
            problem = f"cannot measure the clock against the spool ({e.strerror})"
        if not trusted and problem is None:
            problem = self._too_uncertain(offset)
        if why:
            log.warning("%smeasured the clock again: offset %s", why, format_duration(offset))
        regained = trusted and not self.ok
        if regained:
            eps = format_duration(self.clock.uncertainty())
            log.warning("clock uncertainty %s is within bounds again: dispatching", eps)
        elif not trusted and problem != self.problem:
            log.error("%s: not dispatching until that changes", problem)
        self.ok, self.problem = trusted, (None if trusted else problem)
        # On whole-second stamps only frequent, aimed measurements keep the offset's
        # bracket narrow (times/clock.py).
        every = self.every if trusted and not self.clock.coarse else min(self.every, SECOND)
        self.next_check = self.clock.aim(self.clock.mono() + every)
        self.measured(regained)

    def _too_uncertain(self, offset: int) -> str:
        side = "ahead of" if offset > 0 else "behind"
        return (
            f"clock uncertainty {format_duration(self.clock.uncertainty())} exceeds "
            f"--max-uncertainty {format_duration(self.max_uncertainty)} (our clock is "
            f"{format_duration(abs(offset))} {side} the spool filesystem's)"
        )
