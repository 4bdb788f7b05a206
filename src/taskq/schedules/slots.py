"""When a schedule's occurrences fall: cron expressions and intervals, in a time zone.

Pure: no I/O, time is passed in (microseconds since the epoch, UTC). cronsim
parses the expression and walks the calendar (month ends, leap days, `L`,
`#`, the day fields' AND/OR rule); it walks *naive local wall time*, and
this module turns each wall time into instants by cron(8)'s rules for
clock changes (taskq(1), RECURRING TASKS):

- A fixed-time job (neither its minute nor its hour field starts with `*`):
  a wall time that does not exist (spring forward) runs once, at the first
  instant after the gap; a wall time that occurs twice (fall back) runs
  once, at its first occurrence; several wall times that land on one
  instant run once.
- A wildcard job (`*` first in the minute or hour field, as `@hourly`):
  it runs at every real instant whose wall time matches, so a wall time
  in the gap does not run and one in the repeated hour runs twice.

`--every` slots are an exact interval in UTC from an anchor; zones do not
touch them.
"""

from __future__ import annotations

import heapq
import itertools
import zoneinfo
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

try:
    from cronsim import CronSim, CronSimError
except ModuleNotFoundError:  # Debian 12 has no cronsim: its taskq package bundles one (debian/)
    from taskq._vendor.cronsim import CronSim, CronSimError  # type: ignore[import-not-found,no-redef]

from taskq.errors import BadInput
from taskq.times.timespec import (
    HOUR,
    MAX_DURATION,
    MAX_INSTANT,
    SECOND,
    datetime_to_us,
    format_iso,
    us_to_datetime,
)

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
# The latest slot a schedule may have: a century (the longest --jitter)
# before the latest instant a task may name, so every occurrence's run
# time, jitter added, is one taskq can write.
LAST_SLOT = MAX_INSTANT - MAX_DURATION
WALK_LIMIT = 100_000  # cron matches walked at most per question (over 69 days of minutes)
# The largest clock change that a wildcard walk looks around: cron(8) treats a
# change of 3 hours or more as a correction, not summer time.
FOLD_MAX = 3 * HOUR


def check_cron(expr: str) -> str:
    """A 5-field expression (aliases expanded); BadInput names the bad field."""
    text = ALIASES.get(expr.strip().lower(), expr.strip())
    fields = text.split()
    if len(fields) != 5:
        raise BadInput(
            f"bad --cron {expr!r}: expected 5 fields ({' '.join(FIELDS)}) "
            f"or one of {', '.join(ALIASES)}, got {len(fields)}"
        )
    try:
        CronSim(text, datetime(2000, 1, 1))
    except CronSimError as e:
        raise BadInput(f"bad --cron {expr!r}: {str(e).lower()} field") from None
    return " ".join(fields)


def wildcard(expr: str) -> bool:
    """Whether cron(8) runs a job on the wall clock: its minute or hour field starts with '*'."""
    fields = ALIASES.get(expr.strip().lower(), expr).split()
    return fields[0].startswith("*") or fields[1].startswith("*")


# Names in the zone database that stand for the host's own zone, not one of
# the world's: stored in a schedule, they would move with /etc/localtime.
_HOST_ZONES = frozenset({"localtime", "posixrules"})


def check_zone(name: str) -> str:
    """An IANA zone name that zoneinfo knows; BadInput otherwise.

    A directory of the database (Europe) is no zone (zoneinfo raises
    IsADirectoryError for it), nor a name for the host's zone.
    """
    try:
        if name in _HOST_ZONES:
            raise ValueError(name)
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long
        raise BadInput(f"bad --tz {name!r}: not an IANA time zone (e.g. Europe/Berlin)") from None
    return name


def check_bound(what: str, instant: int) -> int:
    """A --start or --end: no later than LAST_SLOT; BadInput otherwise."""
    if instant > LAST_SLOT:
        raise BadInput(
            f"{what} is after the last slot a schedule may have ({format_iso(LAST_SLOT)}, "
            "a century before the year 9999 that task times end in)"
        )
    return instant


@dataclass(frozen=True)
class Spec:
    """When occurrences fall: a cron expression in a zone, or an interval from an anchor."""

    cron: str | None
    every: int | None  # microseconds
    tz: str
    anchor: int  # --every's slots are anchor + k * every
    start: int | None = None  # no slot before
    end: int | None = None  # no slot after

    def after(self, t: int) -> int | None:
        """The first slot strictly after t, or None when the schedule has ended (LAST_SLOT)."""
        lo = t if self.start is None else max(t, self.start - 1)
        if lo >= LAST_SLOT:
            return None
        slot = self._every_after(lo) if self.every else next(self._cron_after(lo), None)
        if slot is None or slot > self.last:
            return None
        return slot

    @property
    def last(self) -> int:
        """The latest instant a slot may fall at: --end, or LAST_SLOT."""
        return LAST_SLOT if self.end is None else min(self.end, LAST_SLOT)

    def upcoming(self, t: int, n: int) -> list[int]:
        """The next n slots after t (fewer if the schedule ends)."""
        return list(itertools.islice(walk(self.after, t), n))

    def between(self, lo: int, hi: int, keep: int) -> tuple[list[int], int]:
        """The last `keep` slots in (lo, hi], oldest first, and how many there are.

        The count is exact up to WALK_LIMIT for cron expressions and exact
        for intervals.
        """
        if self.start is not None:
            lo = max(lo, self.start - 1)
        hi = min(hi, self.last)
        if hi <= lo:
            return [], 0
        if self.every:
            first = self._every_after(lo)
            count = 0 if first > hi else (hi - first) // self.every + 1
            last = first + (count - 1) * self.every
            kept = [last - i * self.every for i in range(min(keep, count))]
            return sorted(kept), count
        count = count_upto(self._cron_after(lo), hi)
        latest: list[int] = []
        for slot in self._cron_before(hi):
            if slot <= lo or len(latest) >= keep:
                break
            latest.append(slot)
        return sorted(latest), max(count, len(latest))

    def _every_after(self, t: int) -> int:
        assert self.every
        k = (t - self.anchor) // self.every + 1
        return self.anchor + max(k, 0) * self.every

    def _cron_after(self, t: int) -> Iterator[int]:
        """Cron slots after t, up to the calendar's end (datetime stops at year 9999)."""
        assert self.cron
        zone = zoneinfo.ZoneInfo(self.tz)
        try:
            if wildcard(self.cron):
                yield from _every_match_after(self.cron, t, zone)
                return
            wall = us_to_datetime(t).astimezone(zone).replace(tzinfo=None, microsecond=0)
            for _, naive in zip(range(WALK_LIMIT), CronSim(self.cron, wall), strict=False):
                slot = wall_to_instant(naive, zone)
                if slot > t:
                    t = slot
                    yield slot
        except (OverflowError, ValueError):  # walked past year 9999: no more slots
            return

    def _cron_before(self, t: int) -> Iterator[int]:
        """Cron slots up to t, latest first, down to the calendar's start."""
        assert self.cron
        zone = zoneinfo.ZoneInfo(self.tz)
        bound = t + 1
        try:
            if wildcard(self.cron):
                yield from _every_match_before(self.cron, t, zone)
                return
            wall = us_to_datetime(t + SECOND).astimezone(zone).replace(tzinfo=None, microsecond=0)
            walk = CronSim(self.cron, wall, reverse=True)
            for _, naive in zip(range(WALK_LIMIT), walk, strict=False):
                slot = wall_to_instant(naive, zone)
                if slot < bound:
                    bound = slot
                    yield slot
        except (OverflowError, ValueError):  # walked before year 1
            return


def walk(after: Callable[[int], int | None], t: int) -> Iterator[int]:
    """The slots after t, one by one, each the one `after` names after the last."""
    while (slot := after(t)) is not None:
        yield slot
        t = slot


def count_upto(slots: Iterable[int], hi: int) -> int:
    """How many of these ascending slots fall at or before hi, counted up to WALK_LIMIT."""
    count = 0
    for slot in slots:
        if slot > hi or count >= WALK_LIMIT:
            break
        count += 1
    return count


def _every_match_after(cron: str, t: int, zone: zoneinfo.ZoneInfo) -> Iterator[int]:
    """A wildcard job's slots after t: every instant whose wall time matches, in order.

    The walk starts early by as much as the clock goes back in the next
    FOLD_MAX (a repeated hour's second pass reads earlier than t), and
    holds instants until no wall time still to come can give an earlier one.
    """
    back = max(0, _offset(t, zone) - _offset(t + FOLD_MAX, zone))
    start = _wall(t, zone).replace(microsecond=0) - timedelta(microseconds=back + SECOND)
    held: list[int] = []
    for _, naive in zip(range(WALK_LIMIT), CronSim(cron, start), strict=False):
        found = _instants(naive, zone)
        for slot in found:
            if slot > t:
                heapq.heappush(held, slot)
        while held and found and held[0] <= found[0]:
            yield heapq.heappop(held)
    while held:
        yield heapq.heappop(held)


def _every_match_before(cron: str, t: int, zone: zoneinfo.ZoneInfo) -> Iterator[int]:
    """A wildcard job's slots at or before t, latest first (the mirror of the walk after)."""
    ahead = max(0, _offset(t - FOLD_MAX, zone) - _offset(t, zone))
    start = _wall(t + SECOND, zone).replace(microsecond=0) + timedelta(microseconds=ahead)
    held: list[int] = []  # negated: a max-heap
    for _, naive in zip(range(WALK_LIMIT), CronSim(cron, start, reverse=True), strict=False):
        found = _instants(naive, zone)
        for slot in found:
            if slot <= t:
                heapq.heappush(held, -slot)
        while held and found and -held[0] >= found[-1]:
            yield -heapq.heappop(held)
    while held:
        yield -heapq.heappop(held)


def _instants(naive: datetime, zone: zoneinfo.ZoneInfo) -> list[int]:
    """Every instant whose wall time is naive: none in a gap, two in a repeated hour."""
    out: list[int] = []
    for fold in (0, 1):
        instant = datetime_to_us(naive.replace(tzinfo=zone, fold=fold).astimezone(UTC))
        if _wall(instant, zone) == naive and instant not in out:
            out.append(instant)
    return sorted(out)


def _offset(instant: int, zone: zoneinfo.ZoneInfo) -> int:
    """The zone's UTC offset at an instant, in microseconds."""
    offset = us_to_datetime(instant).astimezone(zone).utcoffset()
    return 0 if offset is None else offset // timedelta(microseconds=1)


def wall_to_instant(naive: datetime, zone: zoneinfo.ZoneInfo) -> int:
    """The instant a local wall time names: its first occurrence, or the end of its gap."""
    first = naive.replace(tzinfo=zone, fold=0)
    instant = datetime_to_us(first.astimezone(UTC))
    if _wall(instant, zone) == naive:
        return instant
    # In a gap (fold=0 reads it with the offset before the change, which
    # lands past the gap): the first instant whose wall time is past it.
    lo = datetime_to_us(naive.replace(tzinfo=zone, fold=1).astimezone(UTC))
    hi = instant
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _wall(mid, zone) >= naive:
            hi = mid
        else:
            lo = mid
    return hi


def _wall(instant: int, zone: zoneinfo.ZoneInfo) -> datetime:
    return us_to_datetime(instant).astimezone(zone).replace(tzinfo=None)


def local_text(instant: int, tz: str) -> str:
    """An instant as wall time in a zone, with its offset: 2026-03-29T03:00:00+02:00."""
    dt = us_to_datetime(instant).astimezone(zoneinfo.ZoneInfo(tz))
    return dt.isoformat(timespec="seconds")


def every_anchor(now: int, start: int | None) -> int:
    """Where --every counts from: --start, else now rounded down to the second."""
    return start if start is not None else now - now % SECOND
