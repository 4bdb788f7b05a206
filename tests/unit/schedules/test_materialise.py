"""Materialising schedules in-process, on a real spool, with `now` injected."""

from __future__ import annotations

from pathlib import Path

from taskq.client.request import Request
from taskq.client.submit import submit
from taskq.schedules import materialise
from taskq.schedules.slots import Spec
from taskq.schedules.store import Schedule, Store
from taskq.spool import byid, journal
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName
from taskq.times.timespec import HOUR, SECOND

T0 = 1_800_000_000 * SECOND  # on the hour


def _store(root: Path, now: int) -> tuple[Store, Schedule]:
    spool = Spool(str(root))
    spool.init()
    store = Store(spool)
    template = Request(run_at=now, cwd="/").body(["true"], now)
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
    body = Request(run_at=now, cwd="/", after=[occurrence]).body(["true"], now)
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
