"""The local zone (TZ, then /etc/localtime) and local formatting."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from taskq.errors import BadInput
from taskq.times.timespec import datetime_to_us
from taskq.times.zones import format_local, local_zone, local_zone_name, resolve

SUMMER = datetime(2026, 7, 1, 12, 0)
WINTER = datetime(2026, 12, 1, 12, 0)


@pytest.mark.parametrize(
    "tz",
    [
        "Europe/Berlin",
        ":Europe/Berlin",
        "/usr/share/zoneinfo/Europe/Berlin",
        "CET-1CEST,M3.5.0,M10.5.0/3",  # the same rules as a POSIX TZ string
    ],
)
def test_tz_forms_name_the_same_zone(tz: str) -> None:
    zone = local_zone({"TZ": tz})
    assert resolve(SUMMER, zone) == datetime_to_us(datetime(2026, 7, 1, 10, tzinfo=UTC))
    assert resolve(WINTER, zone) == datetime_to_us(datetime(2026, 12, 1, 11, tzinfo=UTC))


@pytest.mark.parametrize("tz", ["", ":", "UTC", "UTC0"])
def test_utc_forms(tz: str) -> None:
    assert resolve(WINTER, local_zone({"TZ": tz})) == datetime_to_us(WINTER.replace(tzinfo=UTC))


def test_without_tz_etc_localtime_decides() -> None:
    with open("/etc/localtime", "rb") as f:
        expected = f.read()
    zone = local_zone({})
    key = getattr(zone, "key", None)
    if key and not key.startswith("/"):
        with open(f"/usr/share/zoneinfo/{key}", "rb") as f:
            assert f.read() == expected


def test_a_bad_tz_is_one_line() -> None:
    with pytest.raises(BadInput, match=r"^TZ='Mars/Olympus' names no time zone"):
        local_zone({"TZ": "Mars/Olympus"})


@pytest.mark.slow
def test_local_format_carries_the_offset() -> None:
    zone = local_zone({"TZ": "Europe/Berlin"})
    us = datetime_to_us(datetime(2026, 12, 1, 8, tzinfo=UTC))
    assert format_local(us, zone) == "2026-12-01T09:00:00.000000+01:00"
    assert format_local(us + 5, local_zone({"TZ": "UTC"})) == "2026-12-01T08:00:00.000005+00:00"


@pytest.mark.parametrize(
    ("tz", "name"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        (":Asia/Kolkata", "Asia/Kolkata"),
        ("", "UTC"),
        ("UTC", "UTC"),
    ],
)
def test_the_local_zone_s_name(tz: str, name: str) -> None:
    assert local_zone_name({"TZ": tz}) == name


@pytest.mark.parametrize(
    "tz", ["CET-1CEST,M3.5.0,M10.5.0/3", "/usr/share/zoneinfo/Europe/Berlin", "UTC0"]
)
def test_a_local_zone_without_an_iana_name_asks_for_tz(tz: str) -> None:
    local_zone({"TZ": tz})  # a time can be read in it...
    with pytest.raises(BadInput) as caught:  # ...but a schedule could not keep it by name
        local_zone_name({"TZ": tz})
    assert str(caught.value) == (
        f"the local zone (TZ={tz!r}) has no IANA name to keep: give --tz, e.g. --tz Europe/Berlin"
    )


def test_without_tz_the_name_is_etc_localtime_s() -> None:
    zone = local_zone({})
    key = getattr(zone, "key", None)
    if key is None or key.startswith("/"):
        with pytest.raises(BadInput, match="give --tz"):
            local_zone_name({})
    else:
        assert local_zone_name({}) == key
