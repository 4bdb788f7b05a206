"""The daemon's idea of now: a wall clock, a monotonic clock, and how far to trust them.

A task may start only when now - uncertainty >= run_at. The offset bounds
how far our wall clock runs ahead of (positive) or behind (negative) the
spool filesystem's clock: we write to a probe file, so that the filesystem
stamps its mtime, and compare. On a shared filesystem that makes the file
server the one reference clock for every host; on one host the offset is
about the timestamp granularity.

A filesystem that stamps whole seconds (MooseFS's master) bounds the
offset only within a second from one measurement. Then the clock keeps a
bracket, a bound below as well as above: a lease's expiry is written by the
bound below (the latest the reference clock can read, allowing for stamps
that lag the server's clock by up to STAMP_LAG), so no holder's lease is
cut short, while starts wait by the bound above. Each measurement
narrows the bracket carried from the last one (allowing for the reference
clock's slew), and `aim` times the next one where the reference clock's
next second should begin by the bracket's middle, so the bracket halves
each time: a dozen measurements, a second apart, bring a second down to
milliseconds, and measuring every second keeps it there.

A measurement the daemon does not trust (its uncertainty beyond
--max-uncertainty) never shortens a lease: expiries are written by the
later of its reading and the last trusted one's, carried forward by steps.
A stale stamp (a FUSE client that reports the mtime of an earlier,
committed write, as JuiceFS did on a loaded host) makes us look seconds
ahead of the reference; were leases written by it, their expiries would
already have passed for every other daemon, which would take the claims
and permits of attempts still running. The later expiry errs the safe
way: a lease that lasts longer than it need delays a takeover, never
doubles an attempt.

Wall clocks step (NTP at boot, a VM resumed, an operator's `date -s`); the
monotonic clock does not. So the offset is carried forward between
measurements by how much the wall clock moved beyond the monotonic one
since the last measurement: a step counts in full the moment it happens,
before anything is dispatched on it, and `stepped()` tells the daemon to
measure again. Both clocks are injected, so every user of this class can be
tested with a stepped clock.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable

from taskq.times.timespec import MS, SECOND
from taskq.times.timespec import wall_us as wall_us  # (timespec's, so submit need not import this)

SAMPLES = 5  # probe writes per measurement; the tightest bound is kept
STEP = 2 * MS  # wall minus monotonic progress beyond this is a step, not jitter
SLEW_PPM = 500  # how fast a reference clock may be slewed (ntpd's most), per million
# How far a whole-second stamp may lag its server's clock: MooseFS's master stamps by a
# time it reads once per turn of its event loop (2.8 ms behind was seen; a starved one more).
STAMP_LAG = 500 * MS
SWEEP = 30 * MS  # the longest a measurement writes on, waiting for a whole-second stamp to turn


def mono_us() -> int:
    """The monotonic clock in microseconds."""
    return time.monotonic_ns() // 1000


class Clock:
    """Wall-clock readings with a measured uncertainty bound that follows steps."""

    def __init__(
        self,
        margin: int = 1 * MS,
        max_uncertainty: int = 2 * SECOND,
        wall: Callable[[], int] = wall_us,
        mono: Callable[[], int] = mono_us,
    ) -> None:
        self.margin = margin
        self.max_uncertainty = max_uncertainty
        self.wall = wall
        self.mono = mono
        self.offset = 0  # our clock minus the reference clock at the last measurement, µs
        self.low = 0  # ... at least this much (below offset only on whole-second stamps)
        self.coarse = False  # the filesystem stamps whole seconds
        self.measured = False
        self._anchor = self._pair()  # (wall, mono) when the offset was measured
        self._lease_low: int | None = None  # low by the last trusted measurement, at _anchor

    def now(self) -> int:
        return self.wall()

    def _pair(self) -> tuple[int, int, int]:
        """Read both clocks as close together as the scheduler lets us: (wall, mono, error)."""
        best = (0, 0, 1 << 62)
        for _ in range(3):
            m0 = self.mono()
            w = self.wall()
            m1 = self.mono()
            if m1 - m0 < best[2]:
                best = (w, (m0 + m1) // 2, m1 - m0)
            if best[2] < 100:  # µs: not preempted between the readings
                break
        return best

    def _drift(self) -> tuple[int, int]:
        wall, mono, err = self._pair()
        anchor_wall, anchor_mono, anchor_err = self._anchor
        return (wall - anchor_wall) - (mono - anchor_mono), (err + anchor_err) // 2

    def drift(self) -> int:
        """How far the wall clock has moved beyond the monotonic one since measuring."""
        return self._drift()[0]

    def offset_now(self) -> int:
        """The offset now: as measured, plus every step since."""
        return self.offset + self.drift()

    def stepped(self) -> bool:
        """Whether the wall clock stepped since the last measurement (measure again)."""
        drift, err = self._drift()
        return abs(drift) > STEP + err

    def uncertainty(self) -> int:
        """|offset| + margin: the disagreement with the reference, either way."""
        return abs(self.offset_now()) + self.margin

    def trusted(self) -> bool:
        """Whether the uncertainty is small enough to dispatch on."""
        return self.uncertainty() <= self.max_uncertainty

    def earliest_start(self, run_at: int) -> int:
        """The first reading of our clock at which run_at has surely passed.

        The offset is an upper bound on how far we run ahead (negative when
        we run behind), so the reference clock has surely reached run_at
        once ours reads run_at + offset (+ the margin), whichever its sign.
        """
        return run_at + self.offset_now() + self.margin

    def start_instants(self, run_at: int) -> tuple[int, int]:
        """earliest_start(run_at) on both clocks: (wall, monotonic) µs, read together.

        Between measurements the earliest start is a monotonic instant (the
        offset follows the wall clock's drift from it); the wall one is the
        same reckoned by the wall clock, which a step after this call moves.
        """
        wall, mono, _ = self._pair()
        start = run_at + self.offset + (wall - self._anchor[0]) - (mono - self._anchor[1])
        start += self.margin
        return start, mono + start - wall

    def may_start(self, run_at: int, now: int) -> bool:
        return now >= self.earliest_start(run_at)

    def reference(self, now: int) -> int:
        """A reading of ours as the reference clock would at latest have it (for lease
        expiries: a lease taken now lasts at least as long as it says)."""
        lag = STAMP_LAG if self.coarse else 0
        low = self.low if self._lease_low is None else min(self.low, self._lease_low)
        return now - low - self.drift() + lag

    def aim(self, mono_at: int) -> int:
        """The monotonic instant, within a second from mono_at, to measure at next.

        On whole-second stamps the server's next second begins at our time
        k + x, x in the bracket. A wide bracket is halved: a write at our time
        k + mid is stamped k when x is below mid and k - 1 when above. A
        narrow one is swept: writes from just before k + low until the stamp
        turns pin the turn between two writes (see measure).
        """
        if not self.coarse:
            return mono_at
        wide = self.offset - self.low > SWEEP
        target = (self.offset + self.low) // 2 if wide else self.low - MS
        wall_at = self.wall() + mono_at - self.mono()
        return mono_at + (target + self.drift() - wall_at) % SECOND

    def measure(self, probe: str) -> int:
        """Measure the offset against the filesystem that holds probe; return it.

        Each sample brackets the filesystem's stamp between two readings of
        our clock: t_after - mtime is an upper bound on how far we are ahead
        (it also includes the stamp's granularity), so the smallest one over
        a few samples is the tightest safe estimate. On whole-second stamps,
        t_before - mtime - 1 s bounds it below, and sampling goes on across
        the bracket (at most SWEEP) until the stamp turns.
        """
        samples: list[tuple[int, int, int]] = []
        fd = _open_probe(probe)
        try:
            last = os.fstat(fd).st_mtime_ns // 1000
            while len(samples) < SAMPLES or self._sweeping(samples):
                # A write, not utime(): the kernel (or file server) stamps it,
                # and a faked clock in this process cannot supply the time.
                before = self.wall()
                os.pwrite(fd, bytes([len(samples) % 256]), 0)
                mtime = os.fstat(fd).st_mtime_ns // 1000
                samples.append((before, mtime, self.wall()))
                time.sleep(0.0003)
        finally:
            os.close(fd)
        if last % SECOND and all(mtime == last for _, mtime, _ in samples):
            samples = _closed_samples(probe, self.wall)
        high = min(after - mtime for _, mtime, after in samples)
        coarse = all(mtime % SECOND == 0 for _, mtime, _ in samples)
        low = max(before - mtime for before, mtime, _ in samples) - SECOND if coarse else high
        if coarse and self.coarse:
            low, high = self._narrowed(low, high)
        self.set_offset(high, low, coarse)
        return high

    def _sweeping(self, samples: list[tuple[int, int, int]]) -> bool:
        """Whether to write again: whole-second stamps that have not turned yet, while our
        clock is near and short of where the bracket says they turn, for at most SWEEP."""
        first, mtime, last = samples[0][0], samples[-1][1], samples[-1][2]
        if not self.coarse or self.offset - self.low > SWEEP or last - first > SWEEP:
            return False
        if any(m != mtime or m % SECOND for _, m, _ in samples):
            return False
        turn = mtime + SECOND + self.drift()  # at our time turn + x, x in the bracket
        return turn + self.low - SWEEP <= last < turn + self.offset + MS

    def _narrowed(self, low: int, high: int) -> tuple[int, int]:
        """The new bracket within the last one carried forward, if they agree."""
        drift, err = self._drift()
        slack = (self.mono() - self._anchor[1]) * SLEW_PPM // 1_000_000 + err
        was_low, was_high = self.low + drift - slack, self.offset + drift + slack
        if max(low, was_low) > min(high, was_high):
            return low, high  # the reference clock stepped: start again
        return max(low, was_low), min(high, was_high)

    def set_offset(self, offset: int, low: int | None = None, coarse: bool = False) -> None:
        """Record a measured offset (and its bound below) as of now (measure() calls it;
        tests may too)."""
        carried = None if self._lease_low is None else self._lease_low + self.drift()
        self.offset = offset
        self.low = offset if low is None else low
        self.coarse = coarse
        self.measured = True
        self._anchor = self._pair()
        self._lease_low = self.low if self.trusted() else carried


def _closed_samples(probe: str, wall: Callable[[], int]) -> list[tuple[int, int, int]]:
    """Samples each bracketing a write and its close: for a client whose fstat after a
    write still shows the mtime of the last close (JuiceFS's stamps a write at close).

    The fine-stamp samples all showing the stamp the file had before them tells
    such a client: a stamp that old would put us ahead by the time since the
    last measurement.
    """
    samples = []
    for i in range(SAMPLES):
        before = wall()
        fd = _open_probe(probe)
        try:
            os.pwrite(fd, bytes([i]), 0)
        finally:
            os.close(fd)
        samples.append((before, os.lstat(probe).st_mtime_ns // 1000, wall()))
    return samples


def _open_probe(probe: str) -> int:
    """Open the probe file for writing, never blocking: what is not a regular file is replaced.

    The name is the daemon's own (HOST_PID.probe), but a FIFO left there
    would block an open for writing for good.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(2):
        try:
            fd = os.open(probe, flags, 0o600)
        except OSError as e:
            if e.errno not in (errno.ENXIO, errno.ELOOP):  # a FIFO without a reader; a link
                raise
        else:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        os.unlink(probe)
    raise OSError(errno.EEXIST, "keeps being replaced by what is not a regular file", probe)
