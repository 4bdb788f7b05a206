"""Instants and durations: their parsing and formatting, examples and properties."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import BadInput
from taskq.times import timespec
from taskq.times.timespec import (
    DAY,
    HOUR,
    MAX_DURATION,
    MINUTE,
    SECOND,
    format_compact,
    format_iso,
    parse_compact,
    parse_duration,
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


instants = st.integers(min_value=0, max_value=253402300799 * SECOND)


@given(instants)
def test_compact_round_trip_and_order(us: int) -> None:
    assert parse_compact(format_compact(us)) == us
    assert len(format_compact(us)) == 23


@given(instants, instants)
def test_compact_sorts_as_instants(a: int, b: int) -> None:
    assert (format_compact(a) < format_compact(b)) == (a < b)


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


@pytest.mark.slow
def test_format_compact_is_datetimes_form_and_parses_back() -> None:
    """format_compact and format_iso (gmtime, on hot paths) write what strftime would."""
    import random

    from taskq.times.timespec import format_compact, parse_compact

    rng = random.Random(7)
    for us in [0, 1, 999_999, 1_000_000, 253_402_300_799_999_999] + [
        rng.randint(0, 253_402_300_799_999_999) for _ in range(20_000)
    ]:
        expected = datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y%m%dT%H%M%S")
        assert format_compact(us) == f"{expected}.{us % 1_000_000:06d}Z"
        assert parse_compact(format_compact(us)) == us
        iso = datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        assert format_iso(us) == f"{iso}.{us % 1_000_000:06d}Z"


@given(st.text(alphabet="0123456789.dhmsuw\u00b2\u0663 ", max_size=8))
def test_a_simple_duration_reads_as_the_pattern_reads_it(text: str) -> None:
    """Whole numbers with one unit or none skip the pattern (_one_part): the same microseconds."""
    s = text.strip().lower()
    simple = timespec._one_part(s)
    if simple is not None:
        m = timespec._PART.fullmatch(s)
        assert m is not None
        assert simple == timespec._decimal_us(m.group(1), timespec._UNITS[m.group(2) or "s"])
