"""When schedules fire: DST in Europe/Berlin and America/New_York, month ends,
leap days, --every across DST; and the materialiser walked by an injected clock
over a real spool, making exactly the slots the calendar says, one ahead."""

from __future__ import annotations

import itertools
import re
import zoneinfo
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import BadInput
from taskq.schedules import materialise
from taskq.schedules.slots import Spec, check_cron, check_zone
from taskq.schedules.store import Schedule, Store
from taskq.spool import walk
from taskq.spool.keys import key_path, read_key
from taskq.spool.layout import Spool
from taskq.spool.states import State
from taskq.spool.task import TaskBody, new_id
from taskq.times.timespec import (
    HOUR,
    MINUTE,
    SECOND,
    datetime_to_us,
    format_iso,
    us_to_datetime,
)
from taskq.times.when import parse_when

HOUR_DELTA = timedelta(hours=1)
DAY_US = 86400 * 1_000_000


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return datetime_to_us(datetime(year, month, day, hour, minute, second, tzinfo=UTC))


def iso(us: list[int]) -> list[str]:
    return [format_iso(u)[:16] for u in us]


def cron(expr: str, tz: str) -> Spec:
    return Spec(cron=check_cron(expr), every=None, tz=tz, anchor=0)


# -- Europe/Berlin: CET +1, CEST +2; 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00


def test_berlin_spring_forward_runs_a_missing_time_once_after_the_gap() -> None:
    slots = cron("30 2 * * *", "Europe/Berlin").upcoming(utc(2026, 3, 27, 12), 3)
    # 02:30 CET; 02:30 does not exist on the 29th: 03:00 CEST (01:00Z); 02:30 CEST.
    assert iso(slots) == ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"]


def test_berlin_fall_back_runs_a_repeated_time_once_at_its_first_occurrence() -> None:
    slots = cron("30 2 * * *", "Europe/Berlin").upcoming(utc(2026, 10, 23, 12), 3)
    # 02:30 occurs at 00:30Z (CEST) and 01:30Z (CET) on the 25th: only the first.
    assert iso(slots) == ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"]


def test_berlin_every_quarter_hour_through_both_changes() -> None:
    spring = cron("*/15 * * * *", "Europe/Berlin").upcoming(utc(2026, 3, 29, 0, 30), 4)
    # 01:45 CET (00:45Z); 02:00-02:45 do not exist, and a wildcard job skips them;
    # 03:00 CEST (01:00Z) is its own slot.
    assert iso(spring) == [
        "2026-03-29T00:45",
        "2026-03-29T01:00",
        "2026-03-29T01:15",
        "2026-03-29T01:30",
    ]
    autumn = cron("*/15 * * * *", "Europe/Berlin").upcoming(utc(2026, 10, 25, 0, 30), 6)
    # 02:45 CEST (00:45Z); then 02:00 CET (01:00Z): a wildcard job runs the
    # repeated hour again, as cron(8) runs it "based on the new time".
    assert iso(autumn) == [
        "2026-10-25T00:45",
        "2026-10-25T01:00",
        "2026-10-25T01:15",
        "2026-10-25T01:30",
        "2026-10-25T01:45",
        "2026-10-25T02:00",
    ]


def test_a_walk_started_inside_the_repeated_hour_does_not_go_back() -> None:
    # 01:15Z is 02:15 CET, the second pass of 02:15: the next slot is 02:30 CET.
    slots = cron("*/15 * * * *", "Europe/Berlin").upcoming(utc(2026, 10, 25, 1, 15), 2)
    assert iso(slots) == ["2026-10-25T01:30", "2026-10-25T01:45"]
    # From the first pass (00:20Z, 02:20 CEST), the second pass is still to come.
    slots = cron("*/15 * * * *", "Europe/Berlin").upcoming(utc(2026, 10, 25, 0, 20), 5)
    assert iso(slots) == [
        "2026-10-25T00:30",
        "2026-10-25T00:45",
        "2026-10-25T01:00",
        "2026-10-25T01:15",
        "2026-10-25T01:30",
    ]


# -- America/New_York: EST -5, EDT -4; 2026-03-08 02:00 -> 03:00, 2026-11-01 02:00 -> 01:00


def test_new_york_spring_forward() -> None:
    slots = cron("*/30 * * * *", "America/New_York").upcoming(utc(2026, 3, 8, 6), 4)
    # 01:30 EST (06:30Z); 02:00 and 02:30 do not exist, and a wildcard job skips
    # them; 03:00 EDT (07:00Z) is its own slot.
    assert iso(slots) == [
        "2026-03-08T06:30",
        "2026-03-08T07:00",
        "2026-03-08T07:30",
        "2026-03-08T08:00",
    ]
    daily = cron("30 2 * * *", "America/New_York").upcoming(utc(2026, 3, 7), 2)
    assert iso(daily) == ["2026-03-07T07:30", "2026-03-08T07:00"]


def test_new_york_fall_back() -> None:
    slots = cron("*/30 * * * *", "America/New_York").upcoming(utc(2026, 11, 1, 4, 45), 5)
    # 01:00 and 01:30 EDT (05:00Z, 05:30Z), then again in EST (06:00Z, 06:30Z): a
    # wildcard job runs in every real hour; 02:00 EST (07:00Z).
    assert iso(slots) == [
        "2026-11-01T05:00",
        "2026-11-01T05:30",
        "2026-11-01T06:00",
        "2026-11-01T06:30",
        "2026-11-01T07:00",
    ]
    daily = cron("30 1 * * *", "America/New_York").upcoming(utc(2026, 10, 31), 3)
    assert iso(daily) == ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"]


# -- cron(8)'s rules, against an oracle that reads every minute's wall time ----


def _field(text: str, lo: int, hi: int) -> set[int]:
    """The values of one cron field (numbers, *, ranges, steps, lists)."""
    out: set[int] = set()
    for part in text.split(","):
        body, _, step = part.partition("/")
        first, last = (
            (lo, hi) if body == "*" else (int(body.split("-")[0]), int(body.split("-")[-1]))
        )
        out.update(range(first, last + 1, int(step or 1)))
    return out


def _offset_us(aware: datetime) -> int:
    offset = aware.utcoffset()
    assert offset is not None
    return offset // timedelta(microseconds=1)


class Oracle:
    """Slots by cron(8)'s rules, from zoneinfo alone: walk every minute, read its wall time.

    The day fields AND when either starts with '*', else OR (Vixie cron's
    DOM_STAR/DOW_STAR). A wildcard job ('*' first in its minute or hour
    field) runs at every instant whose wall time matches; a fixed-time job
    at the first instant of each matching wall time, or at the end of the
    gap that swallowed it, once per instant.
    """

    def __init__(self, expr: str) -> None:
        expr = {"@hourly": "0 * * * *", "@daily": "0 0 * * *"}.get(expr, expr)
        minute, hour, dom, month, dow = expr.split()
        self.minutes, self.hours = _field(minute, 0, 59), _field(hour, 0, 23)
        self.doms, self.months = _field(dom, 1, 31), _field(month, 1, 12)
        self.dows = {d % 7 for d in _field(dow, 0, 7)}
        self.day_and = dom.startswith("*") or dow.startswith("*")
        self.wild = minute.startswith("*") or hour.startswith("*")

    def matches(self, wall: datetime) -> bool:
        dom, dow = wall.day in self.doms, wall.isoweekday() % 7 in self.dows
        day = (dom and dow) if self.day_and else (dom or dow)
        clock = wall.minute in self.minutes and wall.hour in self.hours and wall.second == 0
        return clock and wall.month in self.months and day

    def slots(self, zone: str, lo: int, hi: int) -> list[int]:
        tz = zoneinfo.ZoneInfo(zone)

        def wall(i: int) -> datetime:
            return datetime.fromtimestamp(i // SECOND, tz).replace(tzinfo=None)

        # Every UTC offset the zone shows near the window, read hour by hour.
        offsets = {
            _offset_us(datetime.fromtimestamp(i // SECOND, tz))
            for i in range(lo - DAY_US, hi + DAY_US, HOUR)
        }
        found: set[int] = set()
        day = wall(lo).date() - timedelta(days=1)
        while day <= wall(hi).date() + timedelta(days=1):
            for hour, minute in itertools.product(sorted(self.hours), sorted(self.minutes)):
                naive = datetime(day.year, day.month, day.day, hour, minute)
                if not self.matches(naive):
                    continue
                as_utc = utc(naive.year, naive.month, naive.day, naive.hour, naive.minute)
                real = sorted(as_utc - off for off in offsets if wall(as_utc - off) == naive)
                if self.wild:
                    found.update(real)
                elif real:
                    found.add(real[0])
                else:  # in a gap: the first minute whose wall time is past it
                    i = as_utc - max(offsets)
                    while wall(i) <= naive:
                        i += MINUTE
                    found.add(i)
            day += timedelta(days=1)
        return sorted(i for i in found if lo < i <= hi)


@pytest.mark.parametrize(
    ("expr", "rule"),
    [
        ("0 0 */2 * 1", "and"),  # a day field that starts with '*': both must match
        ("0 0 * * 1", "and"),
        ("0 0 1-7 * *", "and"),
        ("0 0 1,15 * 1", "or"),  # both restricted: either may match
        ("0 0 13 * 5", "or"),
        ("0 12 1-7 * 0", "or"),
    ],
)
def test_7_the_day_fields_and_or_rule(expr: str, rule: str) -> None:
    lo, hi = utc(2026, 1, 1), utc(2026, 7, 1)
    kept, _ = cron(expr, "UTC").between(lo, hi, 10_000)
    assert kept == Oracle(expr).slots("UTC", lo, hi)
    days = {us_to_datetime(s).date() for s in kept}
    dom_days = {d for d in days if d.day in Oracle(expr).doms}
    dow_days = {d for d in days if d.isoweekday() % 7 in Oracle(expr).dows}
    if rule == "and":
        assert dom_days == dow_days == days
    else:
        assert dom_days | dow_days == days and dom_days != days and dow_days != days


def test_7_every_other_day_that_is_a_monday() -> None:
    # Vixie cron: '*/2' makes the day-of-month test part of an AND: odd days that are Mondays.
    slots = cron("0 0 */2 * 1", "UTC").upcoming(utc(2026, 1, 1), 4)
    assert iso(slots) == [
        "2026-01-05T00:00",
        "2026-01-19T00:00",
        "2026-02-09T00:00",
        "2026-02-23T00:00",
    ]
    either = cron("0 0 1,15 * 1", "UTC").upcoming(utc(2026, 1, 1), 4)
    assert iso(either) == [
        "2026-01-05T00:00",
        "2026-01-12T00:00",
        "2026-01-15T00:00",
        "2026-01-19T00:00",
    ]


WILDCARD = ["30 * * * *", "*/15 * * * *", "0 * * * *", "@hourly", "*/15 1-3 * * *", "* 2 * * *"]
FIXED = ["30 2 * * *", "0 2 * * *", "15,45 1-3 * * *", "0 0-5 * * *", "@daily"]
CHANGE_DAYS = [
    ("Europe/Berlin", date(2027, 3, 28)),
    ("Europe/Berlin", date(2026, 10, 25)),
    ("America/New_York", date(2026, 3, 8)),
    ("America/New_York", date(2026, 11, 1)),
    ("Australia/Lord_Howe", date(2026, 10, 4)),
    ("Australia/Lord_Howe", date(2026, 4, 5)),
]


@pytest.mark.parametrize(("zone", "day"), CHANGE_DAYS)
@pytest.mark.parametrize("expr", WILDCARD + FIXED)
def test_8_9_each_change_runs_as_cron_8_says(expr: str, zone: str, day: date) -> None:
    lo = utc(day.year, day.month, day.day) - 14 * HOUR
    hi = lo + 40 * HOUR
    kept, count = cron(expr, zone).between(lo, hi, 10_000)
    assert kept == Oracle(expr).slots(zone, lo, hi)
    assert count == len(kept)
    assert cron(expr, zone).upcoming(lo, count) == kept


def test_8_a_wildcard_hour_skips_the_spring_gap() -> None:
    # Berlin, 2027-03-28: 02:00 CET becomes 03:00 CEST. 02:30 does not exist;
    # there is no extra run at 03:00 for it, only 03:30's own.
    slots = cron("30 * * * *", "Europe/Berlin").upcoming(utc(2027, 3, 27, 23), 4)
    assert iso(slots) == [
        "2027-03-27T23:30",  # 00:30 CET
        "2027-03-28T00:30",  # 01:30 CET
        "2027-03-28T01:30",  # 03:30 CEST
        "2027-03-28T02:30",  # 04:30 CEST
    ]
    fixed = cron("30 2 * * *", "Europe/Berlin").upcoming(utc(2027, 3, 27, 12), 2)
    assert iso(fixed) == ["2027-03-28T01:00", "2027-03-29T00:30"]  # at 03:00 CEST, once


@pytest.mark.parametrize("expr", ["*/15 * * * *", "0 * * * *", "@hourly", "*/15 1-3 * * *"])
def test_9_a_wildcard_job_runs_in_both_passes_of_the_repeated_hour(expr: str) -> None:
    # Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:xx happens twice.
    kept, _ = cron(expr, "Europe/Berlin").between(
        utc(2026, 10, 24, 23, 59), utc(2026, 10, 25, 2), 99
    )
    tz = zoneinfo.ZoneInfo("Europe/Berlin")
    second_pass = [s for s in kept if us_to_datetime(s).astimezone(tz).utcoffset() == HOUR_DELTA]
    assert second_pass, "the second 02:00-02:59 must run"
    gaps = [b - a for a, b in itertools.pairwise(kept)]
    assert max(gaps) <= HOUR  # never an hour without a run


def test_9_a_fixed_time_that_repeats_still_runs_once() -> None:
    slots = cron("30 2 * * *", "Europe/Berlin").upcoming(utc(2026, 10, 24, 12), 2)
    assert iso(slots) == ["2026-10-25T00:30", "2026-10-26T01:30"]  # 02:30 CEST only
    quarter = cron("15,45 2 * * *", "Europe/Berlin").between(
        utc(2026, 10, 24, 23), utc(2026, 10, 25, 3), 99
    )[0]
    assert iso(quarter) == ["2026-10-25T00:15", "2026-10-25T00:45"]


# -- calendar ----------------------------------------------------------------


def test_month_ends() -> None:
    thirty_first = cron("0 0 31 * *", "UTC").upcoming(utc(2026, 1, 1), 4)
    assert iso(thirty_first) == [
        "2026-01-31T00:00",
        "2026-03-31T00:00",
        "2026-05-31T00:00",
        "2026-07-31T00:00",
    ]
    last = cron("0 0 L * *", "UTC").upcoming(utc(2026, 1, 31, 1), 2)
    assert iso(last) == ["2026-02-28T00:00", "2026-03-31T00:00"]


def test_leap_days() -> None:
    slots = cron("0 12 29 2 *", "Europe/Berlin").upcoming(utc(2026, 1, 1), 2)
    assert iso(slots) == ["2028-02-29T11:00", "2032-02-29T11:00"]
    last_of_feb = cron("0 0 L 2 *", "UTC").upcoming(utc(2027, 3, 1), 2)
    assert iso(last_of_feb) == ["2028-02-29T00:00", "2029-02-28T00:00"]


def test_every_is_an_exact_interval_across_dst() -> None:
    anchor = utc(2026, 3, 28, 23, 17, 5)
    spec = Spec(cron=None, every=HOUR, tz="Europe/Berlin", anchor=anchor)
    slots = spec.upcoming(utc(2026, 3, 29), 6)
    assert [b - a for a, b in itertools.pairwise(slots)] == [HOUR] * 5
    assert all((s - anchor) % HOUR == 0 for s in slots)
    autumn = spec.upcoming(utc(2026, 10, 25), 6)
    assert [b - a for a, b in itertools.pairwise(autumn)] == [HOUR] * 5


def test_start_and_end_bound_the_slots() -> None:
    spec = Spec(
        cron=None,
        every=MINUTE,
        tz="UTC",
        anchor=utc(2026, 1, 1),
        start=utc(2026, 1, 1, 0, 10),
        end=utc(2026, 1, 1, 0, 12),
    )
    assert iso(spec.upcoming(utc(2025, 1, 1), 5)) == [
        "2026-01-01T00:10",
        "2026-01-01T00:11",
        "2026-01-01T00:12",
    ]


def test_between_counts_and_keeps_the_latest() -> None:
    spec = cron("0 * * * *", "Europe/Berlin")
    kept, count = spec.between(utc(2026, 3, 28, 22), utc(2026, 3, 29, 3, 30), 2)
    assert count == 5  # 23Z, 00Z, 01Z, 02Z, 03Z (02:00 local does not exist and does not run)
    assert iso(kept) == ["2026-03-29T02:00", "2026-03-29T03:00"]
    every = Spec(cron=None, every=SECOND, tz="UTC", anchor=0)
    kept, count = every.between(10 * SECOND, 20 * SECOND, 3)
    assert (kept, count) == ([18 * SECOND, 19 * SECOND, 20 * SECOND], 10)


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("61 * * * *", "minute"),
        ("0 24 * * *", "hour"),
        ("0 0 32 * *", "day-of-month"),
        ("0 0 * 13 *", "month"),
        ("0 0 * * 9", "day-of-week"),
    ],
)
def test_a_bad_expression_names_its_field(expr: str, field: str) -> None:
    with pytest.raises(BadInput, match=re.escape(f"bad --cron '{expr}': bad {field} field")):
        check_cron(expr)


def test_aliases_and_wrong_field_counts() -> None:
    assert check_cron("@hourly") == "0 * * * *"
    assert check_cron("@daily") == "0 0 * * *"
    with pytest.raises(BadInput, match="expected 5 fields"):
        check_cron("0 0 * * * *")
    with pytest.raises(BadInput, match="not an IANA time zone"):
        check_zone("Mars/Olympus")


# -- the materialiser, walked by an injected clock -----------------------------


def _schedule(store: Store, spec: Spec, now: int, **kw: object) -> Schedule:
    task = TaskBody(id=new_id(now), argv=["true"], run_at=now, submitted_at=now, cwd="/")
    sched = Schedule(
        name="walk",
        spec=spec,
        catchup=str(kw.get("catchup", "latest")),
        overlap=str(kw.get("overlap", "skip")),
        jitter=0,
        task=task,
        created=now,
        since=now,
    )
    store.create(sched, False)
    return sched


def _made(spool: Spool, name: str, slots: list[int]) -> list[int]:
    out = []
    for slot in slots:
        path = key_path(spool, f"{name}@{format_iso(slot)}")
        try:
            read_key(path)
        except FileNotFoundError:
            continue
        out.append(slot)
    return out


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York"])
def test_a_clock_walked_through_dst_makes_each_slot_once_and_one_ahead(
    tmp_path: Path, tz: str
) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    store = Store(spool)
    start = (utc(2026, 10, 24, 20) if tz == "Europe/Berlin" else utc(2026, 10, 31, 23)) + SECOND
    spec = cron("*/30 * * * *", tz)
    # Nothing claims here, so every occurrence stays pending; under the default
    # skip a due one still pending runs yet (overlap would skip the next).
    sched = _schedule(store, spec, start, overlap="allow")
    expected = spec.upcoming(start, 24)
    now = start
    while now <= expected[-2]:
        due = materialise.advance(materialise.Pass(store, now, frozenset()), sched)
        state = store.state("walk", start)
        assert state.cursor > now or state.cursor == now  # the next one exists ahead
        assert due is not None and due > now - SECOND
        now = max(due, now + 1)
    assert _made(spool, "walk", expected) == expected
    pending = [found.name.run_at for found in walk.tasks(spool, (State.PENDING,))]
    assert pending == expected  # one task per slot, at its slot


# -- properties ----------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]
# Days with a clock change in one of ZONES (2026-2027), and a day with none.
CHANGES = [
    date(2026, 3, 8),  # New York forward
    date(2026, 3, 29),  # Berlin forward
    date(2026, 4, 5),  # Lord Howe back 30 minutes
    date(2026, 10, 4),  # Lord Howe forward 30 minutes
    date(2026, 10, 25),  # Berlin back
    date(2026, 11, 1),  # New York back
    date(2027, 3, 28),  # Berlin forward
    date(2026, 7, 1),
]


@settings(max_examples=40, deadline=None)
@given(
    minute=st.sampled_from(["0", "30", "*/15", "5,45", "*"]),
    hour=st.sampled_from(["*", "1", "2", "1-3", "*/2"]),
    zone=st.sampled_from(ZONES),
    change=st.sampled_from(CHANGES),
    offset=st.integers(-2 * 86400, 86400),
)
def test_slots_are_what_cron_8_s_rule_says_around_every_change(
    minute: str, hour: str, zone: str, change: date, offset: int
) -> None:
    expr = f"{minute} {hour} * * *"
    lo = utc(change.year, change.month, change.day) + offset * SECOND
    hi = lo + 2 * 86400 * SECOND
    kept, count = cron(expr, zone).between(lo, hi, 10_000)
    assert kept == Oracle(expr).slots(zone, lo, hi)
    assert count == len(kept)
    assert cron(expr, zone).upcoming(lo, len(kept)) == kept


def test_jitter_delays_the_run_never_the_slot(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    store = Store(spool)
    now = utc(2026, 6, 1) + 1
    spec = Spec(cron=None, every=MINUTE, tz="UTC", anchor=utc(2026, 6, 1))
    task = TaskBody(id=new_id(now), argv=["true"], run_at=now, submitted_at=now, cwd="/")
    sched = Schedule("j", spec, "latest", "skip", 30 * SECOND, task, now, now)
    store.create(sched, False)
    for slot in spec.upcoming(now, 20):
        materialise.advance(materialise.Pass(store, slot, frozenset()), sched)
    for found in walk.tasks(spool, (State.PENDING,)):
        body = spool.read_body(found.path)
        nominal = parse_when(body.env["TASKQ_SCHEDULED_AT"], 0)
        assert nominal <= found.name.run_at < nominal + 30 * SECOND
        assert body.key == f"j@{format_iso(nominal)}"
