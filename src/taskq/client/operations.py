"""What operators do to tasks: reschedule, retry, cancel.

Each change is one rename of the exact name just found, so it races safely
with daemons: if the task moved meanwhile, the rename fails with ENOENT and
we look again, then either succeed or say why the new state does not allow
it. Each change is journalled and made durable before we report it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from taskq.errors import Conflict, TaskqError
from taskq.spool import byid, deps, fsutil, hints, journal, transitions
from taskq.spool.ending import End, end_task
from taskq.spool.faults import crash_point
from taskq.spool.journal import Event
from taskq.spool.layout import Located, Spool
from taskq.spool.states import END_STATES, State
from taskq.spool.task import MAX_ATTEMPT, TaskName, check_id
from taskq.times.clock import wall_us
from taskq.times.timespec import format_iso

TRIES = 5


def _durable(*directories: str) -> None:
    for directory in directories:
        fsutil.fsync_dir(directory)


def _with_retries(spool: Spool, task_id: str, act: Callable[[Located], Any]) -> Any:
    """Locate the task and act on it, looking again when it moves meanwhile."""
    for _ in range(TRIES):
        found = byid.locate(spool, task_id)
        try:
            return act(found)
        except FileNotFoundError:
            continue
    raise Conflict(f"task {check_id(task_id)} keeps changing state; try again")


def cancel(spool: Spool, task_id: str) -> Located:
    """Cancel a pending, claimed or running task; return where it was."""

    def act(found: Located) -> Located:
        if found.state in END_STATES:
            raise Conflict(f"task {found.name.id} is already {found.state}")
        log_dir = spool.log_dir(found.name.id)
        if found.state == State.CANCELLING:
            return found  # asked already; its daemon is stopping it
        if found.state == State.RUNNING and found.claim is not None:
            transitions.request_cancel(spool, found.claim)
            crash_point("cancel.renamed")
            _durable(spool.claimed)
            journal.append(
                log_dir,
                Event.CANCEL_REQUESTED,
                wall_us(),
                attempt=found.name.attempt,
                by_pid=os.getpid(),
            )
            spool.ring()  # its daemon sees the claim renamed and stops the attempt
            return found
        now = wall_us()
        end = end_task(
            spool,
            found,
            State.CANCELLED,
            now,
            Event.CANCELLED,
            point="cancel.renamed",
            was=found.state,
            by_pid=os.getpid(),
        )
        _release_dependents(spool, found, end, now)
        return found

    result: Located = _with_retries(spool, task_id, act)
    return result


def _release_dependents(spool: Spool, found: Located, end: End, now: int) -> None:
    """After a cancel: what waited for the task is resolved; a waiting task waits no more."""
    if found.state == State.WAITING:
        with contextlib.suppress(TaskqError, OSError):
            deps.forget(spool, spool.read_body(end.path).after, found.name)
    if end.waited_for:
        deps.release_waiters(spool, found.name.id, now)


def _recorded_move(
    spool: Spool,
    found: Located,
    event: Event,
    fields: dict[str, Any],
    move: Callable[[], TaskName],
) -> TaskName:
    """Journal a schedule change, then make it; revoke the record if the move fails.

    The record goes first, so a daemon that claims the task right after the
    rename already sees its new schedule; a lost race (or any failed rename)
    revokes it.
    """
    log_dir = spool.log_dir(found.name.id)
    written = _record(log_dir, event, found.name.attempt, fields)
    if event == Event.RETRIED:
        crash_point("retry.recorded")
    else:
        crash_point("reschedule.recorded")
    try:
        name = move()
    except OSError:
        if written is not None:
            journal.revoke(log_dir, event, written)
        raise
    if event == Event.RETRIED:
        crash_point("retry.moved")
    else:
        crash_point("reschedule.moved")
    hints.point_name(spool, name)
    _durable(os.path.dirname(found.path), spool.bucket_dir(name.bucket), spool.pending)
    spool.ring()
    return name


def _record(log_dir: str, event: Event, attempt: int, fields: dict[str, Any]) -> int | None:
    """Write the durable record of a schedule change; its time, or None if not needed.

    A first attempt's schedule is its file name, so a member of a shared
    spool, who may reschedule his own pending task but not write logs/,
    moves it without the record. A later attempt's schedule is the record.
    """
    written = wall_us()
    try:
        journal.append_durable(log_dir, event, written, **fields)
    except PermissionError:
        if event != Event.RESCHEDULED or attempt != 1:
            raise
        return None
    return written


def reschedule(spool: Spool, task_id: str, run_at: int) -> TaskName:
    """Move a pending task to another run time."""

    def act(found: Located) -> TaskName:
        if found.state != State.PENDING:
            raise Conflict(
                f"task {found.name.id} is {found.state}; only a pending task can be rescheduled"
            )
        fields = {
            "attempt": found.name.attempt,
            "run_at": format_iso(run_at),
            "previous": format_iso(found.name.run_at),
        }
        return _recorded_move(
            spool,
            found,
            Event.RESCHEDULED,
            fields,
            lambda: transitions.reschedule(spool, found, run_at),
        )

    result: TaskName = _with_retries(spool, task_id, act)
    return result


def retry(spool: Spool, task_id: str, run_at: int) -> TaskName:
    """Put a failed task back in pending, as a new attempt with a fresh budget."""

    def act(found: Located) -> TaskName:
        if found.state != State.FAILED:
            raise Conflict(
                f"task {found.name.id} is {found.state}; only a failed task can be retried"
            )
        if found.name.attempt >= MAX_ATTEMPT:
            raise Conflict(
                f"task {found.name.id} is at attempt {found.name.attempt}, the last a task "
                "can have (its TASKQ_FENCE must fit 64 bits); submit it again instead"
            )
        fields = {
            "attempt": found.name.attempt + 1,
            "run_at": format_iso(run_at),
            "by_pid": os.getpid(),
        }
        name = _recorded_move(
            spool, found, Event.RETRIED, fields, lambda: transitions.requeue(spool, found, run_at)
        )
        deps.reopen(spool, name.id)  # it has not ended any more: tasks after it wait again
        return name

    result: TaskName = _with_retries(spool, task_id, act)
    return result
