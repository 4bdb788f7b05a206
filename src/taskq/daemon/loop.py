"""The daemon's loop: wake, settle finished attempts, keep claims, dispatch, start, sleep.

Everything in memory (the due index, the running attempts) is a cache of the
spool that start-up rebuilds; the spool is the record. Each part owns one
job: Wakeups (signals, the doorbell), Clock (now, and how far to trust it),
Health (lock, status record, sd_notify), Pickup (a shared spool's drop:
members' submissions and requests taken in), Dispatcher (due index, claim and
prepare), Attempts (children and adopted orphans), Recovery (leases,
takeover, adoption), Settler (moving a claim where policy says), GroupCommit
(fsync what an iteration touched), Housekeeper (tmp/ and retention, in a
thread) and Metrics with its Exporter (figures for Prometheus; the spool is
counted off the loop). wiring.build_parts makes the parts and wires them
together; the daemon holds them (it is composed of them, not one of them)
and only orders them: one step(now) of the loop settles, keeps claims,
finds and starts due work; run() repeats it, sleeping in between. The
loop's own state is composed the same way: InHand (inhand.py) holds the
attempts prepared and running, WakePlan (wakeplan.py) its timers and how
long it may sleep, and lifecycle.running starts and stops the parts.
Transitions of one step are made durable together before any attempt
they concern is started.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from taskq.daemon.attempts import POLL_ADOPTED
from taskq.daemon.inhand import InHand
from taskq.daemon.lifecycle import running
from taskq.daemon.settings import Settings
from taskq.daemon.wakeplan import NEVER, WakePlan
from taskq.daemon.wiring import build_parts
from taskq.observe.snapshot import Snapshot
from taskq.spool.faults import crash_point
from taskq.spool.layout import Spool
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock
from taskq.times.timespec import SECOND, format_duration

log = logging.getLogger("taskq")


class Daemon:
    """One scheduler and worker pool over one spool: the loop that orders its parts."""

    def __init__(
        self,
        spool: Spool,
        settings: Settings,
        clock: Clock | None = None,
        on_hup: Callable[[], None] = lambda: None,
    ) -> None:
        self.spool = spool
        self.cfg = settings
        self.on_hup = on_hup
        self.clock = clock or Clock(settings.clock_margin, settings.max_uncertainty)
        self.daemon_id = DaemonId(settings.host_id, os.getpid())
        self.parts = build_parts(spool, settings, self.clock, self.daemon_id, self._measured)
        self.inhand = InHand(self.parts, settings, self.clock)
        self.plan = WakePlan(self.parts, self.clock, self.inhand)
        self.stopping = False
        self.stop_deadline = NEVER
        self.shared = spool.shared()  # members submit through drop/ (pickup.py)
        self.rescan_wanted = True
        self.exit_status = 0
        self.bell_rang = False
        self.intake_left = False  # a pass of the pickup stopped at its budget

    # -- life cycle -------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT and the shutdown grace; return an exit status."""
        with running(self.spool, self.parts, self.clock):
            log.info(
                "taskq daemon %s started on %s: %d workers, lease %s",
                self.daemon_id.host,
                self.spool.root,
                self.cfg.workers,
                format_duration(self.cfg.lease),
            )
            self.parts.attempts.confinement.tell()
            while not self._should_exit():
                self._guarded_iteration()
        log.info(
            "taskq daemon stopped; %d attempt(s) left running for the next daemon; "
            "claims %d won, %d lost",
            len(self.parts.attempts),
            self.parts.dispatcher.won,
            self.parts.dispatcher.lost,
        )
        return self.exit_status

    def _should_exit(self) -> bool:
        if self.parts.wake.stop_requested and not self.stopping:
            self.stopping = True
            self.stop_deadline = self.clock.mono() + self.cfg.shutdown_grace
        if not self.stopping or self.inhand.prepared or self.inhand.asking():
            return False
        return not self.parts.attempts or self.clock.mono() >= self.stop_deadline

    def _guarded_iteration(self) -> None:
        """Run one iteration; on an I/O error, log it, pause and rebuild from the spool.

        Whatever an interrupted iteration left half done is in the spool under
        our own name, and the recovery pass that the next rescan runs settles it.
        """
        try:
            self.step()
            self._sleep()
        except (OSError, MemoryError) as e:  # (a file's own trouble is the poison guard's)
            log.error("spool error, retrying in 1s: %s", e or type(e).__name__)
            self.inhand.prepared.clear()
            self.plan.next["rescan"] = self.plan.next["renew"] = 0
            time.sleep(1)

    # -- the loop ---------------------------------------------------------

    def step(self, now: int | None = None) -> None:
        """One turn of the loop, without its sleep: settle, keep claims, find, commit, start.

        `now` is the wall instant the turn decides by (default: the clock's,
        read after the clock guard has measured it if due); the starts
        themselves wait for the clock, so no task starts before its run_at
        whatever `now` says.
        """
        if self.parts.wake.hup:
            self.parts.wake.hup = False
            self.on_hup()
        self.parts.commit.review()
        read = self._guard_clock()
        now = read if now is None else now
        self.inhand.hear()
        self._settle_finished(now)
        self._keep_claims(now)
        rang = self.bell_rang
        if not self.stopping:
            schedules, lead = self.parts.schedules, self.parts.commit.lead()
            if not schedules.passed or schedules.judging(now, lead):
                self._pass_schedules(now, rang)  # catch-up and overlap decide before a claim
            self._find_due_work(now)
        self.parts.commit.commit()
        self.parts.aftermath.committed()
        self.inhand.start()
        if not self.stopping:
            self._take_in(self.clock.now(), rang)  # after the starts a flood of files could delay
            self._pass_schedules(self.clock.now(), rang)  # after the starts it could delay
        snap, mono = self._snapshot(), self.clock.mono()
        self.parts.health.tell_systemd(snap, mono, self.cfg.workers)
        self.parts.metrics.looped(snap, spool_full=mono < self.parts.starter.full_until)

    def _guard_clock(self) -> int:
        """Read now, after measuring the clock again if it is time or the wall clock stepped."""
        if self.parts.guard.guard(self.plan.due):
            self.plan.rearm()  # the monotonic clock went back
        return self.clock.now()

    def _settle_finished(self, now: int) -> None:
        """Record the attempts that ended and move their tasks on."""
        mono = self.clock.mono()
        for run, code in self.parts.attempts.reap():
            crash_point("daemon.reaped")
            path = self.spool.claim_path(run.claim)
            with self.parts.poison.handling("task", run.body.id, path, "settle"):
                self.parts.settler.ended(run, code, now, (mono - run.started_mono) / SECOND)
            self.parts.limits.release(run.body.id)
        if mono >= self.plan.next["poll"]:
            for run in self.parts.attempts.polled():
                self.parts.recovery.settle_adopted(run.body.id, now)
        self.plan.next["poll"] = mono + POLL_ADOPTED if self.parts.attempts.polled() else NEVER
        self.parts.attempts.enforce_timeouts(mono)

    def _keep_claims(self, now: int) -> None:
        """Renew our leases every third of a lease, and take back abandoned claims."""
        mono = self.clock.mono()
        if self.bell_rang:  # a cancel may have renamed a claim of ours
            self.parts.recovery.check_claims(now, mono)
        if not self.plan.due(self.plan.next["renew"]):
            return
        self.plan.next["renew"] = mono + self.cfg.lease // 3
        self.parts.recovery.renew(now, mono)
        self.parts.attempts.keeper.check(mono)
        self.parts.recovery.permits_lost(self.parts.limits.renew(now), mono)
        self.parts.recovery.scan(now, mono, self.parts.guard.ok, self.inhand.ids())
        self.parts.limits.sweep(self.inhand.ids())
        self.parts.limits.reclaim(now, self.parts.guard.ok)

    def _take_in(self, now: int, rang: bool) -> None:
        """Pick up members' drop files (a shared spool) when woken for them, or as a safety net."""
        mono = self.clock.mono()
        if not (rang or self.intake_left or mono >= self.plan.next["pickup"]):
            return
        if mono >= self.plan.next["pickup"]:
            self.plan.next["pickup"] = mono + self.cfg.rescan
            self.shared = self.spool.shared()  # (a spool made shared while we run)
        if not self.shared:
            return
        took = self.parts.pickup.run(now)
        self.intake_left = took.more
        if took.filed:
            self.rescan_wanted = True  # due now: claimed in the next turn, at once

    def _find_due_work(self, now: int) -> None:
        """Rescan when asked (doorbell, safety net, index drained), then claim due tasks."""
        mono = self.clock.mono()
        index, timers = self.parts.dispatcher.index, self.plan.next
        drained = not index and index.more_beyond
        if self.rescan_wanted or self.bell_rang or drained or self.plan.due(timers["rescan"]):
            self.rescan_wanted = self.bell_rang = False
            timers["rescan"] = mono + self.cfg.rescan
            self.parts.dispatcher.rescan(now)
            if index.horizon is not None:  # load the next bucket before its tasks can be due
                lead = self.parts.commit.lead()
                load_at = self.clock.earliest_start(index.horizon) - lead - SECOND
                timers["rescan"] = min(timers["rescan"], mono + max(load_at - now, SECOND))
        if not self.parts.guard.ok or mono < self.parts.starter.full_until or self.clock.stepped():
            return
        self.inhand.claim(now)

    def _pass_schedules(self, now: int, rang: bool) -> None:
        """Keep every schedule's next occurrence made; only on a trusted clock."""
        if self.parts.guard.ok:
            lead = self.parts.commit.lead()
            self.parts.schedules.tick(now, rang, busy=bool(self.inhand.prepared), lead=lead)

    # -- the clock and health -----------------------------------------------

    def _measured(self, regained: bool) -> None:
        """After each clock measurement: our lock kept, a rescan if wanted, the health record."""
        if regained or (self.parts.health.lock_lost() and self._lock_again()):
            self.rescan_wanted = True
        self.parts.health.write(self._snapshot(), self.clock.now())

    def _lock_again(self) -> bool:
        """Our lock is gone: stop if the spool is gone too, else make its layout and lock anew."""
        if not os.path.isdir(self.spool.root):
            log.error("the spool %s is gone: stopping", self.spool.root)
            self.parts.wake.stop_requested, self.exit_status = True, 1
            return False
        daemon = self.parts.health.daemon
        log.warning("run/%s.lock is gone (the spool made anew?): locking again", daemon)
        self.spool.init()
        self.parts.health.relock()
        self.parts.wake.rewatch()
        return True

    def _snapshot(self) -> Snapshot:
        return Snapshot(
            dispatching=self.parts.guard.ok and not self.stopping,
            reason="stopping" if self.stopping else self.parts.guard.problem,
            stopping=self.stopping,
            uncertainty=self.clock.uncertainty(),
            offset=self.clock.offset,
            busy=len(self.parts.attempts),
            due_soon=len(self.parts.dispatcher.index),
            claims_won=self.parts.dispatcher.won,
            claims_lost=self.parts.dispatcher.lost,
        )

    # -- sleeping -----------------------------------------------------------

    def _sleep(self) -> None:
        stop_deadline = self.stop_deadline if self.stopping else None
        timeout = self.plan.timeout(stop_deadline, self.intake_left or self.rescan_wanted)
        rang, ready = self.parts.wake.wait(timeout)
        self.bell_rang = self.bell_rang or rang
        for key in ready:  # pidfds of adopted attempts that ended
            if isinstance(key, tuple) and key[0] == "adopted":
                self.parts.recovery.settle_adopted(key[1], self.clock.now())
