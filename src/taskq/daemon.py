"""The daemon's loop: wake, reap, renew, claim due work, start it, sleep.

Everything in memory here (the due heap, the running children) is a cache
of the spool that start-up rebuilds; the spool is the record. The loop
sleeps until exactly the next due instant, or until the doorbell (a file
submitters touch, watched with watchdog), a child's exit or a signal wakes
it. Signal handlers only set flags; the loop does the work. Transitions of
one iteration are made durable together (group commit) before any child
they concern is started.
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import random
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from taskq import fsutil, gc, journal, limits, runner, security, status, transitions
from taskq.clock import Clock
from taskq.dueindex import DueIndex
from taskq.errors import CorruptFile
from taskq.faults import crash_point
from taskq.notify import Notifier
from taskq.spool import Spool
from taskq.submit import clean_tmp
from taskq.task import ClaimName, TaskBody, TaskName
from taskq.timespec import DAY, HOUR, MS, SECOND, format_duration, format_iso, parse_when
from taskq.transitions import Owner

log = logging.getLogger("taskq")

# Claim, mark started and commit at least this far ahead of a task's start
# (more when commits have been slow), so that at the instant itself only the
# spawn remains: lateness is the spawn's cost, not the claim's fsync. A cancel
# in this last moment renames the claim to cancelling, and the daemon, which
# looks again just before the spawn, does not start it.
PREPARE_LEAD = 20 * MS
SPIN = 2 * MS  # a prepared task due sooner than this is waited for in place
FULL_PAUSE = 5 * SECOND  # no dispatching this long after the spool was full


@dataclass
class Config:
    """Daemon settings; durations in microseconds."""

    workers: int = 8
    lease: int = 60 * SECOND
    host_id: str = "localhost"
    retry_delay: int = 10 * SECOND  # the first retry's backoff; doubles each attempt
    retry_cap: int = HOUR
    kill_grace: int = 10 * SECOND  # between TERM and KILL on timeout
    shutdown_grace: int = 10 * SECOND
    rescan: int = 30 * SECOND  # the safety-net rescan interval
    queue_limits: dict[str, int] = field(default_factory=dict)  # per-queue concurrency caps
    clock_margin: int = 1 * MS
    max_uncertainty: int = 2 * SECOND  # above it, stop dispatching
    clock_check: int = 10 * SECOND  # how often to measure the clock offset
    tmp_max_age: int = HOUR
    keep_done: int | None = 7 * DAY  # done/ retention, applied hourly; None keeps all


@dataclass
class Running:
    """An attempt this daemon watches: its own child or an adopted orphan."""

    claim: ClaimName
    body: TaskBody
    pid: int | None
    started_mono: float
    started_wall: int
    adopted: bool = False
    lost: bool = False  # our lease was taken; we no longer own the claim
    term_sent: float | None = None
    killed: bool = False
    notes: list[str] = field(default_factory=list)


class Daemon:
    """One scheduler and worker pool over one spool."""

    def __init__(
        self,
        spool: Spool,
        config: Config,
        clock: Clock | None = None,
        on_hup: Callable[[], None] = lambda: None,
    ) -> None:
        self.spool = spool
        self.on_hup = on_hup
        self.hup = False
        self.cfg = config
        self.clock = clock or Clock(config.clock_margin, config.max_uncertainty)
        self.owner = Owner(config.host_id, os.getpid())
        self.index = DueIndex(spool)
        self.children: dict[int, Running] = {}
        self.adopted: dict[str, Running] = {}
        self.to_start: list[tuple[ClaimName, TaskBody]] = []
        self.users: dict[str, security.RunAs] = {}  # who each prepared task runs as
        self.policy = limits.load_policy(spool)
        self._touched: set[str] = set()  # directories whose entries changed this iteration
        self.commit_times: collections.deque[float] = collections.deque(maxlen=32)
        self.stopping = False
        self.stop_deadline = 0.0
        self.rescan_wanted = True
        self.last_rescan = float("-inf")
        self.last_renew = float("-inf")  # the first iteration renews and scans claims
        self.next_clock_check = 0.0
        self.next_gc = 0.0
        self.paused_until = 0.0
        self.claims_changed = False
        self.notify = Notifier()
        self.told_ready = self.told_stopping = False
        self.next_status = self.next_watchdog = 0.0
        self.last_mono = time.monotonic()
        self.clock_ok = True
        self.clock_problem: str | None = None
        self.started_at = self.clock.now()
        self.sel = selectors.DefaultSelector()

    # -- life cycle -------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT and the shutdown grace; return an exit status."""
        self.spool.init()
        self._lock_owner()
        self._check_clock(self.clock.now())
        self._install_wakeups()
        observer = self._watch_doorbell()
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
            if not self.told_stopping:
                self.notify.send("STOPPING=1")
            if observer is not None:
                observer.stop()
            status.remove(self.spool.run, self._owner_name)
            self._unlock_owner()
        left = len(self.children) + len(self.adopted)
        log.info("taskq daemon stopped; %d attempt(s) left running for the next daemon", left)
        return 0

    def _finished(self) -> bool:
        if not self.stopping:
            return False
        busy = self.children or self.adopted
        return not busy or time.monotonic() >= self.stop_deadline

    @property
    def _owner_name(self) -> str:
        return f"{self.owner.host}_{self.owner.pid}"

    def _lock_owner(self) -> None:
        path = os.path.join(self.spool.run, f"{self._owner_name}.lock")
        self._owner_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._owner_fd, fcntl.LOCK_EX)
        self._owner_path = path

    def _unlock_owner(self) -> None:
        # Left-over claims stay ours until another daemon sees the lock free.
        os.unlink(self._owner_path)
        os.close(self._owner_fd)
        try:
            os.unlink(self._probe_path)
        except FileNotFoundError:
            pass

    @property
    def _probe_path(self) -> str:
        return os.path.join(self.spool.run, f"{self._owner_name}.probe")

    # -- the clock ----------------------------------------------------------

    def _check_clock(self, now: int) -> None:
        """Measure our offset from the spool's clock; stop or resume dispatching."""
        try:
            offset = self.clock.measure(self._probe_path)
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
        if trusted and not self.clock_ok:
            eps = format_duration(self.clock.uncertainty())
            log.warning("clock uncertainty %s is within bounds again: dispatching", eps)
            self.rescan_wanted = True
        elif not trusted and problem != self.clock_problem:
            log.error("%s: not dispatching until that changes", problem)
        self.clock_ok, self.clock_problem = trusted, (None if trusted else problem)
        every = self.cfg.clock_check if trusted else min(self.cfg.clock_check, SECOND)
        self.next_clock_check = time.monotonic() + every / SECOND
        self._write_status(now)

    def _guard_monotonic(self) -> None:
        """Re-arm every timer if the monotonic clock ever goes backwards.

        It must not, but virtual machines and time-faking libraries have
        been seen to do it; then every interval would silently stretch.
        """
        mono = time.monotonic()
        if mono < self.last_mono:
            log.warning(
                "the monotonic clock went back %.3fs; re-arming timers", self.last_mono - mono
            )
            self.next_clock_check = self.last_renew = self.last_rescan = float("-inf")
        self.last_mono = mono

    def _write_status(self, now: int) -> None:
        record = {
            "owner": self._owner_name,
            "host": self.owner.host,
            "pid": self.owner.pid,
            "started_at": format_iso(self.started_at),
            "updated_at": format_iso(now),
            "dispatching": self.clock_ok and not self.stopping,
            "reason": "stopping" if self.stopping else self.clock_problem,
            "stopping": self.stopping,
            "uncertainty": self.clock.uncertainty() / SECOND,
            "offset": self.clock.offset / SECOND,
            "max_uncertainty": self.cfg.max_uncertainty / SECOND,
            "workers": self.cfg.workers,
            "busy": len(self.children) + len(self.adopted),
            "lease": self.cfg.lease / SECOND,
            "clock_check": self.cfg.clock_check / SECOND,
        }
        try:
            status.write(self.spool.run, self._owner_name, record)
        except OSError as e:
            log.warning("cannot write the status record: %s", e)

    def _install_wakeups(self) -> None:
        sig_r, sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        bell_r, self._bell_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(sig_w, warn_on_full_buffer=False)
        self.sel.register(sig_r, selectors.EVENT_READ, "signal")
        self.sel.register(bell_r, selectors.EVENT_READ, "doorbell")
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_hup(self, signum: int, _frame: Any) -> None:
        self.hup = True

    def _on_stop(self, signum: int, _frame: Any) -> None:
        if not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.cfg.shutdown_grace / SECOND

    def _watch_doorbell(self) -> Any:
        """Wake the loop when a submitter touches the doorbell (inotify, via watchdog)."""
        try:
            from watchdog.events import FileSystemEvent, FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a dependency
            return None
        bell, wake_fd = self.spool.doorbell, self._bell_w

        class Bell(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if os.fsdecode(event.src_path) == bell:
                    try:
                        os.write(wake_fd, b"!")
                    except BlockingIOError:
                        pass  # the loop has a wake-up pending already

        observer = Observer()
        observer.daemon = True
        observer.schedule(Bell(), self.spool.root, recursive=False)
        try:
            observer.start()
        except OSError as e:
            log.warning("cannot watch the doorbell (%s); relying on rescans", e)
            return None
        return observer

    # -- the loop ---------------------------------------------------------

    def _guarded_iteration(self) -> None:
        """Run one iteration; on an I/O error, log it, pause and rebuild from the spool.

        Whatever an interrupted iteration left half done is in the spool under
        our own name, and the recovery pass that the next rescan runs settles it.
        """
        try:
            self._iteration()
        except OSError as e:
            log.error("spool error, retrying in 1s: %s", e)
            self.to_start.clear()
            self.last_rescan = float("-inf")
            time.sleep(1)

    def _iteration(self) -> None:
        if self.hup:
            self.hup = False
            self.on_hup()
        now = self.clock.now()
        self._guard_monotonic()
        if time.monotonic() >= self.next_clock_check:
            self._check_clock(now)
        self._reap(now)
        if self.claims_changed:
            self.claims_changed = False
            self._check_claims(now)
        self._poll_adopted(now)
        self._enforce_timeouts()
        self._renew_leases(now)
        if not self.stopping:
            self._maybe_rescan(now)
            if self.clock_ok and time.monotonic() >= self.paused_until:
                self._dispatch(now)
        self._commit()
        self._start_claimed()
        self._tell_systemd()
        self._wait(self._timeout())

    def _tell_systemd(self) -> None:
        """READY=1 once dispatching, STATUS= as it changes, WATCHDOG=1, STOPPING=1."""
        if not self.notify.enabled:
            return
        mono = time.monotonic()
        if self.stopping:
            if not self.told_stopping:
                self.notify.send("STOPPING=1", "STATUS=stopping: waiting for running attempts")
                self.told_stopping = True
        elif self.clock_ok and not self.told_ready:
            self.notify.send("READY=1", f"STATUS={self._status_text()}")
            self.told_ready = True
        elif mono >= self.next_status:
            self.notify.status(self._status_text())
            self.next_status = mono + 1.0
        interval = self.notify.watchdog_interval
        if interval is not None and mono >= self.next_watchdog:
            self.notify.send("WATCHDOG=1")
            self.next_watchdog = mono + interval

    def _status_text(self) -> str:
        busy = f"{len(self._attempts())}/{self.cfg.workers} workers busy"
        if not self.clock_ok:
            return f"NOT dispatching: {self.clock_problem}; {busy}"
        return f"dispatching; {busy}; {len(self.index)} task(s) due soon"

    def _commit(self) -> None:
        """Make this iteration's renames durable at once (group commit).

        One fsync per directory touched, not a syncfs: the latter would also
        wait for every other process's dirty data on the filesystem.
        """
        if not self._touched:
            return
        began = time.monotonic()
        for directory in sorted(self._touched):
            try:
                fsutil.fsync_dir(directory)
            except FileNotFoundError:
                pass  # an empty bucket removed meanwhile: nothing in it to keep
        self._touched.clear()
        took = time.monotonic() - began
        self.commit_times.append(took)
        if took > 0.1:
            log.warning("slow disk: a commit took %s", format_duration(round(took * SECOND)))

    def _prepare_lead(self) -> int:
        """How far ahead to claim and commit: 20 ms, or more on a slow disk."""
        slowest = max(self.commit_times, default=0.0)
        return min(SECOND, max(PREPARE_LEAD, round(2 * slowest * SECOND)))

    def _released(self, name: TaskName) -> None:
        crash_point("daemon.released")
        self._touched.update((self.spool.bucket_dir(name.bucket), self.spool.pending))
        self.index.push(name)

    def _timeout(self) -> float:
        """Seconds to sleep: until the next due task, renewal, rescan or kill."""
        mono = time.monotonic()
        deadlines = [self.last_renew + self.cfg.lease / 3 / SECOND, self.next_clock_check]
        if self.notify.watchdog_interval is not None:
            deadlines.append(self.next_watchdog)
        if self.stopping:
            deadlines.append(self.stop_deadline)
        else:
            deadlines.append(self.last_rescan + self.cfg.rescan / SECOND)
            nxt = self.index.next_run_at(self._queue_open())
            if mono < self.paused_until:
                deadlines.append(self.paused_until)
            elif nxt is not None and self._free_slots() > 0 and self.clock_ok:
                prepare_at = self.clock.earliest_start(nxt) - self._prepare_lead()
                wait = (prepare_at - self.clock.now()) / SECOND
                deadlines.append(mono + wait)
        if not self.stopping and not self.index and self.index.more_beyond:
            deadlines.append(mono)  # the heap ran dry: load the next bucket now
        if self.adopted:
            deadlines.append(mono + 0.2)
        for held, _ in self.to_start:
            wait = (self.clock.earliest_start(held.task.run_at) - SPIN - self.clock.now()) / SECOND
            deadlines.append(mono + wait)
        for run in self.children.values():
            if run.term_sent is not None:
                deadlines.append(run.term_sent + self.cfg.kill_grace / SECOND)
            elif run.body.timeout is not None:
                deadlines.append(run.started_mono + run.body.timeout / SECOND)
        return max(0.0, min(deadlines) - mono)

    def _wait(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            try:
                while os.read(key.fd, 512):
                    pass
            except BlockingIOError:
                pass
            if key.data == "doorbell":
                self.rescan_wanted = True
                self.claims_changed = True

    def _free_slots(self) -> int:
        return self.cfg.workers - len(self.children) - len(self.adopted) - len(self.to_start)

    def _queue_open(self) -> Callable[[str], bool]:
        """A test of whether a queue is under its --queue-limit right now."""
        limits = self.cfg.queue_limits
        if not limits:
            return lambda queue: True
        busy = collections.Counter(r.body.queue for r in self._attempts())
        busy.update(body.queue for _, body in self.to_start)
        return lambda queue: busy[queue] < limits.get(queue, self.cfg.workers)

    def _attempts(self) -> list[Running]:
        return [*self.children.values(), *self.adopted.values()]

    # -- finding and claiming due work -----------------------------------

    def _maybe_rescan(self, now: int) -> None:
        mono = time.monotonic()
        safety = mono - self.last_rescan >= self.cfg.rescan / SECOND
        drained = not self.index and self.index.more_beyond
        if not (self.rescan_wanted or safety or drained):
            return
        self.rescan_wanted = False
        self.last_rescan = mono
        for path, reason in self.index.rescan(now):
            self._quarantine(path, reason, now)
        if safety:
            clean_tmp(self.spool, now, self.cfg.tmp_max_age)
        if self.cfg.keep_done is not None and mono >= self.next_gc:
            self.next_gc = mono + HOUR / SECOND
            found = gc.collect(self.spool, now, self.cfg.keep_done)
            if found.tasks:
                log.info(
                    "pruned %d done task(s) older than %s",
                    found.tasks,
                    format_duration(self.cfg.keep_done),
                )

    def _dispatch(self, now: int) -> None:
        """Claim due tasks for the free workers, fairly across queues."""
        horizon = now + self._prepare_lead()

        def due(run_at: int) -> bool:
            return self.clock.earliest_start(run_at) <= horizon

        while self._free_slots() > 0:
            picked = self.index.pop_due(due, self._queue_open())
            if picked is None:
                return
            name, path = picked
            try:
                held = transitions.claim(self.spool, path, name, self.owner, now + self.cfg.lease)
                crash_point("daemon.claimed")
                self._touched.add(os.path.dirname(path))
            except FileNotFoundError:
                continue  # cancelled, or claimed by another daemon: theirs now
            self._touched.add(self.spool.claimed)
            self._prepare(held, now)

    def _prepare(self, held: ClaimName, now: int) -> None:
        """Read a fresh claim's body, expire it or mark it started."""
        path = transitions.claim_path(self.spool, held)
        try:
            body, owner = self.spool.read_task(path)
            user = security.run_as(owner, self.policy)
        except CorruptFile as e:
            self._quarantine(path, str(e), now)
            return
        except ValueError as e:  # an owner who may not run tasks here: never run it
            self._quarantine(path, str(e), now)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            self._quarantine(path, self._unreadable(path, e), now)
            return
        if body.id != held.task.id:
            reason = f"body id {body.id} does not match the file name"
            self._quarantine(transitions.claim_path(self.spool, held), reason, now)
            return
        if body.expires is not None:
            deadline = self._scheduled(body, held.task) + body.expires
            if now > deadline:
                self._note(held, "expired", now, deadline=format_iso(deadline))
                self._finish(held, "failed", now)
                return
        try:
            held = transitions.start(self.spool, held)
        except FileNotFoundError:
            return  # cancelled between claim and start: it must not run
        crash_point("daemon.started")
        self.users[held.task.id] = user
        self.to_start.append((held, body))

    def _read_body(self, path: str, now: int) -> TaskBody | None:
        try:
            return self.spool.read_body(path)
        except CorruptFile as e:
            self._quarantine(path, str(e), now)
        except FileNotFoundError:
            pass
        except OSError as e:
            self._quarantine(path, f"unreadable: {e.strerror}", now)
        return None

    def _unreadable(self, path: str, e: OSError) -> str:
        """Why a task file cannot be read: most often, it is not ours to read."""
        try:
            security.run_as(os.lstat(path).st_uid, self.policy)
        except ValueError as refusal:
            return str(refusal)
        except OSError:
            pass
        return f"unreadable: {e.strerror}"

    def _quarantine(self, path: str, reason: str, now: int) -> None:
        if self.spool.quarantine(path, reason, now):
            log.warning("quarantined %s: %s", os.path.relpath(path, self.spool.root), reason)

    # -- starting and finishing attempts ----------------------------------

    def _start_claimed(self) -> None:
        """Spawn the prepared tasks that are due; keep the rest for a later turn.

        A task due within SPIN of now is waited for here, to the exact
        instant; one due later goes back to the loop, which sleeps until it
        while still reaping children and hearing signals and the doorbell.
        """
        pending, self.to_start = self.to_start, []
        if pending:
            crash_point("daemon.committed")
            _no_inherit()
        for held, body in pending:
            if self.clock.earliest_start(held.task.run_at) - self.clock.now() > SPIN:
                self.to_start.append((held, body))
                continue
            self._wait_until_due(held.task.run_at)
            if not os.path.exists(transitions.claim_path(self.spool, held)):
                # Cancelled (or taken) in the moment since we prepared it.
                self.users.pop(held.task.id, None)
                asked = self._cancelling(held)
                if asked is not None:
                    self._note(asked, "cancelled", self.clock.now(), reason="before it started")
                    self._finish(asked, "cancelled", self.clock.now())
                continue
            self._spawn(held, body)

    def _wait_until_due(self, run_at: int) -> None:
        """Sleep to the exact instant a prepared task may start, never before it."""
        while not self.clock.may_start(run_at, now := self.clock.now()):
            time.sleep((self.clock.earliest_start(run_at) - now) / SECOND)

    def _spool_full(self, held: ClaimName, e: OSError, now: int) -> None:
        """No room to start an attempt (disk full, read-only): put the task back.

        It is not a failed attempt: the task returns to pending unchanged, and
        dispatching pauses for a while; nothing is lost, and it runs once the
        spool can be written again.
        """
        try:
            self._released(transitions.release(self.spool, held))
        except FileNotFoundError:
            return
        self.paused_until = time.monotonic() + FULL_PAUSE / SECOND
        log.error(
            "cannot start %s: %s; pausing dispatch for %s",
            held.task.id,
            e.strerror,
            format_duration(FULL_PAUSE),
        )

    def _scheduled(self, body: TaskBody, name: TaskName) -> int:
        """The task's run time as last set by a person (submit, reschedule, retry).

        The name is authoritative for the first attempt of a budget (submit and
        reschedule set its run_at; a retry makes a new first attempt); a later
        attempt's schedule is when that first attempt was due.
        """
        if name.attempt == 1:
            return name.run_at  # no journal to read
        records = journal.read(self.spool.log_dir(body.id))
        first = journal.budget_start(records, name.attempt)
        if first == name.attempt:
            return name.run_at
        return journal.scheduled_run_at(records, first, body.run_at)

    def _spawn(self, held: ClaimName, body: TaskBody) -> None:
        log_dir = self.spool.log_dir(body.id)
        user = self.users.pop(held.task.id, None)
        env = runner.task_env(
            body, held.task, self.spool.root, self._scheduled(body, held.task), user
        )
        now = self.clock.now()
        try:
            child = runner.spawn(body, held.task, log_dir, env, user)
            crash_point("daemon.spawned")
        except OSError as e:
            if e.errno in fsutil.TEMPORARY_ERRNOS:
                self._spool_full(held, e, now)
                return
            log.error("cannot start %s: %s", body.id, e)
            self._note(held, "spawn-failed", now, error=str(e))
            self._after_attempt(held, body, 127, now)
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
        run = Running(held, body, child.pid, time.monotonic(), now)
        self.children[child.pid] = run
        log.info(
            "started %s attempt %d pid %d lateness %s",
            body.id,
            held.task.attempt,
            child.pid,
            format_duration(lateness),
        )

    def _reap(self, now: int) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run = self.children.pop(pid, None)
            if run is not None:
                crash_point("daemon.reaped")
                self._ended(run, os.waitstatus_to_exitcode(status), now)

    def _ended(self, run: Running, code: int | None, now: int) -> None:
        """Record an attempt's end and move its task on."""
        fields: dict[str, Any] = {"attempt": run.claim.task.attempt}
        if code is None:
            fields["lost"] = True
        elif code < 0:
            fields["signal"] = -code
        else:
            fields["exit_status"] = code
        if not run.adopted:
            fields["duration"] = round(time.monotonic() - run.started_mono, 6)
        if run.notes:
            fields["notes"] = run.notes
        journal.append(self.spool.log_dir(run.body.id), "end", now, **fields)
        log.info("ended %s attempt %d: %s", run.body.id, run.claim.task.attempt, _outcome(fields))
        if not run.lost:
            self._after_attempt(run.claim, run.body, code, now)

    def _after_attempt(self, held: ClaimName, body: TaskBody, code: int | None, now: int) -> None:
        """Success to done/, failure to a retry or to failed/; cancelled to cancelled/."""
        if held.phase == "cancelling":
            self._finish(held, "cancelled", now)
        elif code == 0:
            self._finish(held, "done", now)
        elif self._attempts_left(held, body):
            delay = 0 if code is None else self._backoff(held.task.attempt)
            try:
                name = transitions.retry(self.spool, held, now + delay)
                crash_point("daemon.finished")
                self._touched.update((self.spool.bucket_dir(name.bucket), self.spool.pending))
            except FileNotFoundError:
                asked = self._cancelling(held)
                if asked is not None:
                    self._note(asked, "cancelled", now, reason="as its attempt ended")
                    self._finish(asked, "cancelled", now)
                return
            self._touched.add(self.spool.claimed)
            self._note(
                held, "retry", now, next_attempt=name.attempt, run_at=format_iso(name.run_at)
            )
            self.index.push(name)
        else:
            self._note(held, "dead", now, reason="attempts exhausted")
            self._finish(held, "failed", now)

    def _attempts_left(self, held: ClaimName, body: TaskBody) -> bool:
        """Whether the budget (max_attempts since submit or the last retry) allows more."""
        records = journal.read(self.spool.log_dir(body.id))  # only after a failure
        first = journal.budget_start(records, held.task.attempt)
        return held.task.attempt - first + 1 < body.max_attempts

    def _finish(self, held: ClaimName, state: str, now: int) -> None:
        try:
            dest = transitions.finish(self.spool, held, state, now)
            crash_point("daemon.finished")
            self._touched.update((os.path.dirname(dest), self.spool.done))  # a new day's parent
        except FileNotFoundError:
            asked = self._cancelling(held) if held.phase != "cancelling" else None
            if asked is not None:
                # `taskq cancel` renamed the claim as the attempt ended: it is cancelled.
                self._note(asked, "cancelled", now, reason="as its attempt ended")
                self._finish(asked, "cancelled", now)
            return
        self._touched.add(self.spool.claimed)

    def _backoff(self, attempt: int) -> int:
        """Exponential backoff with jitter: between half and all of base * 2^(n-1)."""
        delay: int = min(self.cfg.retry_cap, self.cfg.retry_delay << (attempt - 1))
        return delay // 2 + random.randrange(delay // 2 + 1)

    def _note(self, held: ClaimName, event: str, now: int, **fields: Any) -> None:
        journal.append(
            self.spool.log_dir(held.task.id), event, now, attempt=held.task.attempt, **fields
        )

    # -- leases and timeouts ----------------------------------------------

    def _renew_leases(self, now: int) -> None:
        """Every third of a lease: renew ours, then look for claims to take back."""
        mono = time.monotonic()
        if mono - self.last_renew < self.cfg.lease / 3 / SECOND:
            return
        self.last_renew = mono
        for run in self._attempts():
            if run.lost:
                continue
            try:
                run.claim = transitions.renew(self.spool, run.claim, now + self.cfg.lease)
                crash_point("daemon.renewed")
            except FileNotFoundError:
                self._lease_lost(run, now)
            self._touched.add(self.spool.claimed)
        self._scan_claims(now)

    def _check_claims(self, now: int) -> None:
        """After the doorbell: has any running claim of ours been renamed?"""
        for run in self._attempts():
            if run.lost or os.path.exists(transitions.claim_path(self.spool, run.claim)):
                continue
            self._lease_lost(run, now)

    def _cancelling(self, held: ClaimName) -> ClaimName | None:
        """The claim as `taskq cancel` renamed it, if that is what happened."""
        asked = held.with_(phase="cancelling")
        return asked if os.path.exists(transitions.claim_path(self.spool, asked)) else None

    def _stop_for_cancel(self, run: Running) -> None:
        """Cancelled while running: TERM the process group, KILL after the grace.

        The claim stays ours (phase cancelling, still renewed); when the
        attempt ends, the task goes to cancelled/.
        """
        run.notes.append("cancelled while running")
        log.info("cancelling %s: stopping attempt %d", run.body.id, run.claim.task.attempt)
        if run.pid is not None and run.term_sent is None:
            runner.kill_group(run.pid, signal.SIGTERM)
            run.term_sent = time.monotonic()

    def _lease_lost(self, run: Running, now: int) -> None:
        """Our claim was renamed: a cancel (stop the attempt) or a takeover (kill it now)."""
        asked = self._cancelling(run.claim)
        if asked is not None:
            run.claim = asked
            self._stop_for_cancel(run)
            return
        run.lost = True
        run.notes.append("lease lost")
        self._note(run.claim, "lease-lost", now)
        log.warning("lost the lease of %s; killing attempt %d", run.body.id, run.claim.task.attempt)
        if run.pid is not None:
            runner.kill_group(run.pid, signal.SIGKILL)

    def _enforce_timeouts(self) -> None:
        mono = time.monotonic()
        for run in self._attempts():
            if run.pid is None or run.killed:
                continue
            if run.term_sent is None:
                if (
                    run.body.timeout is not None
                    and mono >= run.started_mono + run.body.timeout / SECOND
                ):
                    run.notes.append(f"timeout after {format_duration(run.body.timeout)}")
                    runner.kill_group(run.pid, signal.SIGTERM)
                    run.term_sent = mono
            elif mono >= run.term_sent + self.cfg.kill_grace / SECOND:
                runner.kill_group(run.pid, signal.SIGKILL)
                run.killed = True

    # -- recovery ---------------------------------------------------------

    def _scan_claims(self, now: int) -> None:
        """Take back claims whose daemon is gone (this host) or whose lease expired.

        A claim of this host is recovered at once when its daemon's lock in
        run/ is free. Any claim whose lease has surely expired (by our clock,
        with its uncertainty) is taken over, but only while we trust our clock.
        """
        mine = {r.claim.task.id for r in self._attempts()}
        mine.update(c.task.id for c, _ in self.to_start)
        for entry in fsutil.listdir(self.spool.claimed):
            path = os.path.join(self.spool.claimed, entry)
            try:
                held = ClaimName.parse(entry)
            except ValueError:
                self._quarantine(path, "not a claim file name", now)
                continue
            if held.task.id in mine:
                continue
            if held.host == self.owner.host and (
                held.pid == self.owner.pid or not self._owner_alive(held.owner)
            ):
                self._recover_claim(held, now, "its daemon is gone")
            elif self.clock_ok and self.clock.may_start(held.expiry, now):
                self._recover_claim(held, now, "its lease expired")

    def _owner_alive(self, owner: str) -> bool:
        if status.owner_alive(self.spool.run, owner):
            return True
        status.forget(self.spool.run, owner)
        return False

    def _recover_claim(self, old: ClaimName, now: int, why: str) -> None:
        try:
            held = transitions.take_over(self.spool, old, self.owner, now + self.cfg.lease)
        except FileNotFoundError:
            return  # the owner renewed it, finished it, or another daemon was first
        crash_point("daemon.taken-over")
        self._touched.add(self.spool.claimed)
        log.info("took over %s from %s: %s", old.task.id, old.owner, why)
        self._note(held, "taken-over", now, previous_owner=old.owner, reason=why, phase=old.phase)
        if held.phase == "claimed":
            self._released(transitions.release(self.spool, held))
            self._note(held, "released", now, reason="claimed but never started")
            return
        body = self._read_body(transitions.claim_path(self.spool, held), now)
        if body is not None:
            self._adopt(held, body, old, now)

    def _settle_unbegun(self, held: ClaimName, now: int, reason: str) -> None:
        """An orphaned attempt that never began: cancelled if asked, else back to pending."""
        if held.phase == "cancelling":
            self._note(held, "cancelled", now, reason="before it started")
            self._finish(held, "cancelled", now)
            return
        self._released(transitions.release(self.spool, held))
        self._note(held, "released", now, reason=reason)

    def _adopt(self, held: ClaimName, body: TaskBody, old: ClaimName, now: int) -> None:
        """Watch an orphaned attempt to its end, or settle one that ended."""
        log_dir = self.spool.log_dir(body.id)
        attempt = held.task.attempt
        if not os.path.exists(runner.status_path(log_dir, attempt)):
            # The status file is created before the spawn: this attempt never ran.
            self._settle_unbegun(held, now, "never spawned")
            return
        start = _start_record(log_dir, attempt)
        pid = _live_pid(start)
        run = Running(held, body, pid, time.monotonic(), now, adopted=True)
        if body.timeout is not None and start is not None:
            elapsed = (now - _record_time(start)) / SECOND
            run.started_mono -= max(0.0, elapsed)
        # The supervisor's lock is only meaningful on its own host: a lock
        # taken over a shared filesystem proves nothing.
        if old.host == self.owner.host and runner.supervisor_alive(log_dir, attempt):
            self.adopted[body.id] = run
            if held.phase == "cancelling":
                self._stop_for_cancel(run)
            self._note(held, "adopted", now, previous_owner=old.owner, pid=pid)
            log.info("adopted running attempt %d of %s from %s", attempt, body.id, old.owner)
            return
        began, code = runner.read_supervisor(log_dir, attempt)
        if not began:
            # Its daemon died between creating the status file and the spawn.
            self._settle_unbegun(held, now, "never began")
            return
        if code is None and old.host != self.owner.host:
            run.notes.append(
                f"lost: {old.owner}'s lease expired with the attempt in flight; "
                "it may have run in part, or still run there"
            )
            log.warning("attempt %d of %s was lost with %s's lease", attempt, body.id, old.owner)
        elif code is None:
            run.notes.append("lost: in flight when its daemon died; it may have run in part")
            log.warning("attempt %d of %s was lost with its daemon", attempt, body.id)
        else:
            run.notes.append(
                f"ended while no daemon watched; status recorded by {old.owner}'s child"
            )
        self._ended(run, code, now)

    def _poll_adopted(self, now: int) -> None:
        for task_id, run in list(self.adopted.items()):
            log_dir = self.spool.log_dir(task_id)
            if runner.supervisor_alive(log_dir, run.claim.task.attempt):
                continue
            del self.adopted[task_id]
            code = runner.read_status(log_dir, run.claim.task.attempt)
            if code is None:
                run.notes.append("supervisor died without recording a status")
            self._ended(run, code, now)


def _no_inherit() -> None:
    """Mark every descriptor close-on-exec before spawning children.

    Ours are already; a library's may not be (watchdog's inotify descriptor
    is not), and posix_spawn, unlike subprocess, closes nothing by itself.
    """
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return  # no /proc: nothing to sweep with; our own descriptors are CLOEXEC
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed by now


def _outcome(fields: dict[str, Any]) -> str:
    if fields.get("lost"):
        return "lost"
    if "signal" in fields:
        return f"killed by signal {fields['signal']}"
    return f"exit {fields['exit_status']}"


def _start_record(log_dir: str, attempt: int) -> dict[str, Any] | None:
    found = None
    for record in journal.read(log_dir):
        if record["event"] == "start" and record.get("attempt") == attempt:
            found = record
    return found


def _record_time(record: dict[str, Any]) -> int:
    return parse_when(str(record["time"]), 0)


def _live_pid(start: dict[str, Any] | None) -> int | None:
    """The orphan's pid if the same process (by start time) still has it."""
    if start is None or not isinstance(start.get("pid"), int):
        return None
    pid = start["pid"]
    if runner.proc_start_time(pid) != start.get("proc_start"):
        return None
    return int(pid)
