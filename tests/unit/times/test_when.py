"""WHEN as at(1) means it: every form, its roll-overs, refusals and DST, against zoneinfo.

Each expected instant is built here from a zoneinfo wall time by plain
datetime arithmetic, not by taskq's code; now is injected. The numbers in
the section titles are the items of issue 25 (and its at(1) list).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import BadInput
from taskq.times.when import parse_posix, parse_when

SECOND = 1_000_000
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
KOLKATA = ZoneInfo("Asia/Kolkata")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
ZONES = [ZoneInfo("UTC"), BERLIN, NEW_YORK, KOLKATA, LORD_HOWE]


def us(dt: datetime) -> int:
    """An aware datetime's instant, in microseconds, by the standard library alone."""
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * SECOND + delta.microseconds


def wall(zone: ZoneInfo, d: date, hh: int = 0, mm: int = 0, ss: int = 0, micro: int = 0) -> int:
    return us(datetime.combine(d, time(hh, mm, ss, micro), tzinfo=zone))


# 2026-12-01 09:41:23.5 local, a Tuesday: the "At 09:41 UTC", in every zone.
TODAY = date(2026, 12, 1)
TOMORROW = TODAY + timedelta(days=1)
CLOCK = (9, 41, 23, 500_000)

Expect = Callable[[ZoneInfo], int]


def days(n: int, hh: int | None = None, mm: int = 0) -> Expect:
    """TODAY + n days at hh:mm, or at now's time of day when hh is None."""
    at = CLOCK if hh is None else (hh, mm, 0, 0)
    return lambda z: wall(z, TODAY + timedelta(days=n), *at)


def now_in(zone: ZoneInfo) -> int:
    return wall(zone, TODAY, *CLOCK)


def when(text: str, zone: ZoneInfo, now: int | None = None) -> int:
    return parse_when(text, now_in(zone) if now is None else now, zone)


# -- 1: TIME + N counts from today's TIME, even when it has passed ------------

ITEM_1 = [
    ("9:00 + 1 day", days(1, 9)),
    ("midnight + 1 day", days(1, 0)),
    ("9:00 + 1 hour", days(0, 10)),  # 10:00 is still to come today
    ("9:00 + 30 minutes", days(1, 9, 30)),  # 09:30 has passed: tomorrow's
    ("teatime + 1 week", days(7, 16)),
    ("4pm + 3 days", days(3, 16)),
    ("noon + 2 weeks", days(14, 12)),
    ("23:30 + 1 hour", days(1, 0, 30)),
]


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize(("text", "expected"), ITEM_1, ids=[t for t, _ in ITEM_1])
def test_1_time_plus_n_counts_from_todays_time(text: str, expected: Expect, zone: ZoneInfo) -> None:
    assert when(text, zone) == expected(zone)


# -- 2: the current minute has passed, as in at(1) ----------------------------


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_2_the_current_minute_is_tomorrow(zone: ZoneInfo) -> None:
    assert when("09:41", zone) == days(1, 9, 41)(zone)
    assert when("0941", zone) == days(1, 9, 41)(zone)
    assert when("09:42", zone) == days(0, 9, 42)(zone)
    noon = wall(zone, TODAY, 12)
    assert parse_when("noon", noon, zone) == wall(zone, TOMORROW, 12)
    assert parse_when("noon", noon - 1, zone) == noon
    # With seconds, the current second has passed and the next one has not.
    assert when("09:41:23", zone) == wall(zone, TOMORROW, 9, 41, 23)
    assert when("09:41:24", zone) == wall(zone, TODAY, 9, 41, 24)


# -- 3: a date without a time keeps the current time of day (at's meaning) ----

ITEM_3 = [
    "2026-12-24",
    "Dec 24",
    "December 24",
    "24 Dec",
    "Dec 24 2026",
    "Dec 24, 2026",
    "24.12.2026",
    "24.12.26",
    "12/24/2026",
    "12/24/26",
    "26-12-24",
    "122426",
    "12242026",
]


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize("text", ITEM_3)
def test_3_a_date_alone_is_at_the_current_time_of_day(text: str, zone: ZoneInfo) -> None:
    assert when(text, zone) == wall(zone, date(2026, 12, 24), *CLOCK)


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_3_today_and_tomorrow_alone(zone: ZoneInfo) -> None:
    assert when("today", zone) == now_in(zone)  # due at once, as in at(1)
    assert when("2026-12-01", zone) == now_in(zone)
    assert when("tomorrow", zone) == days(1)(zone)


# -- 4: decrements ------------------------------------------------------------

ITEM_4 = [
    ("noon tomorrow - 1 hour", days(1, 11)),
    ("9:00 - 1 hour", days(1, 8)),  # today's 08:00 has passed
    ("10:00 - 30 minutes", days(1, 9, 30)),
    ("11:00 - 1 hour", days(0, 10)),
    ("Dec 24 - 1 week", lambda z: wall(z, date(2026, 12, 17), *CLOCK)),
    ("tomorrow - 1 day", days(0)),
    ("00:30 - 1 hour", days(0, 23, 30)),  # at(1) refuses this one (see DIFFERENCES)
]


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize(("text", "expected"), ITEM_4, ids=[t for t, _ in ITEM_4])
def test_4_decrements(text: str, expected: Expect, zone: ZoneInfo) -> None:
    assert when(text, zone) == expected(zone)


def test_4_now_minus_is_elapsed_time_and_due_at_once() -> None:
    now = now_in(BERLIN)
    assert when("now - 0 minutes", BERLIN) == now
    assert when("now - 90 minutes", BERLIN) == now - 90 * 60 * SECOND
    assert when("now-1hour", BERLIN) == now - 3600 * SECOND


# -- 5: out-of-range fields are refused, saying what at(1) would do -----------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("24:00", "hour 24 is out of range (0-23); at(1) would run 00:00 the next day"),
        ("2400", "hour 24 is out of range"),
        ("24:30 tomorrow", "at(1) would run 00:30 the next day"),
        ("12:60", "minute 60 is out of range (0-59); at(1) would run 13:00"),
        ("0:60", "at(1) would run 01:00"),
        ("23:60", "at(1) would run 00:00 the next day"),
        ("2460", "at(1) would run 01:00 the next day"),
        ("1260", "minute 60 is out of range"),
        ("12:00:60", "second 60 is out of range"),
        ("Feb 30", "Feb has no day 30; at(1) would carry it into Mar, taskq does not"),
        ("04/31/2027", "Apr has no day 31; at(1) would carry it into May"),
        ("31.04.2027", "Apr has no day 31"),  # at(1) refuses this form
        ("13/01/2027", "month 13 is out of range"),
        ("2027-02-29", "2027-02-29 is no date"),
        ("Feb 29 2027", "2027-02-29 is no date; at(1) would run 1 Mar"),
        ("Feb 29", "2027-02-29 is no date; at(1) would run 1 Mar"),  # this year's has passed
        ("13pm", "hour 13 is too large for pm"),
    ],
)
def test_5_out_of_range_fields_are_refused_with_at_s_reading(text: str, message: str) -> None:
    with pytest.raises(BadInput) as caught:
        when(text, BERLIN)
    got = str(caught.value)
    assert got.startswith(f"bad time {text!r}: ") and message in got, got
    assert "\n" not in got


AT_REFUSES_TOO = ["25:00", "12:61", "24:00:00", "Jan 32", "31.04.2027", "2027-02-29"]


@pytest.mark.parametrize("text", AT_REFUSES_TOO)
def test_5_what_at_refuses_too_names_no_at_time(text: str) -> None:
    with pytest.raises(BadInput) as caught:
        when(text, BERLIN)
    assert "at(1)" not in str(caught.value)


def test_5_feb_29_without_a_year_is_the_next_one_at_s_carry_would_not_reach() -> None:
    # at(1) reads Feb 29 as this year's, carried to 1 March when there is none,
    # and moves a day before today to next year: so late in 2027 it is 2028-02-29
    late_2027 = wall(BERLIN, date(2027, 12, 1), 9)
    assert when("Feb 29", BERLIN, late_2027) == wall(BERLIN, date(2028, 2, 29), 9)
    assert when("Feb 29 noon", BERLIN, late_2027) == wall(BERLIN, date(2028, 2, 29), 12)
    march_2027 = wall(BERLIN, date(2027, 3, 5), 9)
    assert when("Feb 29", BERLIN, march_2027) == wall(BERLIN, date(2028, 2, 29), 9)
    with pytest.raises(BadInput, match=re.escape("2027-02-29 is no date; at(1) would run 1 Mar")):
        when("Feb 29", BERLIN, wall(BERLIN, date(2027, 2, 28), 9))  # at(1): 1 March 2027


# -- 6: the rest of at(1)'s grammar -------------------------------------------

ITEM_6 = [
    # 12-hour times
    ("4pm", days(0, 16)),
    ("4 pm", days(0, 16)),
    ("9:30 am", days(1, 9, 30)),
    ("9:30am", days(1, 9, 30)),
    ("12am", days(1, 0)),
    ("12pm", days(0, 12)),
    ("12:15 AM", days(1, 0, 15)),
    ("10am Jul 31", lambda z: wall(z, date(2027, 7, 31), 10)),  # at(1)'s own example
    ("1am tomorrow", days(1, 1)),
    # times without a colon, and at's other separators
    ("0930", days(1, 9, 30)),
    ("1224", days(0, 12, 24)),
    ("9.45", days(0, 9, 45)),
    ("9h45", days(0, 9, 45)),
    # month names and other dates, with a time before or after
    ("noon Dec 24", lambda z: wall(z, date(2026, 12, 24), 12)),
    ("Dec 24 noon", lambda z: wall(z, date(2026, 12, 24), 12)),
    ("18:30 24.12.2026", lambda z: wall(z, date(2026, 12, 24), 18, 30)),
    ("6:30pm 12/24/2026", lambda z: wall(z, date(2026, 12, 24), 18, 30)),
    ("2026-12-24 18:30", lambda z: wall(z, date(2026, 12, 24), 18, 30)),
    ("Nov 30", lambda z: wall(z, date(2027, 11, 30), *CLOCK)),  # passed: next year's
    ("Dec 1", days(0)),  # today is not before today
    ("Nov 30 + 1 day", days(0)),  # this year's, plus the day, is today
    ("Jan 1 2027", lambda z: wall(z, date(2027, 1, 1), *CLOCK)),
    # weekdays and next
    ("tue", days(7)),  # today is Tuesday: a weekday is 1 to 7 days on
    ("Tuesday", days(7)),
    ("wed", days(1)),
    ("monday", days(6)),
    ("next tue", days(7)),
    ("next friday", days(3)),
    ("9:00 fri", days(3, 9)),
    ("next day", days(1)),
    ("next week", days(7)),
    ("next month", lambda z: wall(z, date(2027, 1, 1), *CLOCK)),
    ("next year", lambda z: wall(z, date(2027, 12, 1), *CLOCK)),
    ("next hour", lambda z: now_in(z) + 3600 * SECOND),
    ("next minute", lambda z: now_in(z) + 60 * SECOND),
    # today and tomorrow, with times
    ("noon today", days(0, 12)),
    ("teatime tomorrow", days(1, 16)),
    ("tomorrow 9:00", days(1, 9)),
    # months and years
    ("now + 1 month", lambda z: wall(z, date(2027, 1, 1), *CLOCK)),
    ("now + 2 years", lambda z: wall(z, date(2028, 12, 1), *CLOCK)),
    ("9am + 1 month", lambda z: wall(z, date(2027, 1, 1), 9)),
    ("Jan 31 + 1 month", lambda z: wall(z, date(2027, 3, 3), *CLOCK)),  # 31 Feb: 3 March
    ("Jan 31 2028 + 1 month", lambda z: wall(z, date(2028, 3, 2), *CLOCK)),  # a leap year
    ("Mar 31 - 1 month", lambda z: wall(z, date(2027, 3, 3), *CLOCK)),
    # increments written every way at(1) lexes them
    ("now+1day", days(1)),
    ("now +3 hours", lambda z: now_in(z) + 3 * 3600 * SECOND),
    ("noon+1 days", days(1, 12)),
    ("NOW + 1 MIN", lambda z: now_in(z) + 60 * SECOND),
    ("now + 5 mins", lambda z: now_in(z) + 300 * SECOND),
]


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize(("text", "expected"), ITEM_6, ids=[t for t, _ in ITEM_6])
def test_6_at_s_grammar(text: str, expected: Expect, zone: ZoneInfo) -> None:
    assert when(text, zone) == expected(zone)


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_6_a_zone_after_the_time(zone: ZoneInfo) -> None:
    utc = ZoneInfo("UTC")
    now = now_in(zone)
    # The time is read in the zone named, and rolls over by that zone's clock.
    today_utc = datetime.fromtimestamp(now / SECOND, UTC).date()
    nine = wall(utc, today_utc, 9)
    assert parse_when("09:00 UTC", now, zone) == (nine if nine > now else nine + 86400 * SECOND)
    assert parse_when("noon utc tomorrow", now, zone) == wall(utc, today_utc, 12) + 86400 * SECOND
    tokyo = ZoneInfo("Asia/Tokyo")
    day = datetime.fromtimestamp(now / SECOND, tokyo).date()
    expected = wall(tokyo, day, 18)
    assert parse_when("18:00 Asia/Tokyo", now, zone) == (
        expected if expected > now else wall(tokyo, day + timedelta(days=1), 18)
    )


def test_6_a_zone_rolls_over_by_its_own_clock() -> None:
    # 09:30 CET is 08:30Z: 09:00 UTC is still to come today (at(1) says tomorrow).
    now = wall(BERLIN, TODAY, 9, 30)
    assert parse_when("09:00 UTC", now, BERLIN) == wall(ZoneInfo("UTC"), TODAY, 9)


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12011015", (2026, 12, 1, 10, 15, 0)),
        ("12011015.30", (2026, 12, 1, 10, 15, 30)),
        ("2712011015", (2027, 12, 1, 10, 15, 0)),
        ("6912011015", (1969, 12, 1, 10, 15, 0)),  # POSIX: 69-99 are 19YY
        ("202707151430.05", (2027, 7, 15, 14, 30, 5)),
    ],
)
def test_6_at_minus_t(text: str, expected: tuple[int, ...], zone: ZoneInfo) -> None:
    y, mo, d, hh, mm, ss = expected
    if y < 1970:
        with pytest.raises(BadInput, match="out of range"):
            parse_posix(text, now_in(zone), zone)
        return
    assert parse_posix(text, now_in(zone), zone) == wall(zone, date(y, mo, d), hh, mm, ss)


@pytest.mark.parametrize("text", ["1201101", "12011015.3", "13011015", "12321015", "12012415"])
def test_6_at_minus_t_refuses_what_is_no_time(text: str) -> None:
    with pytest.raises(BadInput, match=r"^bad -t"):
        parse_posix(text, now_in(BERLIN), BERLIN)


# -- where taskq keeps its own answer (DIFFERENCES FROM AT(1)) -----------------


def test_hours_are_elapsed_across_a_dst_change() -> None:
    spring = wall(BERLIN, date(2026, 3, 29), 1, 30)  # 01:30 CET; at 02:00 it is 03:00 CEST
    assert when("now + 2 hours", BERLIN, spring) == spring + 2 * 3600 * SECOND  # 04:30 CEST
    autumn = wall(BERLIN, date(2026, 10, 24), 12)
    assert when("now + 24 hours", BERLIN, autumn) == autumn + 24 * 3600 * SECOND
    assert when("now + 1 day", BERLIN, autumn) == wall(BERLIN, date(2026, 10, 25), 12)  # 25 h


@pytest.mark.parametrize(
    ("day", "elapsed_hours"),
    [(date(2026, 4, 4), 24.5), (date(2026, 10, 3), 23.5)],  # Lord Howe shifts by 30 minutes
)
def test_lord_howe_days_keep_the_wall_time(day: date, elapsed_hours: float) -> None:
    noon = wall(LORD_HOWE, day, 12)
    after = day + timedelta(days=1)
    for text in ("now + 1 day", "noon tomorrow", "noon + 1 day"):
        got = when(text, LORD_HOWE, noon)
        assert got == wall(LORD_HOWE, after, 12)
        assert got - noon == int(elapsed_hours * 3600) * SECOND
    assert when("now + 24 hours", LORD_HOWE, noon) == noon + 24 * 3600 * SECOND


def test_a_time_is_taken_to_another_day_as_written_not_as_dst_moved_it() -> None:
    # At 01:00 on 29 March 02:30 does not exist in Berlin; tomorrow it does.
    early = wall(BERLIN, date(2026, 3, 29), 1)
    expected = wall(BERLIN, date(2026, 3, 30), 2, 30)
    assert when("02:30 tomorrow", BERLIN, early) == expected
    assert when("02:30 + 1 day", BERLIN, early) == expected


@pytest.mark.parametrize(
    ("text", "zone", "now", "message"),
    [
        ("02:30", BERLIN, wall(BERLIN, date(2026, 3, 29), 1), "does not exist in Europe/Berlin"),
        ("02:30 tomorrow", BERLIN, wall(BERLIN, date(2026, 3, 28), 1), "does not exist"),
        ("02:30", BERLIN, wall(BERLIN, date(2026, 10, 25), 1), "happens twice in Europe/Berlin"),
        ("01:30", NEW_YORK, wall(NEW_YORK, date(2026, 11, 1), 0, 30), "happens twice"),
        ("2026-03-29 02:30", BERLIN, 0, "2026-03-29 02:30:00 does not exist"),
        ("02:30 2026-03-29", BERLIN, 0, "does not exist"),
        ("2026-10-25 02:30", BERLIN, 0, r"happens twice in Europe/Berlin (+02:00 and +01:00"),
    ],
)
def test_summer_time_gaps_and_repeats_are_refused(
    text: str, zone: ZoneInfo, now: int, message: str
) -> None:
    with pytest.raises(BadInput) as caught:
        parse_when(text, now, zone)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_now_in_a_repeated_hour_is_now() -> None:
    repeated = us(datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN, fold=1))
    assert when("now", BERLIN, repeated) == repeated
    assert when("now + 1 hour", BERLIN, repeated) == repeated + 3600 * SECOND


def test_an_offset_settles_a_repeated_time() -> None:
    first = when("2026-10-25T02:30+02:00", BERLIN)
    assert when("2026-10-25T02:30+01:00", BERLIN) == first + 3600 * SECOND


# -- ISO-8601, @EPOCH, now, and what is no time ---------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T09:00:00Z", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01T09:00:00", datetime(2026, 12, 1, 9, tzinfo=BERLIN)),  # naive: local
        ("2026-12-01T10:00:00+01:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01 09:00:00.25Z", datetime(2026, 12, 1, 9, 0, 0, 250000, tzinfo=UTC)),
        ("2026-12-01T09:00:00.123456789Z", datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)),
        ("2026-12-01T09:00Z + 2 hours", datetime(2026, 12, 1, 11, tzinfo=UTC)),
        ("2026-12-01T09:00Z - 1 day", datetime(2026, 11, 30, 9, tzinfo=UTC)),
        ("2027-01-31T09:00+01:00 + 1 month", datetime(2027, 3, 3, 9, tzinfo=BERLIN)),
        ("2026-12-24 + 1 day", datetime(2026, 12, 25, 9, 41, 23, 500_000, tzinfo=BERLIN)),
    ],
)
def test_iso_times(text: str, expected: datetime) -> None:
    assert when(text, BERLIN) == us(expected)


def test_epoch_and_now() -> None:
    now = now_in(BERLIN)
    assert when("now", BERLIN) == now
    assert when("@1700000000", BERLIN) == 1_700_000_000 * SECOND
    assert when("@1700000000.5", BERLIN) == 1_700_000_000 * SECOND + 500_000
    assert when("@1700000000.0000019", BERLIN) == 1_700_000_000 * SECOND + 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "@",
        "@1.2.3",
        "9",
        "noon noon",
        "9:00 today tomorrow",
        "now + 2 fortnights",
        "now +",
        "next",
        "next noon",
        "half past nine",
        "tomorrow tomorrow",
        "2026-13-01T00:00:00Z",
        "9:00 Mars/Olympus",
    ],
)
def test_bad_times(text: str) -> None:
    with pytest.raises(BadInput, match=r"^bad time") as caught:
        when(text, BERLIN)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "1969-12-31T00:00Z"]
)
def test_out_of_range_times(text: str) -> None:
    with pytest.raises(BadInput, match="out of range"):
        when(text, BERLIN)


def _total(text: str) -> None:
    try:
        assert 0 <= when(text, BERLIN) <= 253402300799 * SECOND
    except BadInput as e:
        assert "\n" not in str(e)


@pytest.mark.slow
@given(st.text(max_size=24))
def test_the_parser_never_crashes(text: str) -> None:
    _total(text)


@given(st.text(alphabet="0123456789 :.-+/,apmnowdaysuectbhxy", max_size=20))
def test_the_parser_never_crashes_on_near_misses(text: str) -> None:
    _total(text)


@given(st.integers(min_value=0, max_value=253402300799 * SECOND))
def test_iso_round_trip(instant: int) -> None:
    iso = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=instant)).isoformat()
    assert parse_when(iso, 0) == instant


@given(
    st.integers(min_value=86400 * SECOND, max_value=253402300799 * SECOND - 86400 * SECOND),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_offsets_name_the_same_instant(instant: int, minutes: int) -> None:
    tz = timezone(timedelta(minutes=minutes))
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=instant)
    assert parse_when(dt.astimezone(tz).isoformat(), 0) == instant


# -- properties over many nows and zones ------------------------------------------

nows = st.integers(min_value=946_684_800 * SECOND, max_value=4_102_444_800 * SECOND)
zones = st.sampled_from(ZONES)


@given(nows, zones, st.integers(0, 23), st.integers(0, 59))
def test_a_clock_time_is_the_next_such_wall_time(
    now: int, zone: ZoneInfo, hh: int, mm: int
) -> None:
    try:
        got = parse_when(f"{hh}:{mm:02d}", now, zone)
    except BadInput as e:  # only a time that summer time skips or repeats
        assert "DST" in str(e)
        return
    shown = datetime.fromtimestamp(got / SECOND, zone)
    assert (shown.hour, shown.minute, shown.second) == (hh, mm, 0)
    minute = now - now % (60 * SECOND)
    assert minute < got <= now + 26 * 3600 * SECOND  # after this minute, within a day or so
    local = datetime.fromtimestamp(now / SECOND, zone)
    passed = (hh, mm) <= (local.hour, local.minute)
    assert shown.date() == local.date() + timedelta(days=int(passed))


@given(nows, zones, st.integers(0, 23), st.integers(1, 30))
def test_time_plus_days_is_that_wall_time_n_days_on(
    now: int, zone: ZoneInfo, hh: int, n: int
) -> None:
    local = datetime.fromtimestamp(now / SECOND, zone)
    target = datetime.combine(local.date() + timedelta(days=n), time(hh), tzinfo=zone)
    try:
        got = parse_when(f"{hh}:00 + {n} days", now, zone)
    except BadInput as e:
        assert "DST" in str(e)
        return
    assert got == us(target)
