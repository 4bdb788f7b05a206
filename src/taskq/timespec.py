"""Parse and format instants and durations; pure functions, time injected.

Instants are integers of microseconds since the Unix epoch, UTC: exact,
totally ordered and free of float rounding. Durations are microseconds too.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from taskq.errors import BadInput

US = 1
MS = 1_000
SECOND = 1_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

_UNITS = {"us": US, "ms": MS, "s": SECOND, "m": MINUTE, "h": HOUR, "d": DAY, "w": 7 * DAY}
_PART = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h|d|w)")
_BARE = re.compile(r"\d+(?:\.\d+)?")
_EPOCH = re.compile(r"@(-?\d+)(?:\.(\d{1,9}))?")
_EPOCH_US = datetime(1970, 1, 1, tzinfo=UTC)
# The latest instant a task may name; keeps names fixed-width (year 9999).
MAX_INSTANT = 253402300799 * SECOND
# The longest duration taskq takes (a century): a delay from now still
# names a time before year 9999, and no sum of durations overflows.
MAX_DURATION = 36525 * DAY


def _decimal_us(text: str, unit: int) -> int:
    """Convert a decimal string times a unit to whole microseconds, exactly."""
    whole, _, frac = text.partition(".")
    scaled = int(whole) * unit
    if frac:
        scaled += int(frac) * unit // 10 ** len(frac)
    return scaled


def parse_duration(text: str) -> int:
    """Parse '90', '90s', '250ms', '5m', '2h', '1d', '1h30m' to microseconds."""
    s = text.strip().lower()
    if _BARE.fullmatch(s):
        return within_limit(_decimal_us(s, SECOND), text)
    pos, total = 0, 0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += _decimal_us(m.group(1), _UNITS[m.group(2)])
        pos = m.end()
    if pos != len(s) or not s:
        raise BadInput(f"bad duration {text!r}: use e.g. 90, 90s, 250ms, 5m, 2h, 1d or 1h30m")
    return within_limit(total, text)


def within_limit(us: int, text: object) -> int:
    """A duration no longer than MAX_DURATION (a century); BadInput otherwise."""
    if us > MAX_DURATION:
        raise BadInput(f"duration {text!r} is longer than the limit of 36525d (a century)")
    return us


def parse_when(text: str, now: int) -> int:
    """Parse an instant: ISO-8601 (no offset means UTC), '@EPOCH[.frac]' or 'now'."""
    s = text.strip()
    if s.lower() == "now":
        return now
    m = _EPOCH.fullmatch(s)
    if m:
        frac = m.group(2) or ""
        us = int(m.group(1)) * SECOND + (int(frac.ljust(6, "0")[:6]) if frac else 0)
        return _check_range(us, text)
    try:
        dt = datetime.fromisoformat(_trim_fraction(s))
    except ValueError:
        raise BadInput(
            f"bad time {text!r}: use ISO-8601 (2026-12-01T09:00:00Z), @EPOCH or now"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        us = datetime_to_us(dt)
    except OverflowError:
        raise BadInput(f"time {text!r} is out of range (1970 to 9999)") from None
    return _check_range(us, text)


def _trim_fraction(s: str) -> str:
    """Cut fractional seconds beyond microseconds, which fromisoformat rejects."""
    return re.sub(r"(\.\d{6})\d+", r"\1", s)


def _check_range(us: int, text: str) -> int:
    if not 0 <= us <= MAX_INSTANT:
        raise BadInput(f"time {text!r} is out of range (1970 to 9999)")
    return us


def datetime_to_us(dt: datetime) -> int:
    """Convert an aware datetime to microseconds since the epoch."""
    delta = dt - _EPOCH_US
    return (delta.days * 86400 + delta.seconds) * SECOND + delta.microseconds


def us_to_datetime(us: int) -> datetime:
    """Convert microseconds since the epoch to an aware UTC datetime."""
    return _EPOCH_US + timedelta(microseconds=us)


def format_iso(us: int) -> str:
    """Format an instant as ISO-8601 UTC with microseconds: 2026-12-01T09:00:00.000000Z."""
    return us_to_datetime(us).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_compact(us: int) -> str:
    """Format an instant for file names: 20261201T090000.000000Z (sorts as it orders)."""
    return us_to_datetime(us).strftime("%Y%m%dT%H%M%S.%fZ")


_COMPACT = re.compile(r"(\d{8})T(\d{6})\.(\d{6})Z")


def parse_compact(text: str) -> int:
    """Parse the file-name form of an instant; raise ValueError if malformed."""
    m = _COMPACT.fullmatch(text)
    if not m:
        raise ValueError(f"not a compact instant: {text!r}")
    dt = datetime.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return datetime_to_us(dt) + int(m.group(3))


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
