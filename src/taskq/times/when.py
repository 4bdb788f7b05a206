"""What a WHEN means: the instant of an at(1) timespec, ISO-8601, @EPOCH or now.

The words come from `atgrammar`; this module gives them at(1)'s meaning,
given the instant of now and a zone (the local one unless the text names
one), and resolves the wall time once (`zones.resolve` refuses a time that
summer time skips or repeats). The rules, as taskq(1) TIME FORMATS states
them:

- A day without a time of day keeps the current time of day.
- A time of day without a day is today's, moved by the increment; if that
  has passed (the current minute counts as passed, or the current second
  when seconds are given), it is tomorrow's, as in at(1).
- A month and day without a year is this year's, moved by the increment;
  if that is before today (or this year has no such day and at(1)'s
  carried-over day would be before today), next year's.
- Days, weeks, months and years move the wall time by the calendar (a day
  past a month's end runs into the next month, as in at(1)); minutes and
  hours are elapsed time, added last.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from taskq.errors import BadInput
from taskq.text.lazyre import Lazy
from taskq.times import atgrammar
from taskq.times.atgrammar import Date, Parsed, Unparsable
from taskq.times.timespec import HOUR, MAX_INSTANT, MINUTE, SECOND, datetime_to_us

# `zones` (and zoneinfo under it) is imported where a WHEN needs a zone:
# `now + 2 hours`, @EPOCH and an ISO time with an offset need none, and a
# submission's start-up is its throughput (tests/e2e/test_submit.py, budget).

# Digits are ASCII (re.ASCII): int() takes fullwidth and Arabic-Indic digits too, cron does not,
# and a time that reads differently in another script is no time.
_EPOCH = Lazy(r"@(-?\d+)(?:\.(\d{1,9}))?", re.ASCII)
_ISO_INCREMENT = Lazy(r"(.*?) ?([+-]) ?(\d{1,9}) ?([a-z]+)", re.IGNORECASE | re.ASCII)
_FRACTION = Lazy(r"(\.\d{6})\d+", re.ASCII)
_ELAPSED = {"minute": MINUTE, "hour": HOUR}
_DAYS = {"day": 1, "week": 7}
_MONTHS = {"month": 1, "year": 12}
RANGE = "1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z"  # 0 to MAX_INSTANT
HELP = (
    "use e.g. 09:00, 4pm, noon tomorrow, 10am Jul 31, Dec 24, next monday, "
    "now + 2 hours, ISO-8601 or @EPOCH (taskq(1) TIME FORMATS)"
)


def parse_when(text: str, now: int, zone: tzinfo | None = None) -> int:
    """The instant text names when it is `now`; naive times are wall times in zone.

    zone defaults to the local zone (zones.local_zone); a zone the text
    names after its time (09:00 UTC) wins over both.
    """
    s = " ".join(text.split())
    m = _EPOCH.fullmatch(s)
    if m:
        frac = (m.group(2) or "").ljust(6, "0")[:6]
        return _in_range(int(m.group(1)) * SECOND + int(frac), text)
    try:
        return _in_range(_instant(s, now, zone), text)
    except Unparsable as e:
        raise BadInput(f"bad time {text!r}: {e}" + (f"; {HELP}" if e.help else "")) from None
    except (OverflowError, ValueError):
        raise BadInput(f"time {text!r} is out of range ({RANGE})") from None


def parse_posix(text: str, now: int, zone: tzinfo | None = None) -> int:
    """at -t's [[CC]YY]MMDDhhmm[.ss] (touch -t's form): a wall time in zone."""
    digits, dot, sec = text.partition(".")
    if not digits.isdigit() or len(digits) not in (8, 10, 12) or (dot and not _two(sec)):
        raise BadInput(f"bad -t {text!r}: use [[CC]YY]MMDDhhmm[.ss]")
    from taskq.times import zones  # a WHEN that needs a zone: see above

    zone = zone if zone is not None else zones.local_zone()
    year = zones.wall_now(now, zone).year
    if len(digits) == 12:
        year = int(digits[:4])
    elif len(digits) == 10:  # POSIX: 69-99 are 1969-1999, 00-68 are 2000-2068
        year = int(digits[:2]) + (1900 if int(digits[:2]) >= 69 else 2000)
    month, day, hour, minute = (
        int(digits[i : i + 2]) for i in range(len(digits) - 8, len(digits), 2)
    )
    try:
        wall = datetime(year, month, day, hour, minute, int(sec or 0))
    except ValueError:
        raise BadInput(f"bad -t {text!r}: no such date or time") from None
    return _in_range(zones.resolve(wall, zone), text)


def _pairs(digits: str) -> list[int]:
    return [int(digits[i : i + 2]) for i in range(0, len(digits), 2)]


def _two(text: str) -> bool:
    return len(text) == 2 and text.isdigit()


def _in_range(us: int, text: str) -> int:
    if not 0 <= us <= MAX_INSTANT:
        raise BadInput(f"time {text!r} is out of range ({RANGE})")
    return us


def _instant(s: str, now: int, zone: tzinfo | None) -> int:
    """The instant of a WHEN but @EPOCH: ISO-8601 (with an increment) or at(1)'s."""
    base, amount, unit = _split_increment(s)
    iso = _iso(base)
    if iso is not None and iso.tzinfo is not None:  # its wall time is in its own offset
        wall, elapsed = _moved(iso.replace(tzinfo=None), amount, unit)
        return datetime_to_us(wall.replace(tzinfo=iso.tzinfo)) + elapsed
    if iso is not None:
        clock = (iso.hour, iso.minute, iso.second)
        day = Date(iso.year, iso.month, iso.day)
        parsed = Parsed(clock=clock, seconds=True, date=day, amount=amount, unit=unit)
        return _evaluate(parsed, now, zone, iso.microsecond)
    day_only = _iso_date(base)
    if day_only is not None:
        day = Date(day_only.year, day_only.month, day_only.day)
        return _evaluate(Parsed(date=day, amount=amount, unit=unit), now, zone)
    return _evaluate(atgrammar.parse(s), now, zone)


def _split_increment(s: str) -> tuple[str, int, str | None]:
    """An ISO-8601 base and its increment: ('2026-12-01T09:00Z', 2, 'hour'), else (s, 0, None)."""
    m = _ISO_INCREMENT.fullmatch(s)
    if m is None or atgrammar.unit(m.group(4)) is None:
        return s, 0, None
    if _iso(m.group(1)) is None and _iso_date(m.group(1)) is None:
        return s, 0, None
    return (
        m.group(1),
        int(m.group(3)) * (-1 if m.group(2) == "-" else 1),
        atgrammar.unit(m.group(4)),
    )


def _iso(base: str) -> datetime | None:
    """An ISO-8601 date and time (aware or naive); None for a date alone or anything else.

    Letter case does not matter (taskq(1), TIME FORMATS): fromisoformat
    takes only T and Z. Its digits are ASCII already.
    """
    if not base.isascii() or _iso_date(base) is not None:
        return None
    try:
        return datetime.fromisoformat(_FRACTION.compiled().sub(r"\1", base.upper()))
    except ValueError:
        return None


def _iso_date(base: str) -> date | None:
    try:
        return date.fromisoformat(base)
    except ValueError:
        return None


def _evaluate(p: Parsed, now: int, zone: tzinfo | None, micro: int = 0) -> int:
    """The instant of a parsed timespec, with at(1)'s roll-overs to tomorrow and next year."""
    if p.now and p.zone is None and p.unit not in (*_DAYS, *_MONTHS):
        return now + p.amount * _ELAPSED.get(p.unit or "", 0)  # elapsed time: no zone
    from taskq.times import zones  # a WHEN that needs a zone: see above

    tz = _zone(p.zone) if p.zone else zone if zone is not None else zones.local_zone()
    local_now = zones.wall_now(now, tz)
    try:
        first = _candidate(p, now, local_now, tz, micro)
    except NoSuchDay as e:  # Feb 29 without a year, in a year without one
        if p.date is None or p.date.year is not None or e.carried >= local_now.date():
            raise
        return _candidate(p, now, local_now, tz, micro, years=1)
    if p.clock is not None and p.date is None and p.unit not in (*_DAYS, *_MONTHS):
        passed = now - now % (SECOND if p.seconds else MINUTE)
        return first if first > passed else _candidate(p, now, local_now, tz, micro, days=1)
    if p.date is not None and p.date.month is not None and p.date.year is None:
        shown = zones.wall_now(first, tz).date()
        if shown.year == local_now.year and shown < local_now.date():
            return _candidate(p, now, local_now, tz, micro, years=1)
    return first


def _candidate(
    p: Parsed, now: int, local_now: datetime, tz: tzinfo, micro: int, days: int = 0, years: int = 0
) -> int:
    """The instant p names with its day moved on by days, or its year by years."""
    day = _day(p.date, local_now.date(), years) + timedelta(days=days)
    wall = datetime.combine(day, time(*p.clock, micro) if p.clock else local_now.time())
    elapsed = 0
    if p.date is not None and p.date.next_unit is not None:
        wall, elapsed = _moved(wall, 1, p.date.next_unit)
    wall, more = _moved(wall, p.amount, p.unit)
    from taskq.times import zones  # a WHEN that needs a zone: see above

    # now's own wall time is now, even in an hour that summer time repeats
    start = now if wall == local_now else zones.resolve(wall, tz)
    return start + elapsed + more


def _moved(wall: datetime, amount: int, unit: str | None) -> tuple[datetime, int]:
    """wall moved by a calendar increment; or wall and the elapsed µs of minutes or hours."""
    if unit in _ELAPSED:
        return wall, amount * _ELAPSED[unit]
    if unit in _DAYS:
        return wall + timedelta(days=amount * _DAYS[unit]), 0
    if unit in _MONTHS:
        years, month0 = divmod(wall.month - 1 + amount * _MONTHS[unit], 12)
        first = wall.replace(year=wall.year + years, month=month0 + 1, day=1)
        return first + timedelta(days=wall.day - 1), 0  # 31 Jan + 1 month: 3 March, as mktime
    return wall, 0


def _day(d: Date | None, today: date, years: int) -> date:
    """The day a written date names (today for none)."""
    if d is None:
        return today
    if d.month is not None and d.day is not None:
        year = d.year if d.year is not None else today.year + years
        try:
            return date(year, d.month, d.day)
        except ValueError:
            raise NoSuchDay(year, d.month, d.day, d.carries) from None
    if d.weekday is not None:
        return today + timedelta(days=(d.weekday - today.weekday() - 1) % 7 + 1)
    return today + timedelta(days=d.days)


class NoSuchDay(Unparsable):
    """A written day its year lacks (29 February 2027), which at(1) carries over."""

    def __init__(self, year: int, month: int, day: int, carries: bool) -> None:
        self.carried = date(year, month, 1) + timedelta(days=day - 1)
        shown = f"{self.carried.day} {atgrammar.MONTHS[self.carried.month - 1].title()}"
        hint = f"; at(1) would run {shown}, taskq does not carry it over" if carries else ""
        super().__init__(f"{year}-{month:02d}-{day:02d} is no date{hint}")


def _zone(name: str) -> tzinfo:
    """The zone a timespec names after its time: UTC or an IANA name."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # a named zone: see above

    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise Unparsable(f"no time zone {name!r}: give UTC or an IANA name") from None
