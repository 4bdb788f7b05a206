"""The daemon's loop driven one step at a time, in-process, on a real spool, `now` injected.

Daemon.step is one turn of the loop without its sleep, as huey's
consumer loop(now) is: a test can drive it and look at the spool between
turns. Its attempts are real child processes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taskq.client import request
from taskq.client.submit import submit
from taskq.daemon import wakeplan
from taskq.daemon.loop import Daemon
from taskq.daemon.settings import Settings
from taskq.schedules import materialise
from taskq.schedules.slots import Spec
from taskq.schedules.store import Schedule, Store
from taskq.spool import byid, journal, transitions
from taskq.spool.layout import Spool
from taskq.spool.states import Phase, State
from taskq.spool.task import Request, TaskName
from taskq.times.clock import wall_us
from taskq.times.timespec import HOUR, MS, SECOND


def test_steps_start_what_is_due_settle_it_and_never_start_early(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    daemon = Daemon(spool, Settings(host_id="unit", workers=2))
    now = wall_us()
    try:
        daemon.parts.health.lock(now)  # as run() does: a daemon steps holding its lock
        due = submit(spool, request.body(Request(run_at=now - SECOND, cwd="/"), ["true"], now))[0]
        later = submit(spool, request.body(Request(run_at=now + HOUR, cwd="/"), ["true"], now))[0]
        daemon.step(now)
        assert daemon.inhand.asking()  # asked of the keeper; the next step hears it first
        daemon.inhand.hear()
        assert [run.body.id for run in daemon.parts.attempts.all()] == [due.id]
        assert byid.locate(spool, later.id).state == State.PENDING
        deadline = time.monotonic() + 60
        while byid.locate(spool, due.id).state != State.DONE:  # the attempt's end, as it comes
            assert time.monotonic() < deadline, "the attempt did not end"
            daemon.parts.wake.wait(0.05)
            daemon.step()
        events = [r["event"] for r in journal.read(spool.log_dir(due.id))]
        assert events == ["start", "end"]
        # A step told it is two hours later claims the later task and makes its
        # start durable, but leaves its start to the clock: it is not started.
        daemon.step(now + 2 * HOUR)
        [ready] = daemon.inhand.prepared
        assert ready.claim.task.id == later.id and ready.claim.phase == Phase.STARTED
        assert daemon.parts.attempts.all() == []
        assert journal.read(spool.log_dir(later.id)) == []
    finally:
        daemon.parts.attempts.close()  # its keeper, started by the first spawn


def test_a_slow_disk_claim_lead_never_beats_the_overlap_judgment(tmp_path: Path) -> None:
    """A 1 s --overlap queue schedule whose previous occurrence runs, on a daemon whose
    commits took 500 ms (so it claims a second ahead, past the half-second guard): the
    slot's task is queued behind the running one, not claimed to run beside it."""
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    now = wall_us()
    slot = (now // SECOND + 30) * SECOND
    store = Store(spool)
    template = request.body(Request(run_at=slot, cwd="/"), ["true"], now)
    spec = Spec(cron=None, every=SECOND, tz="UTC", anchor=slot - HOUR)
    sched = Schedule("q", spec, "skip", "queue", 0, template, now, slot - 3 * SECOND)
    store.create(sched, replace_it=False)
    materialise.advance(materialise.Pass(store, slot - 3 * SECOND // 2, frozenset()), sched)
    previous = TaskName.parse(str(store.state("q", sched.since).cursor_task))
    path = spool.pending_path(previous)
    transitions.claim(spool, path, previous, transitions.DaemonId("other", 1), now + HOUR)
    daemon = Daemon(spool, Settings(host_id="unit", workers=2))
    try:
        daemon.parts.health.lock(now)
        daemon.parts.commit.times.append(500 * MS)  # its lead is now a second
        for at in (slot - SECOND + 50 * MS, slot - SECOND // 2 + 50 * MS):
            daemon.step(at)
        state = store.state("q", sched.since)
        assert state.held is not None, [e["event"] for e in store.history("q")]
        held = TaskName.parse(state.held)
        assert held.run_at == materialise.HELD_AT
        assert byid.locate(spool, held.id).state == State.PENDING
        assert "queued" in [e["event"] for e in store.history("q")]
    finally:
        daemon.parts.attempts.close()


def _locked_daemon(tmp_path: Path) -> tuple[Spool, Daemon, int]:
    """A one-worker daemon on a fresh spool, holding its lock as run() does; and now."""
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    daemon = Daemon(spool, Settings(host_id="unit", workers=1))
    now = wall_us()
    daemon.parts.health.lock(now)
    return spool, daemon, now


def test_an_attempt_asked_of_the_keeper_counts_against_the_workers(tmp_path: Path) -> None:
    """Handed to the keeper at the end of a turn, an attempt is neither prepared nor
    running until its answer is heard in the next: it must hold its worker meanwhile."""
    spool, daemon, now = _locked_daemon(tmp_path)
    try:
        run_at = now + 2 * SECOND
        prepared = submit(spool, request.body(Request(run_at=run_at, cwd="/"), ["true"], now))[0]
        daemon.step(run_at - 10 * MS)  # claimed and committed ahead; the clock says not yet
        assert [p.claim.task.id for p in daemon.inhand.prepared] == [prepared.id]
        while not daemon.clock.may_start(run_at, daemon.clock.now()):
            time.sleep(0.05)
        daemon.step()  # asks the keeper at its end; the answer is heard next turn
        assert daemon.inhand.asking() and not daemon.inhand.prepared
        assert daemon.inhand.free() == 0
        assert prepared.id in daemon.inhand.ids()  # a recovery scan must not take it back
    finally:
        daemon.parts.attempts.close()


def test_timed_chores_wait_for_a_prepared_attempts_hand_off_but_not_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock measurement, renewal or rescan falling due while an attempt is prepared would
    delay its hand-off to the keeper: it waits, at most CHORE_HOLD, and the loop sleeps
    meanwhile (a held timer that read as due would spin it). The hold is made 10 s here,
    so that a loaded machine's slow step does not outlast it."""
    hold = 10 * SECOND
    monkeypatch.setattr(wakeplan, "CHORE_HOLD", hold)
    spool, daemon, now = _locked_daemon(tmp_path)
    try:
        run_at = now + 60 * SECOND  # its hand-off is far off, whatever the machine's load
        submit(spool, request.body(Request(run_at=run_at, cwd="/"), ["true"], now))
        daemon.step(run_at - 10 * MS)  # claimed and committed ahead; the clock says not yet
        assert daemon.inhand.prepared
        plan, guard, mono = daemon.plan, daemon.parts.guard, daemon.clock.mono()
        plan.next["renew"] = plan.next["rescan"] = guard.next_check = mono
        assert not plan.due(mono)
        daemon.step()
        assert guard.next_check == mono, "the clock was measured before the hand-off"
        assert plan.next["renew"] == mono, "the claims were renewed before the hand-off"
        assert 0 < plan.timeout(None, False) <= hold / SECOND
        overdue = daemon.clock.mono() - hold - 1
        plan.next["renew"] = plan.next["rescan"] = guard.next_check = overdue
        assert plan.due(overdue)  # held no longer than CHORE_HOLD
        daemon.step()
        assert guard.next_check > overdue and plan.next["renew"] > overdue
        daemon.inhand.prepared.clear()
        assert plan.due(daemon.clock.mono())  # nothing prepared: nothing is held
    finally:
        daemon.parts.attempts.close()
