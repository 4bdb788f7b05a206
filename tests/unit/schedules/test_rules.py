"""Several expressions and exclusions (rules.py), and the new fields of a schedule's files
read as hostile input: whatever they hold, a CorruptFile or a schedule, never a crash."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import CorruptFile
from taskq.schedules.rules import Rules
from taskq.schedules.slots import Spec, check_cron
from taskq.schedules.store import Cursor, Schedule
from taskq.spool.task import TaskBody, new_id
from taskq.times.timespec import MINUTE, datetime_to_us, format_iso


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return datetime_to_us(datetime(year, month, day, hour, minute, tzinfo=UTC))


def cron(expr: str, tz: str = "UTC") -> Spec:
    return Spec(cron=check_cron(expr), every=None, tz=tz, anchor=0)


def test_the_union_runs_a_shared_slot_once() -> None:
    rules = Rules((cron("*/2 * * * *"), cron("*/3 * * * *")))
    slots = rules.upcoming(utc(2026, 1, 1) - 1, 6)
    assert [(s - utc(2026, 1, 1)) // MINUTE for s in slots] == [0, 2, 3, 4, 6, 8]
    found, count = rules.between(utc(2026, 1, 1) - 1, utc(2026, 1, 1, 0, 12), 3)
    assert count == 9 and [(s - utc(2026, 1, 1)) // MINUTE for s in found] == [9, 10, 12]


def test_exclusions_take_slots_out() -> None:
    rules = Rules(
        (cron("0 9 * * *", "Europe/Berlin"),),
        excluded=(cron("* * * * 0,6", "Europe/Berlin"),),  # weekends
        dates=frozenset({"2026-12-02"}),
    )
    days = [datetime.fromtimestamp(s / 1e6, UTC).date().isoformat() for s in
            rules.upcoming(utc(2026, 11, 30, 12), 5)]  # fmt: skip
    assert days == ["2026-12-01", "2026-12-03", "2026-12-04", "2026-12-07", "2026-12-08"]
    assert rules.after(utc(2026, 12, 1, 9)) == utc(2026, 12, 3, 8)  # 09:00 CET is 08:00Z


def test_one_expression_is_exactly_slots_answer() -> None:
    spec = cron("30 2 * * *", "Europe/Berlin")
    rules = Rules((spec,))
    t = utc(2026, 3, 27)
    assert rules.upcoming(t, 4) == spec.upcoming(t, 4)
    assert rules.between(t, t + 5 * 24 * 60 * MINUTE, 2) == spec.between(
        t, t + 5 * 24 * 60 * MINUTE, 2
    )


def _schedule_doc() -> dict[str, Any]:
    body = TaskBody(id=new_id(0), argv=["true"], submitted_at=0, run_at=0, cwd="/", env={})
    sched = Schedule(
        name="s",
        spec=cron("0 9 * * *"),
        catchup="latest",
        overlap="replace",
        jitter=0,
        task=body,
        created=0,
        since=0,
        also=("0 11 * * 0",),
        except_cron=("* * 25 12 *",),
        except_dates=("2026-12-24",),
        pause_after=3,
        skip_before=utc(2026, 12, 1),
    )
    doc: dict[str, Any] = json.loads(sched.to_json())
    return doc


def test_a_schedule_with_every_new_field_reads_back() -> None:
    doc = _schedule_doc()
    back = Schedule.from_json(json.dumps(doc).encode())
    assert back.crons == ["0 9 * * *", "0 11 * * 0"] and back.overlap == "replace"
    assert back.except_dates == ("2026-12-24",) and back.pause_after == 3
    assert back.skip_before == utc(2026, 12, 1)
    state = Cursor(cursor=5, live=[new_id(0)], failures=2, skipped={"skip": 3}, missed=1)
    assert Cursor.from_json(state.to_json()) == state


NEW_FIELDS = ("cron", "every_after", "except_cron", "except", "skip_before",
              "pause_after_failures", "overlap")  # fmt: skip
STATE_FIELDS = ("live", "failures", "last_end", "last_success", "auto_paused", "missed", "skipped")
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=70) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=80,
)


@settings(max_examples=100, deadline=None)  # 300 took a loaded CI worker 80 s
@given(field=st.sampled_from(NEW_FIELDS), value=JUNK)
def test_a_hostile_schedule_field_is_corrupt_or_valid(field: str, value: object) -> None:
    doc = _schedule_doc()
    doc[field] = value
    try:
        Schedule.from_json(json.dumps(doc).encode())
    except CorruptFile:
        pass


@settings(max_examples=100, deadline=None)  # 300 took a loaded CI worker 80 s
@given(field=st.sampled_from(STATE_FIELDS), value=JUNK)
def test_a_hostile_state_field_is_corrupt_or_valid(field: str, value: object) -> None:
    doc = json.loads(Cursor(cursor=0).to_json())
    doc[field] = value
    try:
        Cursor.from_json(json.dumps(doc).encode())
    except CorruptFile:
        pass


def test_cursor_text_is_iso() -> None:
    assert json.loads(Cursor(cursor=utc(2026, 1, 1)).to_json())["cursor"] == format_iso(
        utc(2026, 1, 1)
    )
