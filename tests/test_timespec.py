"""Time and duration parsing: examples and properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import BadInput
from taskq.timespec import (
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
        ("2026-12-01T09:00:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01T10:00:00+01:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01 09:00:00.25Z", datetime(2026, 12, 1, 9, 0, 0, 250000, tzinfo=UTC)),
        ("2026-12-01T09:00:00.123456789Z", datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_iso_times(text: str, expected: datetime) -> None:
    assert parse_when(text, NOW) == datetime_to_us(expected)


def test_epoch_and_now() -> None:
    assert parse_when("now", NOW) == NOW
    assert parse_when("@1700000000", NOW) == 1_700_000_000 * SECOND
    assert parse_when("@1700000000.5", NOW) == 1_700_000_000 * SECOND + 500_000
    assert parse_when("@1700000000.0000019", NOW) == 1_700_000_000 * SECOND + 1


@pytest.mark.parametrize("text", ["tomorrow", "2026-13-01T00:00:00Z", "@", "@1.2.3", "", "12:00"])
def test_bad_times(text: str) -> None:
    with pytest.raises(BadInput, match="bad time"):
        parse_when(text, NOW)


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
