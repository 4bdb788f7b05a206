"""Materialising schedules in-process, on a real spool, with `now` injected."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from taskq.client import operations, request
from taskq.client.submit import submit
from taskq.schedules import materialise
from taskq.schedules.slots import Spec
from taskq.schedules.store import Schedule, Store
from taskq.spool import byid, journal, transitions
from taskq.spool.layout import Spool
from taskq.spool.task import ClaimName, Request, TaskName
from taskq.times.timespec import HOUR, MAX_INSTANT, SECOND

T0 = 1_800_000_000 * SECOND  # on the hour


def _store(root: Path, now: int) -> tuple[Store, Schedule]:
    spool = Spool(str(root))
    spool.init()
    store = Store(spool)
    template = request.body(Request(run_at=now, cwd="/"), ["true"], now)
    sched = Schedule(
        name="hourly",
        spec=Spec(cron=None, every=HOUR, tz="UTC", anchor=T0),
        catchup="skip",
        overlap="skip",
        jitter=0,
        task=template,
        created=now,
        since=now,
    )
    store.create(sched, replace_it=False)
    return store, sched


def test_a_dependent_of_an_occurrence_skipped_while_paused_is_cancelled(tmp_path: Path) -> None:
    now = T0 + SECOND
    store, sched = _store(tmp_path / "spool", now)
    materialise.advance(materialise.Pass(store, now, frozenset()), sched)
    cursor = store.state(sched.name, sched.since).cursor_task
    assert cursor is not None
    occurrence = TaskName.parse(cursor).id
    body = request.body(Request(run_at=now, cwd="/", after=[occurrence]), ["true"], now)
    dependent = submit(store.spool, body)[0].id
    assert byid.locate(store.spool, dependent).state == "waiting"
    paused = store.with_paused(sched.name, True, now)
    slot = T0 + HOUR
    materialise.advance(materialise.Pass(store, slot - SECOND // 2, frozenset()), paused)
    assert byid.locate(store.spool, occurrence).state == "cancelled"
    assert byid.locate(store.spool, dependent).state == "cancelled"
    records = journal.read(store.spool.log_dir(dependent))
    assert [r["reason"] for r in records if r["event"] == "cancelled"] == [
        f"dependency {occurrence} cancelled"
    ]


def _claim(store: Store, name: str, now: int) -> ClaimName:
    """Claim a pending occurrence as a daemon would (pending -> claimed/, under a lease)."""
    task = TaskName.parse(name)
    path = os.path.join(store.spool.bucket_dir(task.bucket), name)
    return transitions.claim(store.spool, path, task, transitions.DaemonId("h1", 1), now + HOUR)


def _running_slot(tmp_path: Path) -> tuple[Store, Schedule, str, str]:
    """An hourly replace schedule: the first slot's task claimed (running), the next one made."""
    store, sched = _store(tmp_path / "spool", T0 + SECOND)
    sched = dataclasses.replace(sched, overlap="replace")
    store.create(sched, replace_it=True)
    materialise.advance(materialise.Pass(store, T0 + SECOND, frozenset()), sched)
    first = store.state(sched.name, sched.since).cursor_task
    assert first is not None
    transitions.start(store.spool, _claim(store, first, T0 + HOUR))
    running = frozenset({TaskName.parse(first).id})
    materialise.advance(materialise.Pass(store, T0 + HOUR, running), sched)
    nxt = store.state(sched.name, sched.since).cursor_task
    assert nxt is not None and nxt != first
    return store, sched, first, nxt


def test_overlap_is_judged_before_any_claim_can_lead_the_slot() -> None:
    """A second more than a claim may lead; half of intervals shorter than 4 s."""
    template = request.body(Request(run_at=T0, cwd="/"), ["true"], T0)
    for every, ahead in ((HOUR, 2 * SECOND), (2 * SECOND, SECOND), (SECOND, SECOND // 2)):
        spec = Spec(cron=None, every=every, tz="UTC", anchor=T0)
        sched = Schedule("s", spec, "skip", "replace", 0, template, T0, T0)
        assert materialise.guard(sched) == ahead
    assert 2 * SECOND == transitions.CLAIM_LEAD_MAX + SECOND


def test_a_replacing_slot_claimed_first_stops_the_running_one_at_once(tmp_path: Path) -> None:
    store, sched, first, nxt = _running_slot(tmp_path)
    _claim(store, nxt, T0 + 2 * HOUR - SECOND)  # a daemon claimed it before the (late) pass
    ids = frozenset({TaskName.parse(first).id, TaskName.parse(nxt).id})
    materialise.advance(materialise.Pass(store, T0 + 2 * HOUR - SECOND // 2, ids), sched)
    events = [e for e in store.history(sched.name) if e["event"] in ("replacing", "stopped")]
    assert [(e["event"], e.get("claimed"), e.get("task")) for e in events] == [
        ("replacing", True, None),
        ("stopped", None, TaskName.parse(first).id),
    ]
    assert byid.locate(store.spool, TaskName.parse(first).id).state == "cancelling"


def test_a_hold_another_pass_made_first_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another daemon's pass holds the slot's task between this pass's look and its move."""
    store, sched, first, nxt = _running_slot(tmp_path)
    before = store.state(sched.name, sched.since)
    looked = materialise._pending

    def look_then_lose(p: materialise.Pass, name: str) -> tuple[TaskName, str] | None:
        found = looked(p, name)
        if name == nxt and found is not None:  # the other pass moves it now
            operations.reschedule(store.spool, TaskName.parse(nxt).id, MAX_INSTANT)
        return found

    monkeypatch.setattr(materialise, "_pending", look_then_lose)
    ids = frozenset({TaskName.parse(first).id})
    p = materialise.Pass(store, T0 + 2 * HOUR - SECOND, ids)
    assert materialise.advance(p, sched) is not None  # no FileExistsError out of the pass
    assert store.state(sched.name, sched.since) == before  # lost: its state left to the winner


def test_a_previous_occurrence_due_but_not_yet_claimed_counts_as_running(tmp_path: Path) -> None:
    """A daemon that comes up late judges the next slot before its first claim: the
    previous occurrence, due and pending, is claimed first and runs, so it overlaps."""
    store, sched = _store(tmp_path / "spool", T0)
    spec = Spec(cron=None, every=SECOND, tz="UTC", anchor=T0)
    sched = dataclasses.replace(sched, spec=spec)
    store.create(sched, replace_it=True)
    materialise.advance(materialise.Pass(store, T0 + SECOND // 10, frozenset()), sched)
    first = store.state(sched.name, sched.since).cursor_task
    assert first is not None and TaskName.parse(first).run_at == T0 + SECOND
    late = T0 + SECOND + 6 * SECOND // 10  # the first is due, unclaimed; the next is judged
    materialise.advance(materialise.Pass(store, late, frozenset()), sched)
    skipped = [e for e in store.history(sched.name) if e.get("why") == "overlap"]
    assert [e["behind"] for e in skipped] == [TaskName.parse(first).id]
    assert byid.locate(store.spool, TaskName.parse(first).id).state == "pending"
