"""The daemon's loop: wake, settle finished attempts, keep claims, dispatch, start, sleep.

Everything in memory (the due index, the running attempts) is a cache of the
spool that start-up rebuilds; the spool is the record. Each part owns one
job: Wakeups (signals, the doorbell), Clock (now, and how far to trust it),
Health (lock, status record, sd_notify), Dispatcher (due index, claim and
prepare), Attempts (children and adopted orphans), Recovery (leases,
takeover, adoption), Settler (moving a claim where policy says), GroupCommit
(fsync what an iteration touched) and Housekeeper (tmp/ and retention, in a
thread). The loop below only orders them. Transitions of one iteration are
made durable together before any attempt they concern is started.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from taskq import config, fsutil, journal, runner, transitions
from taskq.attempts import Attempts, Prepared, Running
from taskq.clock import Clock
from taskq.commit import GroupCommit
from taskq.dispatch import Dispatcher, QueueCaps
from taskq.faults import crash_point
from taskq.health import Health, Snapshot
from taskq.housekeeping import Housekeeper
from taskq.policy import Backoff
from taskq.recovery import Recovery
from taskq.settings import Settings
from taskq.settle import Settler
from taskq.spool import Spool
from taskq.task import TaskName
from taskq.timespec import MS, SECOND, format_duration, format_iso
from taskq.transitions import Owner
from taskq.wakeups import Wakeups

log = logging.getLogger("taskq")

SPIN = 2 * MS  # a prepared task due sooner than this is waited for in place
FULL_PAUSE = 5 * SECOND  # no dispatching this long after the spool was full
NEVER = 1 << 62


class Daemon:
    """One scheduler and worker pool over one spool."""

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
        self.owner = Owner(settings.host_id, os.getpid())
        mono = self.clock.mono
        self.commit = GroupCommit(mono)
        self.wake = Wakeups(spool.doorbell, settings.doorbell_poll, mono)
        self.health = Health(
            spool.run,
            f"{self.owner.host}_{self.owner.pid}",
            self.owner.host,
            self.owner.pid,
            _public_settings(settings),
        )
        self.attempts = Attempts(settings.kill_grace, self.wake.watch, self.wake.unwatch)
        backoff = Backoff(settings.retry_delay, settings.retry_cap)
        self.settler = Settler(spool, self.commit, backoff, self._requeued)
        self.dispatcher = Dispatcher(
            spool,
            self.owner,
            self.clock,
            settings.lease,
            self.commit,
            self.settler,
            config.load(spool.root).security,
        )
        self.recovery = Recovery(
            spool, self.owner, self.clock, settings.lease, self.attempts, self.settler
        )
        self.housekeeper = Housekeeper(
            spool, self.clock.now, settings.rescan, settings.tmp_max_age, settings.keep_done
        )
        self.prepared: list[Prepared] = []
        self.stopping = False
        self.stop_deadline = NEVER
        self.clock_ok = True
        self.clock_problem: str | None = None
        self.paused_until = 0
        self.rescan_wanted = True
        self.bell_rang = False
        self.next = {"rescan": 0, "renew": 0, "clock": 0, "poll": NEVER}
        self.last_mono = self.clock.mono()

    def _requeued(self, name: TaskName) -> None:
        self.dispatcher.index.push(name)

    # -- life cycle -------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT and the shutdown grace; return an exit status."""
        self.spool.init()
        self.health.lock(self.clock.now())
        self._check_clock(self.clock.now(), "")
        runner.status_slot()  # reserved before any other thread can open a descriptor
        self.wake.install()
        runner.close_on_exec_all()  # once: a library's descriptors must not leak to tasks
        self.housekeeper.start()
        log.info(
            "taskq daemon %s started on %s: %d workers, lease %s",
            self.owner.host,
            self.spool.root,
            self.cfg.workers,
            format_duration(self.cfg.lease),
        )
        try:
            while not self._finished():
                self._guarded_iteration()
        finally:
            self.housekeeper.stop()
            self.wake.close()
            self.attempts.close()
            self.health.unlock()
        left = len(self.attempts)
        log.info("taskq daemon stopped; %d attempt(s) left running for the next daemon", left)
        return 0

    def _finished(self) -> bool:
        if self.wake.stop_requested and not self.stopping:
            self.stopping = True
            self.stop_deadline = self.clock.mono() + self.cfg.shutdown_grace
        if not self.stopping or self.prepared:
            return False
        return not self.attempts or self.clock.mono() >= self.stop_deadline

    def _guarded_iteration(self) -> None:
        """Run one iteration; on an I/O error, log it, pause and rebuild from the spool.

        Whatever an interrupted iteration left half done is in the spool under
        our own name, and the recovery pass that the next rescan runs settles it.
        """
        try:
            self._iteration()
        except OSError as e:
            log.error("spool error, retrying in 1s: %s", e)
            self.prepared.clear()
            self.next["rescan"] = self.next["renew"] = 0
            time.sleep(1)

    # -- the loop ---------------------------------------------------------

    def _iteration(self) -> None:
        if self.wake.hup:
            self.wake.hup = False
            self.on_hup()
        now = self._guard_clock()
        self._settle_finished(now)
        self._keep_claims(now)
        if not self.stopping:
            self._find_due_work(now)
        self.commit.commit()
        if self.prepared:
            crash_point("daemon.committed")
            self._start_prepared()
        self.health.tell_systemd(self._snapshot(), self.clock.mono(), self.cfg.workers)
        self._sleep()

    def _guard_clock(self) -> int:
        """Read now; measure the clock again if it is time, or if the wall clock stepped."""
        now, mono = self.clock.now(), self.clock.mono()
        if mono < self.last_mono:
            # It must not, but VMs and time-faking libraries have been seen to
            # do it; then every interval would silently stretch.
            back = format_duration(self.last_mono - mono)
            log.warning("the monotonic clock went back %s; re-arming timers", back)
            self.next = dict.fromkeys(self.next, 0)
        self.last_mono = mono
        if self.clock.stepped():
            step = format_duration(abs(self.clock.drift()))
            way = "forward" if self.clock.drift() > 0 else "back"
            self._check_clock(now, f"the wall clock stepped {way} by {step}; ")
        elif mono >= self.next["clock"]:
            self._check_clock(now, "")
        return self.clock.now()

    def _settle_finished(self, now: int) -> None:
        """Record the attempts that ended and move their tasks on."""
        mono = self.clock.mono()
        for run, code in self.attempts.reap():
            crash_point("daemon.reaped")
            self.settler.ended(run, code, now, (mono - run.started_mono) / SECOND)
        if mono >= self.next["poll"]:
            for run in self.attempts.polled():
                self.recovery.settle_adopted(run.body.id, now)
        self.next["poll"] = mono + SECOND // 5 if self.attempts.polled() else NEVER
        self.attempts.enforce_timeouts(mono)

    def _keep_claims(self, now: int) -> None:
        """Renew our leases every third of a lease, and take back abandoned claims."""
        mono = self.clock.mono()
        if self.bell_rang:  # a cancel may have renamed a claim of ours
            self.recovery.check_claims(now, mono)
        if mono < self.next["renew"]:
            return
        self.next["renew"] = mono + self.cfg.lease // 3
        self.recovery.renew(now, mono)
        mine = self.attempts.ids() | {p.claim.task.id for p in self.prepared}
        self.recovery.scan(now, mono, self.clock_ok, mine)

    def _find_due_work(self, now: int) -> None:
        """Rescan when asked (doorbell, safety net, index drained), then claim due tasks."""
        mono = self.clock.mono()
        index = self.dispatcher.index
        drained = not index and index.more_beyond
        if self.rescan_wanted or self.bell_rang or drained or mono >= self.next["rescan"]:
            self.rescan_wanted = self.bell_rang = False
            self.next["rescan"] = mono + self.cfg.rescan
            self.dispatcher.rescan(now)
        if not self.clock_ok or mono < self.paused_until or self.clock.stepped():
            return
        free = self.cfg.workers - len(self.attempts) - len(self.prepared)
        if free > 0:
            caps = self._caps()
            self.prepared += self.dispatcher.claim_due(now, free, caps)

    def _caps(self) -> QueueCaps:
        busy = [r.body.queue for r in self.attempts.all()]
        busy += [p.body.queue for p in self.prepared]
        return QueueCaps(self.cfg.queue_limits, self.cfg.workers, busy)

    # -- starting attempts --------------------------------------------------

    def _start_prepared(self) -> None:
        """Spawn the prepared tasks that are due; keep the rest for a later turn.

        A task due within SPIN of now is waited for here, to the exact
        instant; one due later goes back to the loop, which sleeps until it
        while still reaping children and hearing signals and the doorbell.
        """
        waiting, self.prepared = self.prepared, []
        for ready in waiting:
            run_at = ready.claim.task.run_at
            if self.clock.earliest_start(run_at) - self.clock.now() > SPIN:
                self.prepared.append(ready)
                continue
            self._wait_until_due(run_at)
            confirmed = self._still_ours(ready)
            if confirmed is not None:
                self._spawn(confirmed)

    def _still_ours(self, ready: Prepared) -> Prepared | None:
        """Check, at the instant of the start, that the claim is still ours.

        Soon after the start rename a look suffices (a takeover needs the lease
        to run out). Later (a daemon paused, a long wait) the claim is renewed
        by rename, which fails if it was taken or cancelled meanwhile; a look
        could be fooled by a shared filesystem's cached names.
        """
        now = self.clock.now()
        if self.clock.mono() - ready.mono < self.cfg.lease // 3:
            if os.path.exists(transitions.claim_path(self.spool, ready.claim)):
                return ready
        else:
            expiry = self.clock.reference(now) + self.cfg.lease
            try:
                claim = transitions.renew(self.spool, ready.claim, expiry, self.commit.touched)
                return Prepared(claim, ready.body, ready.user, self.clock.mono())
            except FileNotFoundError:
                pass
        # Cancelled (or taken) in the moment since we prepared it.
        self.settler.vanished_before_start(ready.claim, now)
        return None

    def _wait_until_due(self, run_at: int) -> None:
        """Sleep to the exact instant a prepared task may start, never before it.

        A wall-clock step while we wait counts at once (Clock.earliest_start
        follows it); we measure against the spool again before starting.
        """
        while True:
            if self.clock.stepped():
                self._check_clock(self.clock.now(), "the wall clock stepped; ")
            now = self.clock.now()
            if self.clock.may_start(run_at, now):
                return
            time.sleep((self.clock.earliest_start(run_at) - now) / SECOND)

    def _spawn(self, ready: Prepared) -> None:
        held, body = ready.claim, ready.body
        log_dir = self.spool.log_dir(body.id)
        scheduled = journal.scheduled_for(log_dir, held.task.attempt, held.task.run_at, body.run_at)
        env = runner.task_env(body, held.task, self.spool.root, scheduled, ready.user)
        now = self.clock.now()
        try:
            child = runner.spawn(body, held.task, log_dir, env, ready.user)
            crash_point("daemon.spawned")
        except runner.AttemptBusy:
            self.settler.vanished_before_start(held, now)  # taken over while we were paused
            return
        except OSError as e:
            self._spawn_failed(ready, e, now)
            return
        lateness = now - held.task.run_at
        journal.append(
            log_dir,
            "start",
            now,
            attempt=held.task.attempt,
            host=self.owner.host,
            pid=child.pid,
            proc_start=child.proc_start,
            daemon_pid=self.owner.pid,
            run_at=format_iso(held.task.run_at),
            lateness=lateness / SECOND,
        )
        self.attempts.add_child(Running(held, body, child.pid, self.clock.mono()))
        log.info(
            "started %s attempt %d pid %d lateness %s",
            body.id,
            held.task.attempt,
            child.pid,
            format_duration(lateness),
        )

    def _spawn_failed(self, ready: Prepared, e: OSError, now: int) -> None:
        """No room to start (disk full, read-only): put it back and pause; else a failure."""
        if e.errno in fsutil.TEMPORARY_ERRNOS:
            # Not a failed attempt: the task returns to pending unchanged, and
            # dispatching pauses a while; it runs once the spool can be written.
            self.settler.release(ready.claim, now, f"cannot start: {e.strerror}")
            self.paused_until = self.clock.mono() + FULL_PAUSE
            pause = format_duration(FULL_PAUSE)
            log.error(
                "cannot start %s: %s; pausing dispatch for %s", ready.body.id, e.strerror, pause
            )
            return
        log.error("cannot start %s: %s", ready.body.id, e)
        self.settler.note(ready.claim, "spawn-failed", now, error=str(e))
        self.settler.after_attempt(ready.claim, ready.body, 127, now)

    # -- the clock and health -----------------------------------------------

    def _check_clock(self, now: int, why: str) -> None:
        """Measure our offset from the spool's clock; stop or resume dispatching."""
        try:
            offset = self.clock.measure(self.health.probe)
            trusted, problem = self.clock.trusted(), None
        except OSError as e:
            # A full or read-only disk: keep the last measurement if there is
            # one; without any, do not trust the clock, and try again soon.
            offset, trusted = self.clock.offset, self.clock.measured and self.clock.trusted()
            problem = f"cannot measure the clock against the spool ({e.strerror})"
        if not trusted and problem is None:
            side = "ahead of" if offset > 0 else "behind"
            problem = (
                f"clock uncertainty {format_duration(self.clock.uncertainty())} exceeds "
                f"--max-uncertainty {format_duration(self.cfg.max_uncertainty)} (our clock is "
                f"{format_duration(abs(offset))} {side} the spool filesystem's)"
            )
        if why:
            log.warning("%smeasured the clock again: offset %s", why, format_duration(offset))
        if trusted and not self.clock_ok:
            eps = format_duration(self.clock.uncertainty())
            log.warning("clock uncertainty %s is within bounds again: dispatching", eps)
            self.rescan_wanted = True
        elif not trusted and problem != self.clock_problem:
            log.error("%s: not dispatching until that changes", problem)
        self.clock_ok, self.clock_problem = trusted, (None if trusted else problem)
        every = self.cfg.clock_check if trusted else min(self.cfg.clock_check, SECOND)
        self.next["clock"] = self.clock.mono() + every
        self.health.write(self._snapshot(), now)

    def _snapshot(self) -> Snapshot:
        return Snapshot(
            dispatching=self.clock_ok and not self.stopping,
            reason="stopping" if self.stopping else self.clock_problem,
            stopping=self.stopping,
            uncertainty=self.clock.uncertainty(),
            offset=self.clock.offset,
            busy=len(self.attempts),
            due_soon=len(self.dispatcher.index),
        )

    # -- sleeping -----------------------------------------------------------

    def _sleep(self) -> None:
        timeout = max(0, min(self._deadlines()) - self.clock.mono()) / SECOND
        rang, ready = self.wake.wait(timeout)
        self.bell_rang = self.bell_rang or rang
        for key in ready:  # pidfds of adopted attempts that ended
            if isinstance(key, tuple) and key[0] == "adopted":
                self.recovery.settle_adopted(key[1], self.clock.now())

    def _deadlines(self) -> list[int]:
        """Monotonic instants the loop must wake at: renewals, checks, due work, kills."""
        mono = self.clock.mono()
        out = [
            self.next["renew"],
            self.next["clock"],
            self.next["poll"],
            *self.attempts.deadlines(),
        ]
        watchdog = self.health.next_deadline()
        if watchdog is not None:
            out.append(watchdog)
        if self.stopping:
            out.append(self.stop_deadline)
        else:
            out += self._dispatch_deadlines(mono)
        for ready in self.prepared:
            wait = self.clock.earliest_start(ready.claim.task.run_at) - SPIN - self.clock.now()
            out.append(mono + wait)
        return out

    def _dispatch_deadlines(self, mono: int) -> list[int]:
        index = self.dispatcher.index
        out = [self.next["rescan"]]
        if not index and index.more_beyond:
            out.append(mono)  # the index ran dry: load the next bucket now
        if mono < self.paused_until:
            out.append(self.paused_until)
            return out
        nxt = index.next_run_at(self._caps().open)
        free = self.cfg.workers - len(self.attempts) - len(self.prepared)
        if nxt is not None and free > 0 and self.clock_ok:
            prepare_at = self.clock.earliest_start(nxt) - self.commit.lead()
            out.append(mono + prepare_at - self.clock.now())
        return out


def _public_settings(cfg: Settings) -> dict[str, object]:
    """The settings a health record shows, in seconds."""
    return {
        "max_uncertainty": cfg.max_uncertainty / SECOND,
        "workers": cfg.workers,
        "lease": cfg.lease / SECOND,
        "clock_check": cfg.clock_check / SECOND,
    }
