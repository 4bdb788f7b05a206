"""The clock with injected wall and monotonic clocks: offsets, steps, never early."""

from __future__ import annotations

from pathlib import Path

from taskq.times.clock import STAMP_LAG, STEP, Clock
from taskq.times.timespec import MS, SECOND


class Stepped:
    """A wall clock and a monotonic clock that tests move by hand (µs)."""

    def __init__(self) -> None:
        self.mono_us = 1_000 * SECOND
        self.wall_us = 1_700_000_000 * SECOND

    def tick(self, us: int) -> None:
        self.mono_us += us
        self.wall_us += us

    def step(self, us: int) -> None:
        self.wall_us += us  # the wall clock alone: NTP step, VM resume, date -s


def make() -> tuple[Clock, Stepped]:
    t = Stepped()
    clock = Clock(1 * MS, 2 * SECOND, wall=lambda: t.wall_us, mono=lambda: t.mono_us)
    clock.set_offset(0)
    return clock, t


def test_smooth_time_is_not_a_step() -> None:
    clock, t = make()
    t.tick(3600 * SECOND)
    assert not clock.stepped()
    assert clock.offset_now() == 0
    assert clock.earliest_start(t.wall_us) == t.wall_us + 1 * MS


def test_a_forward_step_counts_at_once_and_nothing_starts_early() -> None:
    clock, t = make()
    run_at = t.wall_us + 3 * SECOND
    t.tick(1 * SECOND)
    t.step(6 * SECOND)  # the wall clock now says run_at has passed; it has not
    assert clock.stepped()
    assert clock.offset_now() == 6 * SECOND
    assert not clock.may_start(run_at, clock.now())
    assert not clock.trusted()  # 6 s > --max-uncertainty 2 s: stop dispatching
    t.tick(2 * SECOND + 1 * MS)  # really due now (and past the margin)
    assert clock.may_start(run_at, clock.now())  # with the step accounted for


def test_a_backward_step_is_followed_too() -> None:
    clock, t = make()
    run_at = t.wall_us + 1 * SECOND
    t.step(-6 * SECOND)
    assert clock.stepped() and clock.offset_now() == -6 * SECOND
    assert not clock.may_start(run_at, clock.now())
    t.tick(999 * MS)  # the reference is 1 ms short of run_at; ours reads 5 s before it
    assert not clock.may_start(run_at, clock.now())
    t.tick(2 * MS)  # the reference is past run_at and the margin
    assert clock.may_start(run_at, clock.now())


def test_measuring_again_resets_the_step() -> None:
    clock, t = make()
    t.step(STEP * 10)
    assert clock.stepped()
    clock.set_offset(STEP * 10)  # what a probe would now find against the spool
    assert not clock.stepped()
    assert clock.offset_now() == STEP * 10


def test_reference_time_for_leases_follows_steps() -> None:
    clock, t = make()
    before = clock.reference(clock.now())
    t.step(-6 * SECOND)
    assert abs(clock.reference(clock.now()) - before) < MS


def test_measure_against_a_real_filesystem(tmp_path: Path) -> None:
    t = Stepped()
    t.wall_us = Clock().now()
    clock = Clock(wall=lambda: t.wall_us, mono=lambda: t.mono_us)
    t.step(30 * SECOND)  # we run 30 s ahead of the filesystem's stamps
    offset = clock.measure(str(tmp_path / "probe"))
    assert 29 * SECOND < offset < 31 * SECOND
    assert not clock.trusted()


def test_on_whole_second_stamps_leases_are_written_by_the_bound_below() -> None:
    clock, t = make()
    clock.set_offset(400 * MS, low=-600 * MS, coarse=True)  # one whole-second measurement
    assert clock.earliest_start(t.wall_us) == t.wall_us + 400 * MS + MS  # starts: bound above
    # a lease's expiry: the latest the reference clock can read, stamps' lag allowed for
    assert clock.reference(t.wall_us) == t.wall_us + 600 * MS + STAMP_LAG


def test_a_wide_bracket_is_aimed_at_its_middle_a_narrow_one_at_its_start() -> None:
    clock, t = make()
    t.wall_us = 1_700_000_000 * SECOND + 100 * MS  # .100 on our clock
    clock.set_offset(700 * MS, low=-300 * MS, coarse=True)  # middle 200 ms
    assert clock.aim(t.mono_us) == t.mono_us + 100 * MS  # at .200: the server's turn if mid
    clock.set_offset(250 * MS, low=240 * MS, coarse=True)
    assert clock.aim(t.mono_us) == t.mono_us + 139 * MS  # a ms before .240
    clock.set_offset(250 * MS)  # fine stamps: not aimed
    assert clock.aim(t.mono_us) == t.mono_us


def test_an_untrusted_measurement_never_shortens_a_lease() -> None:
    clock, t = make()
    before = clock.reference(clock.now())
    # A stale stamp: the probe reports the mtime of a write 10 s old, so we seem 10 s ahead.
    clock.set_offset(10 * SECOND)
    assert not clock.trusted()
    assert clock.reference(clock.now()) == before  # expiries stay by the last trusted one
    t.step(3 * SECOND)  # a step meanwhile is carried forward as ever
    assert abs(clock.reference(clock.now()) - before) < MS
    clock.set_offset(3 * SECOND + 500 * MS)  # beyond 2 s: still not trusted
    assert abs(clock.reference(clock.now()) - before) < MS
    clock.set_offset(1 * SECOND)  # trusted: we are 1 s ahead (not 3), so the reference is
    assert clock.trusted() and clock.reference(clock.now()) == before + 2 * SECOND


def test_an_untrusted_measurement_that_lengthens_a_lease_counts() -> None:
    clock, _ = make()
    before = clock.reference(clock.now())
    clock.set_offset(-10 * SECOND)  # the reference clock ran ahead of ours: later expiries
    assert not clock.trusted() and clock.reference(clock.now()) == before + 10 * SECOND
