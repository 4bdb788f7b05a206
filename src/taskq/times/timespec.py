"""Instants and durations: their units, limits, and the forms taskq writes and reads.

Instants are integers of microseconds since the Unix epoch, UTC: exact,
totally ordered and free of float rounding. Durations are microseconds too.
Pure functions with no time zone but UTC (and `wall_us`, the wall clock's
reading as an instant): what a person's WHEN means, in the local zone, is
`when`'s job.
"""

from __future__ import annotations

import functools
import re
import time as _time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from taskq.errors import BadInput
from taskq.text.lazyre import Lazy

US = 1
MS = 1_000
SECOND = 1_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

_UNITS = {"us": US, "ms": MS, "s": SECOND, "m": MINUTE, "h": HOUR, "d": DAY, "w": 7 * DAY}
# Digits are ASCII (re.ASCII): int() takes fullwidth and Arabic-Indic digits too, cron does not,
# and a time that reads differently in another script is no time.
# A part without a unit is a bare number of seconds, taken only as the whole text.
_PART = Lazy(r"(\d+(?:\.\d+)?)(us|ms|s|m|h|d|w)?", re.ASCII)
_EPOCH_US = datetime(1970, 1, 1, tzinfo=UTC)
# The latest instant a task may name; keeps names fixed-width (year 9999).
MAX_INSTANT = 253402300799 * SECOND
# The longest duration taskq takes (a century): a delay from now still
# names a time before year 9999, and no sum of durations overflows.
MAX_DURATION = 36525 * DAY


def wall_us() -> int:
    """The wall clock in microseconds since the epoch: now, as an instant."""
    return _time.time_ns() // 1000


def _decimal_us(text: str, unit: int) -> int:
    """Convert a decimal string times a unit to whole microseconds, exactly."""
    whole, _, frac = text.partition(".")
    scaled = int(whole) * unit
    if frac:
        scaled += int(frac) * unit // 10 ** len(frac)
    return scaled


def parse_duration(text: str) -> int:
    """Parse '90', '90s', '250ms', '5m', '2h', '1d', '1h30m' to microseconds.

    Each unit at most once, the larger first: '1m1m' is a typo, not 2m.
    """
    s = text.strip().lower()
    simple = _one_part(s)
    if simple is not None:  # a whole number, with a unit or none: no pattern to compile
        return within_limit(simple, text)
    pos, total, last = 0, 0, 1 << 62
    for m in _PART.finditer(s):
        if m.group(2) is None:  # a bare number: seconds, if it is all there is
            if m.start() == 0 and m.end() == len(s):
                return within_limit(_decimal_us(s, SECOND), text)
            break
        unit = _UNITS[m.group(2)]
        if m.start() != pos or unit >= last:
            break
        total += _decimal_us(m.group(1), unit)
        pos, last = m.end(), unit
    if pos != len(s) or not s:
        raise BadInput(
            f"bad duration {text!r}: use e.g. 90, 90s, 250ms, 5m, 2h, 1d or 1h30m "
            "(each unit once, the larger first)"
        )
    return within_limit(total, text)


def _one_part(s: str) -> int | None:
    """s's microseconds if it is ASCII digits and at most one unit (90, 90s, 5m), else None."""
    digits = s.rstrip("dhmsuw")
    unit = _UNITS.get(s[len(digits) :]) if len(digits) < len(s) else SECOND
    if unit is None or not digits.isdigit() or not digits.isascii():
        return None
    return int(digits) * unit


def within_limit(us: int, text: object) -> int:
    """A duration no longer than MAX_DURATION (a century); BadInput otherwise."""
    if us > MAX_DURATION:
        raise BadInput(f"duration {text!r} is longer than the limit of 36525d (a century)")
    return us


def datetime_to_us(dt: datetime) -> int:
    """Convert an aware datetime to microseconds since the epoch."""
    delta = dt - _EPOCH_US
    return (delta.days * 86400 + delta.seconds) * SECOND + delta.microseconds


def us_to_datetime(us: int) -> datetime:
    """Convert microseconds since the epoch to an aware UTC datetime."""
    return _EPOCH_US + timedelta(microseconds=us)


@functools.lru_cache(maxsize=1024)  # a batch's lines share their submission time
def format_iso(us: int) -> str:
    """Format an instant as ISO-8601 UTC with microseconds: 2026-12-01T09:00:00.000000Z."""
    return f"{_iso_minute(us // MINUTE)}{_seconds(us)}"


def _seconds(us: int) -> str:
    """The last ten characters of both forms: the seconds and microseconds, 00.000000Z.

    Cut from one integer's digits, which is twice as fast as two padded
    fields (a batch formats each task's run_at in both forms).
    """
    digits = str(us % MINUTE + _LEAD)  # "1SSffffff"
    return f"{digits[1:3]}.{digits[3:]}Z"


_LEAD = 100 * SECOND  # a digit before the seconds, so that str() pads them


@functools.lru_cache(maxsize=4096)  # a day's batch spreads over 1,440 minutes
def _iso_minute(minute: int) -> str:
    """The first 17 characters of format_iso's text: the minute, 2026-12-01T09:00:."""
    t, _ = _utc_fields(minute * MINUTE)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:"


def _utc_fields(us: int) -> tuple[_time.struct_time, int]:
    """The UTC calendar fields of an instant and its microseconds; years 1 to 9999 only.

    gmtime is several times faster than datetime.strftime, on the hot paths.
    """
    sec, frac = divmod(us, SECOND)
    t = _time.gmtime(sec)
    if not 1 <= t.tm_year <= 9999:
        raise ValueError(f"year {t.tm_year} is out of range")
    return t, frac


@functools.lru_cache(maxsize=1024)  # a burst names one run_at thousands of times
def format_compact(us: int) -> str:
    """Format an instant for file names: 20261201T090000.000000Z (sorts as it orders).

    Its minute is cut from format_iso's: a task's body and its file name
    show the same instant, and the calendar is worked out once for both.
    """
    return f"{_compact_minute(us // MINUTE)}{_seconds(us)}"


@functools.lru_cache(maxsize=4096)
def _compact_minute(minute: int) -> str:
    """The first 13 characters of format_compact's text, cut from format_iso's: 20261201T0900."""
    iso = _iso_minute(minute)
    return f"{iso[:4]}{iso[5:7]}{iso[8:13]}{iso[14:16]}"


_COMPACT = Lazy(r"(\d{8})T(\d{6})\.(\d{6})Z", re.ASCII)


def parse_compact(text: str) -> int:
    """Parse the file-name form of an instant; raise ValueError if malformed."""
    m = _COMPACT.fullmatch(text)
    us = None if m is None else _utc_instant(text, (0, 4, 6, 9, 11, 13), 16)
    if us is None:
        raise ValueError(f"not a compact instant: {text!r}")
    return us


def parse_iso_utc(text: str) -> int | None:
    """The instant of format_iso's exact form (2026-12-01T09:00:00.000000Z), else None.

    The fast path for the times taskq writes itself; when.parse_when reads any other.
    """
    if len(text) != 27 or text[4] != "-" or text[10] != "T" or text[-1] != "Z":
        return None
    return _utc_instant(text, (0, 5, 8, 11, 14, 17), 20, format_iso)


def _utc_instant(
    text: str, starts: tuple[int, ...], frac: int, form: Callable[[int], str] | None = None
) -> int | None:
    """The instant whose UTC fields stand in text, or None.

    The year's four digits and then two digits each start at `starts`, six
    of microseconds at `frac`. None unless formatting the instant back gives
    text: that refuses what is no date (February 30) and any other form.
    """
    try:
        y, mo, d, h, mi, sec = (int(text[i : i + (4 if i == starts[0] else 2)]) for i in starts)
        micros = int(text[frac : frac + 6])
    except ValueError:
        return None
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and sec < 60):
        return None
    days = _days_from_civil(y, mo, d)
    us = ((days * 24 + h) * 60 + mi) * 60 * SECOND + sec * SECOND + micros
    try:
        return us if (form or format_compact)(us) == text else None  # Feb 30 is not
    except ValueError:
        return None


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def format_duration(us: int) -> str:
    """Format a duration for people: 1.234s, 12ms, 3m05s."""
    sign, us = ("-", -us) if us < 0 else ("", us)
    if us < SECOND:
        return f"{sign}{us / MS:.3g}ms"
    if us < MINUTE:
        return f"{sign}{us / SECOND:.3f}s"
    minutes, rest = divmod(us // SECOND, 60)
    if minutes < 60:
        return f"{sign}{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d{hours:02d}h"
