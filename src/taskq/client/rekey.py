"""When a key another task holds is taken over: its window ran out, or --on-key replace.

`KeyPolicy` is what submit was asked (--key-for, --on-key); `decide` says,
for the task holding the key now, whether the new submission takes the key
or leaves it. Taking it from a pending holder cancels that holder first,
by the one rename of its exact pending name, so a daemon that claims it at
the same moment either runs it (and the key stays with it) or never sees
it; the cancel is journalled with the id of the task that replaced it, and
what waited for the holder is released as after any cancel.

Keys of ended tasks: the key of a task submitted with --key-for is free
once its window has passed, whatever became of the task; with --on-key
replace, a holder that was cancelled gives its key up too. Otherwise a key
stays bound until retention removes its task (taskq-spool(5) KEYS).
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq.errors import NotFound
from taskq.spool import byid, deps
from taskq.spool.ending import end_task
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.states import State
from taskq.spool.task import TaskName

ON_KEY = ("keep", "replace")


@dataclass
class KeyPolicy:
    """--key-for (microseconds, or None: for ever) and --on-key replace; what was replaced."""

    window: int | None = None
    replace: bool = False
    replaced: str | None = None  # the id of the pending holder this submission replaced

    def until(self, submitted_at: int) -> int | None:
        return None if self.window is None else submitted_at + self.window

    def decide(
        self, spool: Spool, holder: TaskName, until: int | None, new: TaskName, now: int
    ) -> bool:
        """Whether the new task takes the key from holder (whose window ends at until)."""
        if until is not None and now >= until:
            return True
        if not self.replace:
            return False
        try:
            found = byid.locate(spool, holder.id)
        except NotFound:
            return True  # removed by hand or by retention: nothing holds the key
        if found.state == State.CANCELLED:
            return True
        if found.state != State.PENDING:
            return False  # claimed, running or ended: it keeps the key
        try:
            end = end_task(
                spool, found, State.CANCELLED, now, Event.CANCELLED, by="key", replaced_by=new.id
            )
        except FileNotFoundError:
            return False  # claimed meanwhile: it runs, and keeps the key
        if end.waited_for:
            deps.release_waiters(spool, holder.id, now)
        self.replaced = holder.id
        return True
