"""Time and duration parsing: examples and properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import BadInput
from taskq.times.timespec import (
    DAY,
    HOUR,
    MAX_DURATION,
    MINUTE,
    SECOND,
    datetime_to_us,
    format_compact,
    format_iso,
    parse_compact,
    parse_duration,
    parse_when,
)

NOW = 1_796_000_000_123_456


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("90", 90 * SECOND),
        ("90s", 90 * SECOND),
        ("250ms", 250_000),
        ("5m", 5 * MINUTE),
        ("2h", 2 * HOUR),
        ("1d", DAY),
        ("1h30m", 90 * MINUTE),
        ("0.5s", SECOND // 2),
        ("1.5", 1_500_000),
        ("1w", 7 * DAY),
        ("10us", 10),
    ],
)
def test_durations(text: str, us: int) -> None:
    assert parse_duration(text) == us


@pytest.mark.parametrize("text", ["", "s", "5x", "1h 30m", "-5s", "5m1", "m5", "1.s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(BadInput, match="bad duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T09:00:00Z", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01T09:00:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),  # local, and local is UTC
        ("2026-12-01T10:00:00+01:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01 09:00:00.25Z", datetime(2026, 12, 1, 9, 0, 0, 250000, tzinfo=UTC)),
        ("2026-12-01T09:00:00.123456789Z", datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_iso_times(text: str, expected: datetime) -> None:
    assert parse_when(text, NOW, UTC) == datetime_to_us(expected)


def test_epoch_and_now() -> None:
    assert parse_when("now", NOW) == NOW
    assert parse_when("@1700000000", NOW) == 1_700_000_000 * SECOND
    assert parse_when("@1700000000.5", NOW) == 1_700_000_000 * SECOND + 500_000
    assert parse_when("@1700000000.0000019", NOW) == 1_700_000_000 * SECOND + 1


@pytest.mark.parametrize(
    "text",
    [
        "tomorrow",
        "2026-13-01T00:00:00Z",
        "@",
        "@1.2.3",
        "",
        "24:00",
        "12:60",
        "noon noon",
        "9:00 today tomorrow",
        "2026-02-30 09:00",
        "now + 2 fortnights",
        "now - 2 hours",
        "next tuesday",
    ],
)
def test_bad_times(text: str) -> None:
    with pytest.raises(BadInput, match=r"^bad time") as caught:
        parse_when(text, NOW, BERLIN)
    assert "\n" not in str(caught.value)


# 2026-11-30 20:40:10.5 in Berlin (+01:00), a Monday.
BERLIN = ZoneInfo("Europe/Berlin")
EVENING = datetime_to_us(datetime(2026, 11, 30, 19, 40, 10, 500000, tzinfo=UTC))


def _berlin(y: int, mo: int, d: int, h: int, mi: int, s: int = 0, us: int = 0) -> int:
    return datetime_to_us(datetime(y, mo, d, h, mi, s, us, tzinfo=BERLIN))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("21:00", _berlin(2026, 11, 30, 21, 0)),  # still to come today
        ("09:00", _berlin(2026, 12, 1, 9, 0)),  # passed today: tomorrow
        ("9:05:30", _berlin(2026, 12, 1, 9, 5, 30)),
        ("20:40", _berlin(2026, 11, 30, 20, 40)),  # the current minute counts as today
        ("20:40:09", _berlin(2026, 12, 1, 20, 40, 9)),  # a second ago: tomorrow
        ("09:00 tomorrow", _berlin(2026, 12, 1, 9, 0)),
        ("tomorrow 09:00", _berlin(2026, 12, 1, 9, 0)),
        ("23:00 today", _berlin(2026, 11, 30, 23, 0)),
        ("2026-12-24 18:30", _berlin(2026, 12, 24, 18, 30)),
        ("18:30 2026-12-24", _berlin(2026, 12, 24, 18, 30)),
        ("2026-12-24T18:30", _berlin(2026, 12, 24, 18, 30)),
        ("2026-07-01 09:00", _berlin(2026, 7, 1, 9, 0)),  # summer time: +02:00
        ("noon", _berlin(2026, 12, 1, 12, 0)),
        ("midnight", _berlin(2026, 12, 1, 0, 0)),
        ("teatime", _berlin(2026, 12, 1, 16, 0)),
        ("teatime tomorrow", _berlin(2026, 12, 1, 16, 0)),
        ("NOON 2026-12-24", _berlin(2026, 12, 24, 12, 0)),
        ("now + 2 hours", EVENING + 2 * HOUR),
        ("now+90 minutes", EVENING + 90 * MINUTE),
        ("now + 1 min", EVENING + MINUTE),
        ("now + 3 days", _berlin(2026, 12, 3, 20, 40, 10, 500000)),
        ("now + 1 week", _berlin(2026, 12, 7, 20, 40, 10, 500000)),
        ("noon + 1 day", _berlin(2026, 12, 2, 12, 0)),
        ("2026-12-01T09:00Z + 2 hours", datetime_to_us(datetime(2026, 12, 1, 11, tzinfo=UTC))),
        ("2026-12-01T09:00:00Z", datetime_to_us(datetime(2026, 12, 1, 9, tzinfo=UTC))),
        ("@1700000000", 1_700_000_000 * SECOND),
        ("now", EVENING),
    ],
)
def test_at_style_times_are_local(text: str, expected: int) -> None:
    assert parse_when(text, EVENING, BERLIN) == expected


def test_days_keep_the_wall_time_across_a_dst_change() -> None:
    # 2026-10-25 has 25 hours in Berlin: a day later is the same wall time,
    # 25 hours on, as at(1) counts days; hours are elapsed time.
    before = _berlin(2026, 10, 24, 12, 0)
    assert parse_when("now + 1 day", before, BERLIN) == before + 25 * HOUR
    assert parse_when("now + 24 hours", before, BERLIN) == before + 24 * HOUR


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-03-29 02:30", "2026-03-29 02:30:00 does not exist in Europe/Berlin"),
        ("02:30 2026-03-29", "does not exist"),
        ("2026-10-25 02:30", "happens twice in Europe/Berlin [(][+]02:00 and [+]01:00"),
    ],
)
def test_dst_skipped_and_repeated_times_are_refused(text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        parse_when(text, EVENING, BERLIN)


def test_an_offset_settles_a_repeated_time() -> None:
    first = parse_when("2026-10-25T02:30+02:00", EVENING, BERLIN)
    assert parse_when("2026-10-25T02:30+01:00", EVENING, BERLIN) == first + HOUR


@given(st.text(max_size=24))
def test_time_parser_never_crashes(text: str) -> None:
    try:
        assert 0 <= parse_when(text, EVENING, BERLIN) <= 253402300799 * SECOND
    except BadInput as e:
        assert "\n" not in str(e)


instants = st.integers(min_value=0, max_value=253402300799 * SECOND)


@given(instants)
def test_compact_round_trip_and_order(us: int) -> None:
    assert parse_compact(format_compact(us)) == us
    assert len(format_compact(us)) == 23


@given(instants, instants)
def test_compact_sorts_as_instants(a: int, b: int) -> None:
    assert (format_compact(a) < format_compact(b)) == (a < b)


@given(instants)
def test_iso_round_trip(us: int) -> None:
    assert parse_when(format_iso(us), 0) == us


@given(
    st.integers(min_value=DAY, max_value=253402300799 * SECOND - DAY),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_offsets_name_the_same_instant(us: int, minutes: int) -> None:
    tz = timezone(timedelta(minutes=minutes))
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    assert parse_when(dt.astimezone(tz).isoformat(), 0) == us


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "1969-12-31"]
)
def test_out_of_range_times(text: str) -> None:
    with pytest.raises(BadInput, match="out of range"):
        parse_when(text, NOW)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["ms", "s", "m", "h", "d"]))
def test_unit_durations(n: int, unit: str) -> None:
    scale = {"ms": 1000, "s": SECOND, "m": MINUTE, "h": HOUR, "d": DAY}[unit]
    if n * scale <= MAX_DURATION:
        assert parse_duration(f"{n}{unit}") == n * scale
    else:
        with pytest.raises(BadInput, match="longer than the limit"):
            parse_duration(f"{n}{unit}")


@given(st.text(max_size=12))
def test_duration_parser_never_crashes(text: str) -> None:
    try:
        assert parse_duration(text) >= 0
    except BadInput:
        pass


@given(
    st.integers(min_value=946_684_800 * SECOND, max_value=4_102_444_800 * SECOND),
    st.integers(min_value=0, max_value=23),
    st.integers(min_value=0, max_value=59),
)
def test_a_clock_time_is_the_next_such_wall_time(now: int, hour: int, minute: int) -> None:
    try:
        got = parse_when(f"{hour}:{minute:02d}", now, BERLIN)
    except BadInput as e:  # only a time that summer time skips or repeats
        assert "DST" in str(e)
        return
    wall = datetime.fromtimestamp(got / SECOND, BERLIN)
    assert (wall.hour, wall.minute, wall.second) == (hour, minute, 0)
    assert now - MINUTE < got <= now + DAY + HOUR  # not before this minute; within a day


@pytest.mark.slow
def test_format_compact_is_datetimes_form_and_parses_back() -> None:
    """format_compact and format_iso (gmtime, on hot paths) write what strftime would."""
    import random

    from taskq.times.timespec import format_compact, format_iso, parse_compact

    rng = random.Random(7)
    for us in [0, 1, 999_999, 1_000_000, 253_402_300_799_999_999] + [
        rng.randint(0, 253_402_300_799_999_999) for _ in range(20_000)
    ]:
        expected = datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y%m%dT%H%M%S")
        assert format_compact(us) == f"{expected}.{us % 1_000_000:06d}Z"
        assert parse_compact(format_compact(us)) == us
        iso = datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        assert format_iso(us) == f"{iso}.{us % 1_000_000:06d}Z"
