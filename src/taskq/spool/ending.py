"""The end of a task: its rename into an end state, its journal record, its marker.

Every path that ends a task ends it here (a daemon settling its claim,
`taskq cancel`, a waiting task whose dependency failed, a schedule
cancelling an occurrence), so that none can leave out a step: one rename
of the exact name into done/YYYYMMDD/, failed/ or cancelled/, the
journal record that says why, and, if something waits for the task (it
has a deps/ directory), the marker deps/ID/ended.STATE that its waiters
are resolved by (deps.py). The marker is written after the rename, so a
resolver that sees it finds the task ended. Resolving the waiters is the
caller's: a daemon hands them to its resolver thread, a command resolves
them at once.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from taskq.spool import fsutil, journal, transitions
from taskq.spool.faults import crash_point
from taskq.spool.journal import Event
from taskq.spool.layout import Located, Spool, marker_path
from taskq.spool.states import END_STATES, State
from taskq.spool.task import ClaimName


class End(NamedTuple):
    """A task that ended: its file in the end state, and whether something waits for it."""

    path: str
    waited_for: bool


def end_task(
    spool: Spool,
    found: Located | ClaimName,
    state: State,
    now: int,
    event: Event | None = None,
    *,
    touched: set[str] | None = None,
    point: str | None = None,
    **fields: Any,
) -> End:
    """Move a task to an end state, journal `event` (if given) and mark its end.

    A claim (or a task found in claimed/) may end in any end state; a task
    found elsewhere (pending, waiting) only in cancelled/. FileNotFoundError
    says it moved meanwhile (a lost race): then nothing else is done. With
    touched, the caller's group commit makes the rename and the marker
    durable; else they are synced here. `point` names the crash point right
    after the rename.
    """
    held = found if isinstance(found, ClaimName) else found.claim
    name = found.task if isinstance(found, ClaimName) else found.name
    moved: set[str] = set() if touched is None else touched
    if held is not None:
        dest = transitions.finish(spool, held, state, now, moved)
    elif state == State.CANCELLED:
        assert not isinstance(found, ClaimName)
        dest = transitions.cancel(spool, found, moved)
    else:
        raise ValueError(f"a task outside claimed/ cannot end {state}")
    if point is not None:
        crash_point(point)
    if touched is None:
        for directory in sorted(moved):
            fsutil.fsync_dir(directory)
    if event is not None:
        journal.append(spool.log_dir(name.id), event, now, attempt=name.attempt, **fields)
    return End(dest, mark_ended(spool, name.id, state, touched))


def marker(spool: Spool, task_id: str) -> State | None:
    """How a dependency ended, as its marker says; None if no end is recorded."""
    directory = spool.dep_dir(task_id)
    for state in END_STATES:
        if os.path.lexists(marker_path(directory, state)):
            return state
    return None


def mark_ended(spool: Spool, task_id: str, state: State, touched: set[str] | None = None) -> bool:
    """Record that a task ended, if something waits for it; True if something may.

    With touched, the caller's group commit makes the marker durable; else
    it is synced here. The first marker stands (an end is not undone).
    """
    directory = spool.dep_dir(task_id)
    if not os.path.isdir(directory):
        return False
    if marker(spool, task_id) is None:
        try:
            fsutil.write_new(marker_path(directory, state), b"", sync=False)
        except FileExistsError:
            pass
        except FileNotFoundError:
            return False  # emptied and removed meanwhile: nothing waits
    if touched is None:
        fsutil.fsync_dir(directory)
    else:
        touched.add(directory)
    return True
