"""Keeping claims and taking them back: lease renewal, takeover, adoption of orphans.

The daemon renews the leases of its attempts every third of a lease. A
renewal that finds its claim gone learns that `taskq cancel` asked the
attempt to stop (the claim is now `cancelling`), or that another daemon took
the claim over: then the attempt is killed at once, which bounds the
duplicate window by the lease. Claims whose daemon is gone (on this host:
its lock is free) or whose lease has surely expired (by our clock, with its
uncertainty) are taken over: a claim never started goes back to pending; a
started one is adopted if its attempt still runs here, settled from the
status its supervisor recorded if it ended, and otherwise recorded as lost.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from taskq.daemon import runner
from taskq.daemon.attempts import Attempts, Running
from taskq.daemon.crew import Crew, Part
from taskq.errors import CorruptFile
from taskq.spool import attemptfiles, fsutil, journal, layout, transitions
from taskq.spool import rundir as status
from taskq.spool.faults import crash_point
from taskq.spool.journal import Event
from taskq.spool.layout import stray
from taskq.spool.states import Phase
from taskq.spool.task import ClaimName, TaskBody
from taskq.times.when import parse_when

log = logging.getLogger("taskq")


class Recovery(Part):
    """Lease renewal and the takeover of claims whose daemon is gone."""

    def __init__(
        self,
        crew: Crew,
        attempts: Attempts,
        on_taken: Callable[[str, int], None] = lambda task_id, now: None,
    ) -> None:
        super().__init__(crew)
        self.attempts = attempts
        self.touched = self.commit.touched
        self.on_taken = on_taken  # a started claim is ours now: so are its permits

    def renew(self, now: int, mono: int) -> None:
        """Extend the lease of every attempt we still own."""
        expiry = self.expiry(now)
        for run in self.attempts.all():
            if run.lost:
                continue
            try:
                run.claim = transitions.renew(self.spool, run.claim, expiry, self.touched)
                crash_point("daemon.renewed")
            except FileNotFoundError:
                self.lease_lost(run, now, mono)

    def check_claims(self, now: int, mono: int) -> None:
        """After the doorbell: has any running claim of ours been renamed?"""
        for run in self.attempts.all():
            if not run.lost and not os.path.exists(self.spool.claim_path(run.claim)):
                self.lease_lost(run, now, mono)

    def lease_lost(self, run: Running, now: int, mono: int) -> None:
        """Our claim was renamed: a cancel (stop the attempt) or a takeover (kill it now)."""
        asked = self.settler.cancelling(run.claim)
        if asked is not None:
            run.claim = asked
            self.stop_for_cancel(run, mono)
            return
        holder = self._holder(run.claim)
        if holder is not None and holder.host == self.daemon.host:
            # A daemon of this host took it over while we were stopped, and it
            # adopted the attempt (it can watch it here): it is not ours to kill.
            self.attempts.hand_over(run)
            self.settler.note(run.claim, Event.HANDED_OVER, now, to=holder.daemon)
            log.warning(
                "lost the lease of %s to %s on this host; it watches attempt %d now",
                run.body.id,
                holder.daemon,
                run.claim.task.attempt,
            )
            return
        run.lost = True
        run.notes.append("lease lost")
        self.settler.note(run.claim, Event.LEASE_LOST, now)
        log.warning("lost the lease of %s; killing attempt %d", run.body.id, run.claim.task.attempt)
        self.attempts.signal(run, signal.SIGKILL, mono)

    def permits_lost(self, lost: list[str], mono: int) -> None:
        """Kill the attempts whose cluster-wide permit was taken from us (its lease expired)."""
        for run in self.attempts.all():
            if run.body.id in lost and not run.lost:
                run.notes.append("killed: its limit's permit was taken over (its lease expired)")
                attempt = run.claim.task.attempt
                log.warning("lost the permit of %s; killing attempt %d", run.body.id, attempt)
                self.attempts.signal(run, signal.SIGKILL, mono)

    def _holder(self, held: ClaimName) -> ClaimName | None:
        """Who holds this attempt's claim now, if anyone does."""
        prefix = f"{held.task}_"
        for entry in fsutil.listdir(self.spool.claimed):
            if entry.startswith(prefix):
                try:
                    return ClaimName.parse(entry)
                except ValueError:
                    continue
        return None

    def stop_for_cancel(self, run: Running, mono: int) -> None:
        """Cancelled while running: TERM the process group, KILL after the grace.

        The claim stays ours (phase cancelling, still renewed); when the
        attempt ends, the task goes to cancelled/.
        """
        run.notes.append("cancelled while running")
        log.info("cancelling %s: stopping attempt %d", run.body.id, run.claim.task.attempt)
        if run.term_sent is None:
            self.attempts.signal(run, signal.SIGTERM, mono)

    def scan(self, now: int, mono: int, trusted: bool, mine: set[str]) -> None:
        """Take back claims whose daemon is gone (this host) or whose lease expired.

        Expired leases are judged only while we trust our clock. `mine` are
        the ids of claims this daemon holds (running or prepared).
        """
        for entry in fsutil.listdir(self.spool.claimed):
            if stray(entry):
                continue
            path = os.path.join(self.spool.claimed, entry)
            try:
                held = ClaimName.parse(entry)
            except ValueError:
                self.settler.quarantine(path, "not a claim file name", now)
                continue
            if held.task.id in mine:
                continue
            why = None
            if held.host == self.daemon.host and (
                held.pid == self.daemon.pid or not self._daemon_alive(held.daemon)
            ):
                why = "its daemon is gone"
            elif trusted and self.clock.may_start(held.expiry, now):
                why = "its lease expired"
            if why is not None:
                self._take(held, now, mono, why)

    def _daemon_alive(self, daemon: str) -> bool:
        if status.daemon_alive(self.spool.run, daemon):
            return True
        status.forget(self.spool.run, daemon)
        return False

    def _take(self, old: ClaimName, now: int, mono: int, why: str) -> None:
        expiry = self.expiry(now)
        try:
            held = transitions.take_over(self.spool, old, self.daemon, expiry, self.touched)
        except FileNotFoundError:
            return  # the owner renewed it, finished it, or another daemon was first
        crash_point("daemon.taken-over")
        log.info("took over %s from %s: %s", old.task.id, old.daemon, why)
        fields: dict[str, Any] = {"previous_owner": old.daemon, "reason": why, "phase": old.phase}
        self.settler.note(held, Event.TAKEN_OVER, now, **fields)
        if held.phase == Phase.CLAIMED:
            self.settler.release(held, now, "claimed but never started")
            return
        self.on_taken(held.task.id, now)
        path = self.spool.claim_path(held)
        with self.poison.handling("task", held.task.id, path, "recover"):
            body = self._read_body(path, now)
            if body is not None:
                self._adopt(held, body, old, now, mono)

    def _read_body(self, path: str, now: int) -> TaskBody | None:
        try:
            return self.spool.read_body(path)
        except CorruptFile as e:
            self.settler.quarantine(path, str(e), now)
        except FileNotFoundError:
            pass
        except OSError as e:
            self.settler.quarantine(path, f"unreadable: {e.strerror}", now)
        return None

    def _adopt(self, held: ClaimName, body: TaskBody, old: ClaimName, now: int, mono: int) -> None:
        """Watch an orphaned attempt to its end, or settle one that ended."""
        log_dir = self.spool.log_dir(body.id)
        attempt = held.task.attempt
        if not os.path.exists(layout.status_path(log_dir, attempt)):
            # The status file is created before the spawn: this attempt never ran.
            self.settler.settle_unbegun(held, now, "never spawned")
            return
        start = _start_record(log_dir, attempt)
        run = Running(held, body, _live_pid(start), mono, adopted=True)
        if body.timeout is not None and start is not None:
            run.started_mono -= max(0, now - parse_when(str(start["time"]), 0))
        # The supervisor's lock is only meaningful on its own host: a lock
        # taken over a shared filesystem proves nothing.
        if old.host == self.daemon.host and attemptfiles.supervisor_alive(log_dir, attempt):
            self.attempts.add_adopted(run, None if start is None else start.get("proc_start"))
            if held.phase == Phase.CANCELLING:
                self.stop_for_cancel(run, mono)
            self.settler.note(held, Event.ADOPTED, now, previous_owner=old.daemon, pid=run.pid)
            log.info("adopted running attempt %d of %s from %s", attempt, body.id, old.daemon)
            return
        self._settle_orphan(run, old, log_dir, now)

    def _settle_orphan(self, run: Running, old: ClaimName, log_dir: str, now: int) -> None:
        """An orphan no longer running here: it never began, ended, or was lost."""
        attempt, task_id = run.claim.task.attempt, run.body.id
        began, code = attemptfiles.read_supervisor(log_dir, attempt)
        if not began:
            # Its daemon died between creating the status file and the spawn.
            self.settler.settle_unbegun(run.claim, now, "never began")
            return
        if code is None and old.host != self.daemon.host:
            run.notes.append(
                f"lost: {old.daemon}'s lease expired with the attempt in flight; "
                "it may have run in part, or still run there"
            )
            log.warning("attempt %d of %s was lost with %s's lease", attempt, task_id, old.daemon)
        elif code is None:
            run.notes.append("lost: in flight when its daemon died; it may have run in part")
            log.warning("attempt %d of %s was lost with its daemon", attempt, task_id)
            if run.pid is not None:  # (its start time still matches): none of it runs on
                runner.kill_group(run.pid, signal.SIGKILL)
        else:
            run.notes.append(
                f"ended while no daemon watched; status recorded by {old.daemon}'s child"
            )
        self.attempts.end_group(run)
        self.settler.ended(run, code, now, None)

    def settle_adopted(self, task_id: str, now: int) -> None:
        """An adopted attempt whose pidfd fired, or whose poll came round: ended yet?"""
        run = self.attempts.adopted.get(task_id)
        log_dir = self.spool.log_dir(task_id)
        if run is None or not self.attempts.adopted_ended(log_dir, task_id):
            return
        path = self.spool.claim_path(run.claim)
        with self.poison.handling("task", task_id, path, "settle"):
            code = attemptfiles.read_status(log_dir, run.claim.task.attempt)
            if code is None:
                run.notes.append("supervisor died without recording a status")
            self.settler.ended(run, code, now, None)


def _start_record(log_dir: str, attempt: int) -> dict[str, Any] | None:
    found = None
    for record in journal.read(log_dir):
        if record["event"] == Event.START and record.get("attempt") == attempt:
            found = record
    return found


def _live_pid(start: dict[str, Any] | None) -> int | None:
    """The orphan's pid if the same process (by start time) still has it."""
    if start is None or not isinstance(start.get("pid"), int):
        return None
    pid = start["pid"]
    if runner.proc_start_time(pid) != start.get("proc_start"):
        return None
    return int(pid)
