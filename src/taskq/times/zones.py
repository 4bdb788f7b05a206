"""Local time: which zone is local, local wall times to instants, instants to local text.

The local zone is the one date(1) and at(1) use: TZ (an IANA name, a
":name", an absolute path to a TZif file, a POSIX rule such as
"CET-1CEST,M3.5.0,M10.5.0/3", or empty for UTC), else /etc/localtime, else
UTC. `local_zone` is the one function that finds it, for submissions and
schedules alike; a schedule keeps its zone by name, so `local_zone_name`
refuses a local zone that has none (a POSIX rule, a copied zone file that
/etc/timezone does not name). A wall time that the zone's clocks skip or
show twice (a DST change) is refused with a one-line error naming both
readings, never guessed.
"""

from __future__ import annotations

import functools
import io
import os
import struct
import zoneinfo
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from taskq.errors import BadInput
from taskq.times.timespec import datetime_to_us, format_iso, us_to_datetime

LOCALTIME = "/etc/localtime"
TIMEZONE = "/etc/timezone"  # Debian's name for a copied /etc/localtime


def local_zone(environ: Mapping[str, str] | None = None) -> tzinfo:
    """The local time zone: TZ, then /etc/localtime, then UTC; BadInput for a bad TZ."""
    return _zone((os.environ if environ is None else environ).get("TZ"))


@functools.cache  # a batch reads a local time per line; the zone is read once
def _zone(tz: str | None) -> tzinfo:
    if tz is None:
        return _localtime_file()
    name = tz.removeprefix(":")
    if not name:
        return UTC  # glibc reads an empty TZ as UTC
    try:
        if name.startswith("/"):
            with open(name, "rb") as f:
                return ZoneInfo.from_file(f, key=name)
        return ZoneInfo(name)
    except (OSError, ValueError, ZoneInfoNotFoundError):
        pass
    try:
        return _posix_rule(name)
    except ValueError:
        raise BadInput(
            f"TZ={tz!r} names no time zone: use an IANA name such as Europe/Berlin"
        ) from None


def local_zone_name(environ: Mapping[str, str] | None = None) -> str:
    """The local zone's IANA name, for a schedule to keep; BadInput if it has none."""
    environ = os.environ if environ is None else environ
    zone = local_zone(environ)
    key = "UTC" if zone is UTC else getattr(zone, "key", None)
    if isinstance(key, str) and _is_iana(key):
        return key
    where = f"TZ={environ['TZ']!r}" if "TZ" in environ else LOCALTIME
    raise BadInput(
        f"the local zone ({where}) has no IANA name to keep: give --tz, e.g. --tz Europe/Berlin"
    )


def _is_iana(key: str) -> bool:
    if key.startswith("/"):
        return False
    try:
        ZoneInfo(key)
    except (ValueError, ZoneInfoNotFoundError):
        return False
    return True


def _localtime_file() -> tzinfo:
    """The zone of /etc/localtime, named after its link target, or as /etc/timezone says."""
    try:
        with open(LOCALTIME, "rb") as f:
            data = f.read()
        zone = ZoneInfo.from_file(io.BytesIO(data), key=_localtime_key(data))
    except (OSError, ValueError):
        return UTC
    return zone


def _localtime_key(data: bytes) -> str:
    """/etc/localtime's zone name: its link's, or /etc/timezone's if its file is the same."""
    try:
        target = os.readlink(LOCALTIME)
        return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else target
    except OSError:
        pass
    try:
        with open(TIMEZONE, encoding="utf-8") as f:
            name = f.read(256).strip()
    except (OSError, UnicodeDecodeError):
        return LOCALTIME
    for root in zoneinfo.TZPATH:
        path = os.path.join(root, name)
        try:
            if _is_iana(name) and os.path.realpath(path).startswith(root):
                with open(path, "rb") as f:
                    if f.read(len(data) + 1) == data:
                        return name
        except OSError:
            continue
    return LOCALTIME


def _posix_rule(rule: str) -> tzinfo:
    """A zone from a POSIX TZ rule: a TZif file with no transitions and the rule as footer.

    RFC 8536 makes the footer govern every instant after the last transition,
    so with none it governs all; zoneinfo checks the rule (ValueError if bad).
    """
    block = b"TZif2" + bytes(15) + struct.pack(">6l", 0, 0, 0, 0, 1, 1)
    block += struct.pack(">lbb", 0, 0, 0) + b"\0"  # one type (UTC), one designation byte
    return ZoneInfo.from_file(io.BytesIO(block + block + b"\n" + rule.encode() + b"\n"), key=rule)


def zone_name(zone: tzinfo) -> str:
    """A zone's name for messages: its key, or 'the local zone'."""
    key = getattr(zone, "key", None)
    return str(key) if key else "UTC" if zone is UTC else "the local zone"


def resolve(wall: datetime, zone: tzinfo) -> int:
    """The instant a naive wall time names in zone; BadInput if DST skips or repeats it."""
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return datetime_to_us(first)
    shown = wall.strftime("%Y-%m-%d %H:%M:%S")
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
        raise BadInput(
            f"{shown} does not exist in {zone_name(zone)}: the clocks skip it (DST); "
            "give another time or an offset"
        )
    offsets = [_offset(d) for d in (first, second)]
    raise BadInput(
        f"{shown} happens twice in {zone_name(zone)} ({offsets[0]} and {offsets[1]}, DST): "
        f"give the offset, e.g. {wall.strftime('%Y-%m-%dT%H:%M')}{offsets[1]}"
    )


def _offset(dt: datetime) -> str:
    text = dt.strftime("%z")
    return f"{text[:3]}:{text[3:]}"


def wall_now(now: int, zone: tzinfo) -> datetime:
    """The naive local wall time of an instant."""
    return us_to_datetime(now).astimezone(zone).replace(tzinfo=None)


def format_local(us: int, zone: tzinfo) -> str:
    """An instant as local ISO-8601 with its offset: 2026-12-01T10:00:00.000000+01:00."""
    return us_to_datetime(us).astimezone(zone).isoformat(timespec="microseconds")


TIMEFMT = "TASKQ_TIMEFMT"  # utc (the default) or local: how listings print instants


def stamp(local: bool | None, environ: Mapping[str, str]) -> Callable[[int], str]:
    """How listings print instants: local (--local), UTC (--utc), else as TASKQ_TIMEFMT says."""
    if local is None:
        fmt = environ.get(TIMEFMT, "utc").strip().lower() or "utc"
        if fmt not in ("utc", "local"):
            raise BadInput(f"{TIMEFMT}={environ[TIMEFMT]!r}: use utc or local")
        local = fmt == "local"
    if not local:
        return format_iso
    zone = local_zone(environ)
    return lambda us: format_local(us, zone)
