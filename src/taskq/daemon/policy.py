"""What happens after an attempt: done, retry after a backoff, dead letter, or cancelled.

Pure functions of the attempt's facts and the daemon's settings, so the
rules can be read (and tested) in one place: a cancelled attempt is
cancelled whatever its status; exit 0 is done; a failure with attempts left
in its budget is retried after exponential backoff with jitter (at once if
the attempt was lost rather than failed); otherwise, or when the attempt
number can grow no more (MAX_ATTEMPT), it is dead-lettered. A
task whose deadline (--expires after its scheduled time) has passed when it
is claimed fails as expired instead of running.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from taskq.spool.states import Phase, State
from taskq.spool.task import MAX_ATTEMPT
from taskq.times.timespec import HOUR, SECOND


@dataclass(frozen=True)
class Backoff:
    """Retry delays: base * 2^(attempt-1), capped, then jittered to [half, all] of it."""

    base: int = 10 * SECOND
    cap: int = HOUR

    def delay(self, attempt: int, rng: random.Random | None = None) -> int:
        full: int = min(self.cap, self.base << min(attempt - 1, 62))
        pick = (rng or _rng).randrange(full // 2 + 1)
        return full // 2 + pick


_rng = random.Random()


@dataclass(frozen=True)
class Outcome:
    """Where a task goes after an attempt: done, failed, cancelled, or pending (retry)."""

    state: State
    delay: int = 0  # for a retry: how long after now
    reason: str | None = None


def after_attempt(
    phase: Phase,
    code: int | None,
    attempt: int,
    budget_first: Callable[[], int],
    max_attempts: int,
    backoff: Backoff,
    rng: random.Random | None = None,
) -> Outcome:
    """Decide an attempt's outcome; code None means it was lost, not failed.

    budget_first gives the first attempt of the current budget (1, or the
    attempt an operator's retry began); it is asked only after a failure.
    """
    if phase == Phase.CANCELLING:
        return Outcome(State.CANCELLED)
    if code == 0:
        return Outcome(State.DONE)
    if attempt >= MAX_ATTEMPT:
        return Outcome(State.FAILED, reason=f"attempt {attempt} is the last a task can have")
    if attempt - budget_first() + 1 < max_attempts:
        return Outcome(State.PENDING, 0 if code is None else backoff.delay(attempt, rng))
    return Outcome(State.FAILED, reason="attempts exhausted")


def expired(now: int, scheduled: int, expires: int | None) -> int | None:
    """The deadline if a task claimed now is past it, else None."""
    if expires is None:
        return None
    deadline = scheduled + expires
    return deadline if now > deadline else None
