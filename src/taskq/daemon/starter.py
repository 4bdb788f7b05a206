"""Starting prepared attempts at their instant: confirm the claim, wait, spawn, journal.

A prepared task's start is already durable. One due later than LEAD has its
id bound and its attempt's files made at once (stage), so that within LEAD
of its instant the starter only confirms that the claim is still ours,
opens the files and hands the attempt to the keeper with the instant on both clocks, so that
the keeper waits to the exact microsecond the clock allows (never before)
and then only spawns; an attempt under an sh supervisor is waited for here
instead (a wall-clock step while waiting is measured again first). The
start is journalled at the instant the spawn was made.
A spool that cannot take the attempt's files (full, read-only) puts the
task back and pauses dispatching; any other failure to start is a failed
attempt with status 127.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from taskq.client import fence
from taskq.daemon import runner
from taskq.daemon.attempts import Attempts, Prepared, Running
from taskq.daemon.cgroups import Group
from taskq.daemon.crew import Crew, Part
from taskq.daemon.keeperlink import Began, Early, KeeperGone, NotRun
from taskq.daemon.staging import Stager
from taskq.spool import attemptfiles, fsutil, journal, transitions
from taskq.spool.faults import crash_point
from taskq.spool.journal import Event
from taskq.spool.resources import Resources
from taskq.spool.states import State
from taskq.spool.task import ClaimName
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock
from taskq.times.timespec import MS, SECOND, format_duration, format_iso

log = logging.getLogger("taskq")

# A prepared task due sooner than this is started in place: handed to the keeper
# with its instant, or waited for. As much as the loop's wake-up, the attempt's
# files and the keeper's own wake-up can take, at the instant they cost nothing.
LEAD = 5 * MS
FULL_WAIT = 5 * SECOND  # no dispatching this long after the spool was full


class Starter(Part):
    """Turns prepared claims into running attempts, at their instant."""

    def __init__(
        self,
        crew: Crew,
        attempts: Attempts,
        remeasure: Callable[[str], None],
        on_start: Callable[[int, int], None] = lambda lateness, now: None,
    ) -> None:
        super().__init__(crew)
        self.attempts = attempts
        self.stager = Stager(crew)
        self.remeasure = remeasure  # measure the clock again (after a step)
        self.on_start = on_start  # an attempt started: (lateness, now), for the metrics
        self.full_until = 0  # monotonic µs: no dispatching before (the spool was full)
        self.asked: list[tuple[Prepared, int]] = []  # sent to the keeper: (attempt, its instant)

    def start_due(self, prepared: list[Prepared]) -> list[Prepared]:
        """Spawn the prepared tasks that are due; return the rest for a later turn.

        A task due within LEAD of now is started here: the keeper waits for
        its exact instant (or this does, for an sh supervisor); one due later
        goes back to the loop, which sleeps until it while still reaping
        children and hearing signals and the doorbell. The keeper is sent
        every request of the turn, and its answers are heard at the next turn
        (hear()), so that it waits and spawns on its core while the loop
        prepares the next attempt, and sleeps, and settles the ends.
        """
        later = []
        for ready in prepared:
            run_at = ready.claim.task.run_at
            if self.clock.earliest_start(run_at) - self.clock.now() > LEAD:
                staged = ready if ready.staged else self.stager.stage(ready)
                if staged is not None:
                    later.append(staged)
                continue
            confirmed = self._still_ours(ready)
            if confirmed is not None:
                self._spawn(confirmed, self.asked)
        return later

    def hear(self) -> list[Prepared]:
        """The keeper's answers to the last turn's requests: each attempt started, or why not.

        Heard first thing in a turn, before its ends are reaped (the keeper
        answers a spawn before it can tell of that command's end), and
        before anything counts the workers or renews the claims. Returns
        those the keeper found early (the wall clock stepped back), to be
        started anew: their files are as fresh as before, empty and unlocked.
        """
        asked, self.asked = self.asked, []
        early: list[Prepared] = []
        if not asked:
            return early
        for (ready, now), answer in zip(asked, self.attempts.keeper.answers(), strict=True):
            if isinstance(answer, Began):
                child = runner.Spawned(answer.pid, answer.proc_start, kept=True)
                self._started(ready, answer.at, child)
                continue
            if isinstance(answer, Early):
                self.remeasure("the wall clock stepped; ")
                early.append(ready)
                continue
            path = self.spool.claim_path(ready.claim)
            with self.poison.handling("task", ready.body.id, path, "start"):
                if isinstance(answer, NotRun):
                    self._not_run(ready, answer.code, answer.strerror or str(answer), now)
                else:
                    log_dir = self.spool.log_dir(ready.body.id)
                    self._keeper_gone(ready, log_dir, now, answer)
        return early

    def _still_ours(self, ready: Prepared) -> Prepared | None:
        """Check, within LEAD of the start, that the claim is still ours.

        Soon after the start rename a look suffices (a takeover needs the lease
        to run out). Later (a daemon paused, a long wait) the claim is renewed
        by rename, which fails if it was taken or cancelled meanwhile; a look
        could be fooled by a shared filesystem's cached names.
        """
        now = self.clock.now()
        if self.clock.mono() - ready.mono < self.lease // 3:
            if os.path.exists(self.spool.claim_path(ready.claim)):
                return ready
        else:
            try:
                claim = transitions.renew(
                    self.spool, ready.claim, self.expiry(now), self.commit.touched
                )
                return Prepared(claim, ready.body, ready.user, self.clock.mono(), ready.staged)
            except FileNotFoundError:
                pass
        # Cancelled (or taken) in the moment since we prepared it.
        self.settler.vanished_before_start(ready.claim, now)
        return None

    def _spawn(self, ready: Prepared, asked: list[tuple[Prepared, int]]) -> None:
        """Start the attempt (the poison guard's handling of the file), or ask the keeper to."""
        body = ready.body
        now = self.clock.now()
        child = None
        with self.poison.handling("task", body.id, self.spool.claim_path(ready.claim), "start"):
            child = self._launch(ready, now, asked)
        if child is not None:
            self._started(ready, child.at or now, child)

    def _started(self, ready: Prepared, now: int, child: runner.Spawned) -> None:
        """Journal the attempt's start (at `now`, the instant of its spawn) and watch it."""
        held, body = ready.claim, ready.body
        crash_point("daemon.spawned")
        log_dir = self.spool.log_dir(body.id)
        lateness = now - held.task.run_at
        self.on_start(lateness, now)
        _record_start(log_dir, held, child, now, self.daemon)
        run = Running(held, body, child.pid, self.clock.mono(), group=child.group, kept=child.kept)
        run.proc_start = child.proc_start
        if child.unjoined is not None:
            run.notes.append(child.unjoined)
        self.attempts.add_child(run)
        log.info(
            "started %s attempt %d pid %d lateness %s",
            body.id,
            held.task.attempt,
            child.pid,
            format_duration(lateness),
        )

    def _launch(
        self, ready: Prepared, now: int, asked: list[tuple[Prepared, int]]
    ) -> runner.Spawned | None:
        """Spawn the attempt (in its cgroup, if it asks for limits), or ask the keeper to.

        None if it did not start here: it failed, or it is in `asked`, whose
        answers come once the turn's requests are all sent.
        """
        held, body = ready.claim, ready.body
        log_dir = self.spool.log_dir(body.id)
        scheduled = journal.scheduled_for(log_dir, held.task.attempt, held.task.run_at, body.run_at)
        env = runner.task_env(body, held, self.spool.root, scheduled, ready.user)
        group = None
        try:
            if not (ready.staged or self.stager.owns_id(ready, log_dir, now)):
                return None
            if body.limits is not None:
                group = self._group(ready, now)
                if group is None:
                    return None
            else:
                at = _instants(self.clock, self.remeasure, held.task.run_at)
                if runner.ask(self.attempts.keeper, body, held.task, log_dir, env, ready.user, at):
                    asked.append((ready, max(now, at[0])))
                    crash_point("daemon.asked")
                    return None
            _wait_until_due(self.clock, self.remeasure, held.task.run_at)
            now = self.clock.now()
            join = None if group is None else group.join
            child = runner.spawn(body, held.task, log_dir, env, ready.user, join)
            child.group, child.at = group, now
            return child
        except KeeperGone as e:
            self._keeper_gone(ready, log_dir, now, e)
        except runner.AttemptBusy:
            self.settler.vanished_before_start(held, now)  # taken over while we were paused
        except runner.AttemptUsed as e:  # never append to (or show) another attempt's output
            reason = (
                f"attempt {held.task.attempt} of {body.id} ran already ({e.filename} holds output)"
            )
            self.settler.quarantine(self.spool.claim_path(held), reason, now)
        except OSError as e:
            self._failed(ready, e, now)
        if group is not None:  # it never ran in it
            self.attempts.confinement.ended(group, body.limits or Resources())
        return None

    def _group(self, ready: Prepared, now: int) -> Group | None:
        """The attempt's cgroup, made; None (the task refused) where it can have none.

        A daemon without the cgroups a task asks for fails it at once, with
        the reason: it never runs a task unlimited that asked for limits,
        and retrying here could not help. A group that cannot be made (the
        kernel refused a limit, or is out of cgroups) is a failed attempt.
        """
        held, body = ready.claim, ready.body
        assert body.limits is not None
        refusal = self.attempts.confinement.refusal(body.limits)
        if refusal is None:
            try:
                return self.attempts.confinement.make(f"{body.id}.{held.task.attempt}", body.limits)
            except OSError as e:
                error = f"cannot make its cgroup: {e.filename}: {e.strerror}"
                log.error("cannot start %s: %s", body.id, error)
                self.settler.note(held, Event.SPAWN_FAILED, now, error=error)
                self.settler.on_attempt_end(127)
                self.settler.after_attempt(held, body, 127, now)
                return None
        log.error("refused %s: %s", body.id, refusal)
        self.settler.note(held, Event.SPAWN_FAILED, now, error=refusal)
        self.settler.finish(held, State.FAILED, now, body, event=Event.DEAD, reason=refusal)
        return None

    def _failed(self, ready: Prepared, e: OSError, now: int) -> None:
        """No room to start (disk full, read-only): put it back and pause; else a failure."""
        if e.errno in fsutil.TEMPORARY_ERRNOS:
            # Not a failed attempt: the task returns to pending unchanged, and
            # dispatching pauses a while; it runs once the spool can be written.
            self.settler.release(ready.claim, now, f"cannot start: {e.strerror}")
            self.full_until = self.clock.mono() + FULL_WAIT
            pause = format_duration(FULL_WAIT)
            log.error(
                "cannot start %s: %s; pausing dispatch for %s", ready.body.id, e.strerror, pause
            )
            return
        self._not_run(ready, 127, str(e), now)

    def _not_run(self, ready: Prepared, code: int | None, error: str, now: int) -> None:
        """The attempt could not start: a failed attempt with this status (None: lost)."""
        log.error("cannot start %s: %s", ready.body.id, error)
        self.settler.note(ready.claim, Event.SPAWN_FAILED, now, error=error)
        self.settler.on_attempt_end(code)
        self.settler.after_attempt(ready.claim, ready.body, code, now)

    def _keeper_gone(self, ready: Prepared, log_dir: str, now: int, e: KeeperGone) -> None:
        """The keeper went away as it was asked: the status file says whether the attempt began.

        It writes "S" before the spawn: without it, nothing ran (the task goes
        back, unchanged); with it, the command may have started, and its pid
        never reached us: the attempt is lost.
        """
        began, _ = attemptfiles.read_supervisor(log_dir, ready.claim.task.attempt)
        if not began:
            self.settler.release(ready.claim, now, f"cannot start: {e.strerror}")
            return
        self._not_run(ready, None, f"{e.strerror} as the attempt began; it may have run", now)


def _record_start(
    log_dir: str, held: ClaimName, child: runner.Spawned, now: int, daemon: DaemonId
) -> None:
    """The attempt's `start` record: where and when it began, and under which claim."""
    journal.append(
        log_dir,
        Event.START,
        now,
        attempt=held.task.attempt,
        host=daemon.host,
        pid=child.pid,
        proc_start=child.proc_start,
        daemon_pid=daemon.pid,
        run_at=format_iso(held.task.run_at),
        lateness=(now - held.task.run_at) / SECOND,
        fence=fence.token(held),
    )


def _instants(clock: Clock, remeasure: Callable[[str], None], run_at: int) -> tuple[int, int]:
    """The earliest start on both clocks, measured again first if the wall clock stepped."""
    if clock.stepped():
        remeasure("the wall clock stepped; ")
    return clock.start_instants(run_at)


def _wait_until_due(clock: Clock, remeasure: Callable[[str], None], run_at: int) -> None:
    """Sleep to the exact instant a prepared task may start, never before it.

    A wall-clock step while we wait counts at once (Clock.earliest_start
    follows it); we measure against the spool again before starting.
    """
    while True:
        if clock.stepped():
            remeasure("the wall clock stepped; ")
        now = clock.now()
        if clock.may_start(run_at, now):
            return
        time.sleep((clock.earliest_start(run_at) - now) / SECOND)
