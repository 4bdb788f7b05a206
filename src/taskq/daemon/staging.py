"""Readying a prepared attempt ahead of its instant: its id bound, its files made.

In a shared spool an id belongs to the user who first ran a task under it
(spool/ownership.py): a task file of that id owned by anyone else is
quarantined, never run. A prepared attempt due later than the starter's
LEAD is bound and has its output and status files made (empty and
unlocked) right after its start's commit, so that near its instant only
the claim's check and the hand-off to the keeper remain.
"""

from __future__ import annotations

import contextlib
import dataclasses

from taskq.daemon import runner
from taskq.daemon.attempts import Prepared
from taskq.daemon.crew import Part
from taskq.spool import ownership
from taskq.spool.faults import crash_point


class Stager(Part):
    """Binds a prepared attempt's id to its owner and makes its files ahead of its start."""

    def stage(self, ready: Prepared) -> Prepared | None:
        """Bind the id and make the attempt's files now, ahead of its instant; None: refused.

        So that within LEAD of the instant only the claim's check and the
        hand-off remain: a directory and two files made there (a millisecond
        each on a busy disk) made starts late. A file that cannot be made
        now is made, or refused with its reason, at the start; the id of
        another user's task is quarantined here, as it would be there.
        """
        body, log_dir, now = ready.body, self.spool.log_dir(ready.body.id), self.clock.now()
        with self.poison.handling("task", body.id, self.spool.claim_path(ready.claim), "stage"):
            try:
                if not self.owns_id(ready, log_dir, now):
                    return None
            except OSError:
                return ready  # (the start binds it, and judges the error)
            with contextlib.suppress(OSError):
                runner.stage(log_dir, ready.claim.task.attempt)
            crash_point("daemon.staged")
            return dataclasses.replace(ready, staged=True)
        return None

    def owns_id(self, ready: Prepared, log_dir: str, now: int) -> bool:
        """Whether the task's file owner may run under its id (ownership.bind); if not, quarantine.

        Else a member could copy another's id into a task of his own and run
        it with the other's log directory: read their output, add to their journal.
        """
        first = ownership.bind(log_dir, ready.user.uid)
        if first == ready.user.uid:
            return True
        path = self.spool.claim_path(ready.claim)
        uid = ready.user.uid
        reason = f"id {ready.body.id} belongs to uid {first}, who ran it first, not to uid {uid}"
        self.settler.quarantine(path, reason, now)
        return False
