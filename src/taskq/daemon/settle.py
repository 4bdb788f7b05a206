"""Carrying out what becomes of a claimed task: done, retry, dead letter, cancel, release.

Every move here is a transition of the daemon's own claim, recorded in the
task's journal and reported to the group commit. One rule runs through
them: when a claim's rename finds its source gone, `taskq cancel` may have
renamed it to the cancelling phase meanwhile; then the task is cancelled,
and otherwise someone else owns it now and the daemon does nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from taskq.daemon import policy
from taskq.daemon.attempts import Running
from taskq.daemon.commit import GroupCommit
from taskq.notify.event import Ended
from taskq.spool import journal, transitions
from taskq.spool.ending import end_task
from taskq.spool.faults import crash_point
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.states import Phase, State
from taskq.spool.task import ClaimName, TaskBody, TaskName
from taskq.times.timespec import format_iso

log = logging.getLogger("taskq")


class Settler:
    """Moves the daemon's claims to where policy says, journalling each move."""

    def __init__(
        self,
        spool: Spool,
        commit: GroupCommit,
        backoff: policy.Backoff,
        requeued: Callable[[TaskName], None],
        on_end: Callable[[Ended, bool], None] = lambda ended, waited_for: None,
        on_attempt_end: Callable[[int | None], None] = lambda code: None,
    ) -> None:
        self.spool = spool
        self.commit = commit
        self.backoff = backoff
        self.requeued = requeued  # a task went back to pending: the due index wants it
        self.on_end = on_end  # a task ended (and whether something waits for it)
        self.on_attempt_end = on_attempt_end  # an attempt ended so (the metrics count it)

    def note(self, held: ClaimName, event: Event, now: int, **fields: Any) -> None:
        log_dir = self.spool.log_dir(held.task.id)
        journal.append(log_dir, event, now, attempt=held.task.attempt, **fields)

    def quarantine(self, path: str, reason: str, now: int) -> None:
        if self.spool.quarantine(path, reason, now):
            log.warning("quarantined %s: %s", os.path.relpath(path, self.spool.root), reason)

    def cancelling(self, held: ClaimName) -> ClaimName | None:
        """The claim as `taskq cancel` renamed it, if that is what happened."""
        if held.phase == Phase.CANCELLING:
            return None
        asked = held.with_(phase=Phase.CANCELLING)
        return asked if os.path.exists(self.spool.claim_path(asked)) else None

    def _lost_race(self, held: ClaimName, now: int, when: str, ran: bool = True) -> None:
        """Our claim's rename found it gone: settle a cancel, or leave it to its new holder.

        If the attempt ran, another daemon took the claim over while it was in
        flight (we were stopped past the lease): it may run again there, so the
        journal records this attempt as one whose lease was lost.
        """
        asked = self.cancelling(held)
        if asked is not None:
            self.finish(asked, State.CANCELLED, now, event=Event.CANCELLED, reason=when)
        elif ran:
            self.note(held, Event.LEASE_LOST, now, reason="taken over before its end was settled")
            log.warning(
                "lost the lease of %s before settling attempt %d; its new owner settles it",
                held.task.id,
                held.task.attempt,
            )

    def ended(self, run: Running, code: int | None, now: int, duration: float | None) -> None:
        """Record an attempt's end and move its task on (unless its lease was lost)."""
        fields: dict[str, Any] = {"attempt": run.claim.task.attempt}
        if code is None:
            fields["lost"] = True
        elif code < 0:
            fields["signal"] = -code
        else:
            fields["exit_status"] = code
        if duration is not None:
            fields["duration"] = round(duration, 6)
        if run.notes:
            fields["notes"] = run.notes
        log_dir, attempt = self.spool.log_dir(run.body.id), run.claim.task.attempt
        if run.lost or not self._holds(run.claim):
            # Whoever took the claim over records this attempt's one `end`.
            journal.append(log_dir, Event.LATE_END, now, **fields)
            log.warning(
                "attempt %d of %s ended (%s) after its lease was lost; its new owner settles it",
                attempt,
                run.body.id,
                _outcome(fields),
            )
            return
        journal.append(log_dir, Event.END, now, **fields)
        self.on_attempt_end(code)
        log.info("ended %s attempt %d: %s", run.body.id, attempt, _outcome(fields))
        self.after_attempt(run.claim, run.body, code, now)

    def _holds(self, held: ClaimName) -> bool:
        """Whether the claim is still ours: as we named it, or renamed by `taskq cancel`."""
        if os.path.exists(self.spool.claim_path(held)):
            return True
        return self.cancelling(held) is not None

    def after_attempt(self, held: ClaimName, body: TaskBody, code: int | None, now: int) -> None:
        """Apply policy: done, cancelled, a retry after a backoff, or the dead letter."""
        log_dir = self.spool.log_dir(body.id)

        def budget_first() -> int:  # read only after a failure
            return journal.budget_start(journal.read(log_dir), held.task.attempt)

        out = policy.after_attempt(
            held.phase, code, held.task.attempt, budget_first, body.max_attempts, self.backoff
        )
        if out.state == State.PENDING:
            self.retry(held, now + out.delay, now)
            return
        if out.reason is not None:
            self.finish(held, out.state, now, body, event=Event.DEAD, reason=out.reason)
        else:
            self.finish(held, out.state, now, body)

    def retry(self, held: ClaimName, run_at: int, now: int) -> None:
        try:
            name = transitions.retry_later(self.spool, held, run_at, self.commit.touched)
            crash_point("daemon.finished")
        except FileNotFoundError:
            self._lost_race(held, now, "as its attempt ended")
            return
        self.note(held, Event.RETRY, now, next_attempt=name.attempt, run_at=format_iso(name.run_at))
        self.requeued(name)

    def finish(
        self,
        held: ClaimName,
        state: State,
        now: int,
        body: TaskBody | None = None,
        event: Event | None = None,
        **fields: Any,
    ) -> None:
        """End a claim's task (journalling `event`, if given); a cancel that raced the end wins."""
        touched = self.commit.touched
        try:
            end = end_task(
                self.spool,
                held,
                state,
                now,
                event,
                touched=touched,
                point="daemon.finished",
                **fields,
            )
        except FileNotFoundError:
            self._lost_race(held, now, "as its attempt ended")
            return
        self.on_end(Ended(held.task, state, end.path, body=body), end.waited_for)

    def release(self, held: ClaimName, now: int, reason: str) -> None:
        """Put a claim that never started back in pending, unchanged."""
        try:
            name = transitions.release(self.spool, held, self.commit.touched)
        except FileNotFoundError:
            return
        crash_point("daemon.released")
        self.note(held, Event.RELEASED, now, reason=reason)
        self.requeued(name)

    def settle_unbegun(self, held: ClaimName, now: int, reason: str) -> None:
        """An orphaned attempt that never began: cancelled if asked, else back to pending."""
        if held.phase == Phase.CANCELLING:
            self.finish(
                held, State.CANCELLED, now, event=Event.CANCELLED, reason="before it started"
            )
        else:
            self.release(held, now, reason)

    def vanished_before_start(self, held: ClaimName, now: int) -> None:
        """A prepared claim was gone at the instant of its start: cancelled, or taken."""
        self._lost_race(held, now, "before it started", ran=False)


def _outcome(fields: dict[str, Any]) -> str:
    if fields.get("lost"):
        return "lost"
    if "signal" in fields:
        return f"killed by signal {fields['signal']}"
    return f"exit {fields['exit_status']}"
