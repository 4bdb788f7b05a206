"""The pure outcome policy: done, retry with backoff, dead letter, cancelled, expired."""

from __future__ import annotations

import random

from taskq.daemon.policy import Backoff, after_attempt, expired
from taskq.spool.states import Phase
from taskq.times.timespec import HOUR, SECOND

B = Backoff(10 * SECOND, HOUR)


def decide(phase: Phase, code: int | None, attempt: int, first: int = 1, most: int = 3) -> str:
    return after_attempt(phase, code, attempt, lambda: first, most, B).state


def test_outcomes() -> None:
    assert decide(Phase.STARTED, 0, 1) == "done"
    assert decide(Phase.CANCELLING, 0, 1) == "cancelled"
    assert decide(Phase.CANCELLING, 1, 3) == "cancelled"
    assert decide(Phase.STARTED, 1, 1) == "pending"
    assert decide(Phase.STARTED, 1, 3) == "failed"
    assert decide(Phase.STARTED, 1, 3, first=3) == "pending"  # an operator's retry: fresh budget
    assert decide(Phase.STARTED, -9, 2) == "pending"


def test_a_lost_attempt_is_retried_at_once_a_failed_one_after_backoff() -> None:
    lost = after_attempt(Phase.STARTED, None, 1, lambda: 1, 3, B)
    failed = after_attempt(Phase.STARTED, 2, 1, lambda: 1, 3, B, random.Random(1))
    assert lost.delay == 0
    assert 5 * SECOND <= failed.delay <= 10 * SECOND


def test_backoff_doubles_caps_and_never_overflows() -> None:
    rng = random.Random(7)
    for attempt in range(1, 200):
        full = min(HOUR, 10 * SECOND << (attempt - 1))
        assert full // 2 <= B.delay(attempt, rng) <= full


def test_expiry() -> None:
    assert expired(100, 50, None) is None
    assert expired(100, 50, 60) is None
    assert expired(111, 50, 60) == 110
