"""When schedules fire: DST in Europe/Berlin and America/New_York, month ends,
leap days, --every across DST; and the materialiser walked by an injected clock
over a real spool, making exactly the slots the calendar says, one ahead."""

from __future__ import annotations

import itertools
import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import BadInput
from taskq.schedules import materialise
from taskq.schedules.slots import Spec, check_cron, check_zone
from taskq.schedules.store import Schedule, Store
from taskq.spool.keys import key_path, read_key
from taskq.spool.layout import Spool
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
    # 01:45 CET (00:45Z); 02:00-02:45 do not exist -> once at 03:00 CEST (01:00Z).
    assert iso(spring) == [
        "2026-03-29T00:45",
        "2026-03-29T01:00",
        "2026-03-29T01:15",
        "2026-03-29T01:30",
    ]
    autumn = cron("*/15 * * * *", "Europe/Berlin").upcoming(utc(2026, 10, 25, 0, 30), 4)
    # 02:45 CEST (00:45Z); 03:00 CEST... is 02:00 CET: the repeated 02:xx do not run again.
    assert iso(autumn) == [
        "2026-10-25T00:45",
        "2026-10-25T02:00",
        "2026-10-25T02:15",
        "2026-10-25T02:30",
    ]


def test_a_walk_started_inside_the_repeated_hour_does_not_go_back() -> None:
    # 01:15Z is 02:15 CET, the second pass of 02:15: the next slot is 03:00 CET.
    slots = cron("*/15 * * * *", "Europe/Berlin").upcoming(utc(2026, 10, 25, 1, 15), 2)
    assert iso(slots) == ["2026-10-25T02:00", "2026-10-25T02:15"]


# -- America/New_York: EST -5, EDT -4; 2026-03-08 02:00 -> 03:00, 2026-11-01 02:00 -> 01:00


def test_new_york_spring_forward() -> None:
    slots = cron("*/30 * * * *", "America/New_York").upcoming(utc(2026, 3, 8, 6), 4)
    # 01:30 EST (06:30Z); 02:00 and 02:30 missing -> once at 03:00 EDT (07:00Z).
    assert iso(slots) == [
        "2026-03-08T06:30",
        "2026-03-08T07:00",
        "2026-03-08T07:30",
        "2026-03-08T08:00",
    ]
    daily = cron("30 2 * * *", "America/New_York").upcoming(utc(2026, 3, 7), 2)
    assert iso(daily) == ["2026-03-07T07:30", "2026-03-08T07:00"]


def test_new_york_fall_back() -> None:
    slots = cron("*/30 * * * *", "America/New_York").upcoming(utc(2026, 11, 1, 4, 45), 4)
    # 01:00 and 01:30 EDT (05:00Z, 05:30Z) run; their EST repeats do not; 02:00 EST.
    assert iso(slots) == [
        "2026-11-01T05:00",
        "2026-11-01T05:30",
        "2026-11-01T07:00",
        "2026-11-01T07:30",
    ]
    daily = cron("30 1 * * *", "America/New_York").upcoming(utc(2026, 10, 31), 3)
    assert iso(daily) == ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"]


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
    assert count == 5  # 23Z, 00Z, 01Z, 02Z, 03Z (02:00 local is missing: 03:00 at 01Z, once)
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
    sched = _schedule(store, spec, start)
    expected = spec.upcoming(start, 24)
    now = start
    while now <= expected[-2]:
        due = materialise.advance(materialise.Pass(store, now, frozenset()), sched)
        state = store.state("walk", start)
        assert state.cursor > now or state.cursor == now  # the next one exists ahead
        assert due is not None and due > now - SECOND
        now = max(due, now + 1)
    assert _made(spool, "walk", expected) == expected
    pending = [found.name.run_at for found in spool.iter_state("pending")]
    assert pending == expected  # one task per slot, at its slot


# -- properties ----------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]


@settings(max_examples=60, deadline=None)
@given(
    minute=st.sampled_from(["0", "30", "*/15", "5,45", "*"]),
    hour=st.sampled_from(["*", "1", "2", "1-3", "*/2"]),
    zone=st.sampled_from(ZONES),
    start=st.integers(utc(2026, 3, 1), utc(2026, 11, 30)),
)
def test_slots_increase_and_each_wall_time_runs_at_most_once(
    minute: str, hour: str, zone: str, start: int
) -> None:
    spec = cron(f"{minute} {hour} * * *", zone)
    slots = spec.upcoming(start, 40)
    assert slots and slots[0] > start
    assert all(a < b for a, b in itertools.pairwise(slots))
    tz = zoneinfo.ZoneInfo(zone)
    walls = [us_to_datetime(s).astimezone(tz).replace(tzinfo=None) for s in slots]
    probe = CronSim(f"{minute} {hour} * * *", walls[0] - timedelta(minutes=1))
    wanted = set()
    for wall in probe:
        if wall > walls[-1]:
            break
        wanted.add(wall)
    for slot, wall in zip(slots, walls, strict=True):
        # on its wall time, or the end of a gap that swallowed a wanted time
        before = us_to_datetime(slot - 1).astimezone(tz).replace(tzinfo=None)
        assert wall in wanted or before + timedelta(microseconds=1) < wall
    assert len(set(walls)) == len(walls)  # a repeated wall time runs once


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
    for found in spool.iter_state("pending"):
        body = spool.read_body(found.path)
        nominal = parse_when(body.env["TASKQ_SCHEDULED_AT"], 0)
        assert nominal <= found.name.run_at < nominal + 30 * SECOND
        assert body.key == f"j@{format_iso(nominal)}"
