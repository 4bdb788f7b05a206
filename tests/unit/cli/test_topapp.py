"""taskq top's pacing: a slow gathering stretches the time to the next redraw."""

from __future__ import annotations

import pytest

from taskq.cli.topapp import next_redraw


@pytest.mark.parametrize(
    ("interval", "took", "expected"),
    [(2.0, 0.0, 2.0), (2.0, 0.3, 2.0), (2.0, 0.5, 2.0), (2.0, 1.0, 4.0), (0.1, 7.8, 31.2)],
)
def test_a_redraw_waits_the_interval_or_pace_times_the_last_gathering(
    interval: float, took: float, expected: float
) -> None:
    assert next_redraw(interval, took) == pytest.approx(expected)
