"""The daemon's parts, each without a daemon loop, on a real spool with an injected clock.

The parts are made by build_parts, as the daemon makes its own.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from taskq.client.submit import submit
from taskq.daemon import clusterlimits
from taskq.daemon.attempts import Attempts, Running
from taskq.daemon.clockguard import ClockGuard
from taskq.daemon.commit import PREPARE_LEAD, GroupCommit
from taskq.daemon.confinement import Confinement
from taskq.daemon.dispatch import QueueCaps
from taskq.daemon.loadgate import LOAD_READ, LoadGate
from taskq.daemon.settings import Settings
from taskq.daemon.wakeups import Wakeups
from taskq.daemon.wiring import build_parts
from taskq.spool import fsutil, journal, permits, transitions, walk
from taskq.spool.layout import Spool
from taskq.spool.states import Phase, State
from taskq.spool.task import DEFAULT_PATH, ClaimName, TaskBody, TaskName, new_id
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock
from taskq.times.timespec import MS, SECOND

T0 = 1_800_000_000 * SECOND


class Hands:
    """Clocks the test moves: wall and monotonic, in µs."""

    def __init__(self) -> None:
        self.wall = T0
        self.mono = 5 * SECOND

    def tick(self, us: int) -> None:
        self.wall += us
        self.mono += us


class Parts:
    """A spool and the daemon's parts, made and wired by build_parts as the daemon's are."""

    def __init__(
        self, root: Path, host: str = "h1", pid: int = 4242, limits: dict[str, int] | None = None
    ) -> None:
        self.spool = Spool(str(root))
        self.spool.init()
        self.t = Hands()
        self.clock = Clock(1 * MS, 2 * SECOND, wall=lambda: self.t.wall, mono=lambda: self.t.mono)
        self.clock.set_offset(0)
        self.daemon = DaemonId(host, pid)
        settings = Settings(
            host_id=host, lease=10 * SECOND, kill_grace=2 * SECOND, queue_limits=limits or {}
        )
        built = build_parts(self.spool, settings, self.clock, self.daemon)
        self.commit, self.settler, self.dispatcher = built.commit, built.settler, built.dispatcher
        self.attempts, self.recovery, self.limits = built.attempts, built.recovery, built.limits
        self.requeued: list[TaskName] = []  # what the settler handed back to the due index
        into_index = self.settler.requeued

        def requeued(name: TaskName) -> None:
            self.requeued.append(name)
            into_index(name)

        self.settler.requeued = requeued

    def add(
        self,
        run_at: int,
        queue: str = "default",
        argv: tuple[str, ...] = ("true",),
        mutex: str | None = None,
    ) -> str:
        body = TaskBody(
            id=new_id(T0),
            argv=list(argv),
            run_at=run_at,
            submitted_at=T0,
            queue=queue,
            env={"PATH": DEFAULT_PATH},
            mutex=mutex,
        )
        return submit(self.spool, body)[0].id

    def claims(self) -> list[ClaimName]:
        return [ClaimName.parse(e) for e in sorted(os.listdir(self.spool.claimed))]


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    return Parts(tmp_path / "spool")


def test_dispatch_claims_only_what_is_due_and_what_workers_can_take(parts: Parts) -> None:
    due = [parts.add(T0 - i) for i in range(5)]
    parts.add(T0 + 10 * SECOND)
    parts.dispatcher.rescan(parts.clock.now())
    ready = parts.dispatcher.claim_due(parts.clock.now(), 3, QueueCaps({}, 8, []))
    assert len(ready) == 3 and {r.claim.task.id for r in ready} <= set(due)
    assert all(c.phase == "started" for c in parts.claims())
    assert parts.commit.touched  # the claims and starts await one group commit
    more = parts.dispatcher.claim_due(parts.clock.now(), 10, QueueCaps({}, 8, []))
    assert len(more) == 2  # the future task stays pending


def test_dispatch_waits_out_a_forward_step_of_the_wall_clock(parts: Parts) -> None:
    parts.add(T0 + 3 * SECOND)
    parts.dispatcher.rescan(parts.clock.now())
    parts.t.wall += 6 * SECOND  # the wall clock steps; the reference has not moved
    assert parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, [])) == []
    parts.t.tick(3 * SECOND)
    assert len(parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, []))) == 1


def test_dispatch_claims_within_the_commit_lead(parts: Parts) -> None:
    parts.add(T0 + PREPARE_LEAD // 2)
    parts.add(T0 + 10 * PREPARE_LEAD)
    parts.dispatcher.rescan(parts.clock.now())
    ready = parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, []))
    assert [r.claim.task.run_at for r in ready] == [T0 + PREPARE_LEAD // 2]


def test_queue_caps_hold_across_one_dispatch(parts: Parts) -> None:
    for _ in range(4):
        parts.add(T0 - 1, queue="slow")
        parts.add(T0 - 1, queue="fast")
    parts.dispatcher.rescan(parts.clock.now())
    caps = QueueCaps({"slow": 1}, 8, ["slow"])  # one slow attempt already runs
    ready = parts.dispatcher.claim_due(parts.clock.now(), 8, caps)
    assert sorted(r.body.queue for r in ready) == ["fast"] * 4


def test_the_load_gate_holds_a_batch_queue_and_starts_one_per_interval(parts: Parts) -> None:
    for _ in range(3):
        parts.add(T0 - 1, queue="batch")
        parts.add(T0 - 1, queue="default")
    parts.dispatcher.rescan(parts.clock.now())
    load = [2.0]
    gate = LoadGate({"batch": 1.5}, 60 * SECOND, lambda: load[0], parts.clock.mono)
    ready = parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, [], gate=gate))
    assert sorted(r.body.queue for r in ready) == ["default"] * 3  # the load is too high
    assert gate.wake_at() == parts.clock.mono() + LOAD_READ
    load[0] = 0.3
    parts.t.tick(LOAD_READ)
    ready = parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, [], gate=gate))
    assert [r.body.queue for r in ready] == ["batch"]  # one, then the interval
    parts.t.tick(SECOND)  # the start comes a second after the claim: the interval counts from it
    gate.started(r.body.queue for r in ready)
    parts.t.tick(60 * SECOND - 1)
    assert parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, [], gate=gate)) == []
    parts.t.tick(1)
    ready = parts.dispatcher.claim_due(parts.clock.now(), 8, QueueCaps({}, 8, [], gate=gate))
    assert [r.body.queue for r in ready] == ["batch"]


def test_bad_names_are_quarantined_and_strays_ignored(parts: Parts) -> None:
    parts.add(T0 - 1)
    bucket = Path(parts.spool.pending) / TaskName(T0 - 1, new_id(T0), 1).bucket
    (bucket / "junk").write_text("x")
    (bucket / ".nfs0000000000001").write_text("x")
    parts.dispatcher.rescan(parts.clock.now())
    assert sorted(os.listdir(bucket)) == [".nfs0000000000001"] + [
        e for e in os.listdir(bucket) if e.startswith("2")
    ]
    assert any(e.endswith("junk") for e in os.listdir(parts.spool.corrupt))


def settle_one(parts: Parts, code: int | None, attempt_budget: int = 3) -> ClaimName:
    parts.add(T0 - 1)
    parts.dispatcher.rescan(parts.clock.now())
    [ready] = parts.dispatcher.claim_due(parts.clock.now(), 1, QueueCaps({}, 8, []))
    run = Running(ready.claim, ready.body, None, parts.clock.mono())
    parts.settler.ended(run, code, parts.clock.now(), 0.1)
    return ready.claim


def test_settle_success_retry_and_lost(parts: Parts) -> None:
    held = settle_one(parts, 0)
    assert os.listdir(parts.spool.claimed) == []
    assert len(list(walk.tasks(parts.spool, (State.DONE,)))) == 1
    held = settle_one(parts, 3)
    [retry] = parts.requeued
    assert retry.attempt == 2 and retry.id == held.task.id
    assert T0 + 5 * SECOND <= retry.run_at <= T0 + 10 * SECOND  # the first backoff, jittered
    settle_one(parts, None)
    assert parts.requeued[-1].run_at == parts.clock.now()  # lost, not failed: at once


def test_a_cancel_that_races_the_end_of_an_attempt_wins(parts: Parts) -> None:
    parts.add(T0 - 1)
    parts.dispatcher.rescan(parts.clock.now())
    [ready] = parts.dispatcher.claim_due(parts.clock.now(), 1, QueueCaps({}, 8, []))
    transitions.request_cancel(parts.spool, ready.claim)  # `taskq cancel`, meanwhile
    run = Running(ready.claim, ready.body, None, parts.clock.mono())
    parts.settler.ended(run, 0, parts.clock.now(), 0.1)
    assert [f.state for f in walk.tasks(parts.spool)] == ["cancelled"]
    events = [r["event"] for r in journal.read(parts.spool.log_dir(ready.body.id))]
    assert events[-2:] == ["end", "cancelled"]


def test_recovery_takes_over_only_expired_leases_by_the_reference_clock(
    tmp_path: Path,
) -> None:
    a = Parts(tmp_path / "spool", host="a")
    a.add(T0 - 1)
    a.dispatcher.rescan(a.clock.now())
    a.dispatcher.claim_due(a.clock.now(), 1, QueueCaps({}, 8, []))
    # Host b shares the spool; its wall clock is 6 s ahead of the reference.
    b = Parts(tmp_path / "spool", host="b")
    b.t.wall += 6 * SECOND
    b.clock.set_offset(6 * SECOND)  # as b's probe against the spool would find
    b.t.tick(9 * SECOND)  # by b's clock the 10 s lease has passed; by the reference not
    b.recovery.scan(b.clock.now(), b.clock.mono(), True, set())
    assert [c.host for c in a.claims()] == ["a"]
    b.t.tick(2 * SECOND)
    b.recovery.scan(b.clock.now(), b.clock.mono(), True, set())
    assert b.claims() == []  # taken over; its attempt never spawned, so released
    [found] = list(walk.tasks(b.spool, (State.PENDING,)))
    events = [r["event"] for r in journal.read(b.spool.log_dir(found.name.id))]
    assert events[-2:] == ["taken-over", "released"]


def test_a_stale_probe_stamp_never_lets_another_daemon_take_a_running_attempt(
    tmp_path: Path,
) -> None:
    a = Parts(tmp_path / "spool", host="a", limits={"reports": 1})
    a.add(T0 - 1, queue="reports")
    a.dispatcher.rescan(a.clock.now())
    [ready] = a.dispatcher.claim_due(a.clock.now(), 1, QueueCaps({}, 8, []))
    child = os.posix_spawn("/bin/sleep", ["sleep", "60"], os.environ)
    try:
        a.attempts.add_child(Running(ready.claim, ready.body, child, a.clock.mono()))
        # a's probe reads the stamp of an earlier write (a loaded FUSE client): a seems
        # 10 s ahead of the spool's clock, stops dispatching, and renews its leases.
        a.clock.set_offset(10 * SECOND)
        a.t.tick(3 * SECOND)
        a.recovery.renew(a.clock.now(), a.clock.mono())
        assert a.limits.renew(a.clock.now()) == []
        # b, on the same clock and measured right, judges them a moment later.
        b = Parts(tmp_path / "spool", host="b", limits={"reports": 1})
        b.t.tick(a.t.wall - b.t.wall + 10 * MS)
        b.limits.reclaim(b.clock.now(), True)
        b.recovery.scan(b.clock.now(), b.clock.mono(), True, set())
        assert [c.host for c in a.claims()] == ["a"]
        assert [h.lease.host for h in permits.holdings(a.spool)] == ["a"]
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def _two_waiting(tmp_path: Path) -> tuple[Parts, Parts, tuple[str, str]]:
    """Daemon a ran the first of three tasks of mutex db; b found it busy for v and w.

    The first's attempt has ended, so the mutex is free and v, w hold tickets.
    """
    a = Parts(tmp_path / "spool", host="a")
    first, v, w = (a.add(T0 - 3 + i, mutex="db") for i in range(3))
    a.dispatcher.rescan(a.clock.now())
    claimed = a.dispatcher.claim_due(a.clock.now(), 1, QueueCaps({}, 8, []))
    assert [r.body.id for r in claimed] == [first]
    b = Parts(tmp_path / "spool", host="b")
    b.dispatcher.rescan(b.clock.now())
    assert b.dispatcher.claim_due(b.clock.now(), 8, QueueCaps({}, 8, [])) == []  # v, w wait
    a.limits.release(first)  # its attempt ended: the mutex is free
    return a, b, (v, w)


def test_a_mutex_waiter_claimed_while_its_ticket_is_judged_keeps_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, (v, _) = _two_waiting(tmp_path)
    [v_name] = [f.name for f in walk.tasks(a.spool, (State.PENDING,)) if f.name.id == v]
    pending = a.spool.pending_path(v_name)
    lexists = os.path.lexists
    third = DaemonId("c", 7)
    held: list[ClaimName] = []

    listed: list[TaskName | None] = []  # the oldest ticket at every look at claimed/ or pending/
    listdir = fsutil.listdir

    def racing(path: str) -> bool:
        # Daemon c claims v between b's look at claimed/ and its look at pending/.
        if path == pending and not held:
            held.append(transitions.claim(b.spool, path, v_name, third, T0 + 10 * SECOND))
        listed.append(permits.listing(b.spool).oldest_waiting("db"))
        return lexists(path)

    def looking(path: str, follow: bool = False) -> list[str]:
        if path == b.spool.claimed:
            listed.append(permits.listing(b.spool).oldest_waiting("db"))
        return listdir(path, follow)

    monkeypatch.setattr(os.path, "lexists", racing)
    monkeypatch.setattr(fsutil, "listdir", looking)
    b.limits.look(b.clock.now())
    monkeypatch.setattr(os.path, "lexists", lexists)
    monkeypatch.setattr(fsutil, "listdir", listdir)
    assert held, "the race was not run"
    assert listed and set(listed) == {v_name}, "v's ticket was gone while it moved"
    transitions.release(b.spool, held[0])  # c listed the mutex as held: v waits again
    assert permits.listing(b.spool).oldest_waiting("db") == v_name  # not w's


def test_a_mutex_ticket_whose_task_is_gone_is_dropped_after_two_looks_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, (v, w) = _two_waiting(tmp_path)
    [v_file] = [f for f in walk.tasks(a.spool, (State.PENDING,)) if f.name.id == v]
    os.unlink(v_file.path)  # removed by hand while it waited: its ticket waits for nothing
    clock = [100.0]
    monkeypatch.setattr(clusterlimits, "_clock", lambda: clock[0])
    oldest = [t.task.id for t in permits.listing(b.spool).tickets]
    assert oldest == [v, w]
    b.limits.look(b.clock.now())
    clock[0] += clusterlimits.STALE_TICKET - 0.1
    b.limits.look(b.clock.now())
    assert [t.task.id for t in permits.listing(b.spool).tickets] == [v, w]  # only suspected
    clock[0] += 0.1
    b.limits.look(b.clock.now())
    assert [t.task.id for t in permits.listing(b.spool).tickets] == [w]
    assert b.limits.view.oldest_waiting("db") is not None  # w's, in the view b claims by


def test_attempts_time_out_with_term_then_kill(tmp_path: Path) -> None:
    t = Hands()
    attempts = Attempts(
        2 * SECOND, lambda fd, key: None, lambda fd: None, Confinement("none", "h_1", lambda: 0)
    )
    ready = tmp_path / "ready"
    script = f"trap '' TERM; touch {ready}; exec sleep 60"  # deaf to TERM: only KILL ends it
    child = os.posix_spawn("/bin/sh", ["sh", "-c", script], os.environ, setsid=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    body = TaskBody(id=new_id(T0), argv=["x"], run_at=T0, submitted_at=T0, timeout=1 * SECOND)
    claim = ClaimName(TaskName(T0, body.id, 1), Phase.STARTED, T0, 1, "h")
    run = Running(claim, body, child, t.mono)
    attempts.add_child(run)
    attempts.enforce_timeouts(t.mono + SECOND // 2)
    assert run.term_sent is None
    attempts.enforce_timeouts(t.mono + SECOND)
    assert run.term_sent == t.mono + SECOND and not run.killed
    assert attempts.deadlines() == [t.mono + 3 * SECOND]
    attempts.enforce_timeouts(t.mono + 3 * SECOND)
    assert run.killed
    deadline = time.monotonic() + 30
    ended: list[tuple[Running, int]] = []
    while not ended and time.monotonic() < deadline:
        ended = attempts.reap()
        time.sleep(0.01)
    assert ended == [(run, -signal.SIGKILL)]


def test_commit_lead_grows_with_slow_commits(tmp_path: Path) -> None:
    t = Hands()
    commit = GroupCommit(lambda: t.mono)
    assert commit.lead() == PREPARE_LEAD
    commit.times.append(300 * MS)
    assert commit.lead() == 600 * MS
    commit.times.append(5 * SECOND)
    assert commit.lead() == SECOND


def test_wakeups_poll_sees_another_hosts_ring(tmp_path: Path) -> None:
    bell = tmp_path / "doorbell"
    bell.touch()
    t = Hands()
    wake = Wakeups(str(bell), 250 * MS, lambda: t.mono)
    assert wake.wait(0) == (False, [])  # the first poll only learns the stamp
    os.utime(bell, ns=(1, 1))  # a ring through another mount: no inotify here
    assert wake.wait(0) == (False, [])  # not yet time to poll
    t.tick(250 * MS)
    assert wake.wait(0) == (True, [])


def test_clock_guard_measures_again_after_a_step_and_rearms_after_mono_goes_back(
    tmp_path: Path,
) -> None:
    t = Hands()
    t.wall = Clock().now()  # the probe's stamps are real: keep our wall clock near them
    clock = Clock(1 * MS, 2 * SECOND, wall=lambda: t.wall, mono=lambda: t.mono)
    seen: list[bool] = []
    guard = ClockGuard(clock, str(tmp_path / "probe"), 10 * SECOND, 2 * SECOND, seen.append)
    guard.check()
    assert guard.ok and seen == [False]
    t.tick(1 * SECOND)
    assert guard.guard() is False and seen == [False]  # not due, no step: nothing measured
    t.wall += 6 * SECOND  # a step: measured at once, and 6 s is too uncertain
    guard.guard()
    assert len(seen) == 2 and not guard.ok and "exceeds --max-uncertainty" in str(guard.problem)
    t.wall -= 6 * SECOND  # put right again: the next check (every second now) trusts it
    t.mono += 1 * SECOND
    guard.guard()
    assert guard.ok and seen[-1] is True  # trust came back
    t.mono -= 30 * SECOND
    assert guard.guard() is True  # the monotonic clock went back: the loop re-arms


def test_a_daemon_that_never_saw_the_waiters_still_takes_a_mutex_for_the_oldest(
    tmp_path: Path,
) -> None:
    """Daemon c held no permit and saw no waiter, so its turns listed no permits: a claim of
    the later waiter w must still find v's older ticket, not c's empty view, and wait."""
    _, _, (v, w) = _two_waiting(tmp_path)
    c = Parts(tmp_path / "spool", host="c")
    c.limits.look(c.clock.now())  # nothing in play for c: its view may be its first
    [w_name] = [f.name for f in walk.tasks(c.spool, (State.PENDING,)) if f.name.id == w]
    held = transitions.claim(
        c.spool, c.spool.pending_path(w_name), w_name, DaemonId("c", 3), T0 + 10 * SECOND
    )
    body = c.spool.read_body(c.spool.claim_path(held))
    assert c.limits.acquire(held, body, c.clock.now()) == "waits for mutex db"
    assert permits.listing(c.spool).held == frozenset()  # the mutex stays free for v
    assert [t.task.id for t in permits.listing(c.spool).tickets] == [v, w]
