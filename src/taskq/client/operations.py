"""What operators do to tasks: reschedule, retry, cancel, wait, follow output.

Each change is one rename of the exact name just found, so it races safely
with daemons: if the task moved meanwhile, the rename fails with ENOENT and
we look again, then either succeed or say why the new state does not allow
it. Each change is journalled and made durable before we report it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from taskq.daemon import runner
from taskq.errors import Conflict, NotFound, TaskqError
from taskq.spool import byid, fsutil, journal, transitions
from taskq.spool.faults import crash_point
from taskq.spool.layout import END_STATES, Located, Spool
from taskq.spool.task import TaskName, check_id
from taskq.times.clock import wall_us
from taskq.times.timespec import format_iso

TRIES = 5


def _durable(*directories: str) -> None:
    for directory in directories:
        fsutil.fsync_dir(directory)


def _with_retries(spool: Spool, task_id: str, act: Callable[[Located], Any]) -> Any:
    """Locate the task and act on it, looking again when it moves meanwhile."""
    for _ in range(TRIES):
        found = spool.locate(task_id)
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
        if found.state == "cancelling":
            return found  # asked already; its daemon is stopping it
        if found.state == "running" and found.claim is not None:
            transitions.request_cancel(spool, found.claim)
            crash_point("cancel.renamed")
            _durable(spool.claimed)
            journal.append(
                log_dir,
                "cancel-requested",
                wall_us(),
                attempt=found.name.attempt,
                by_pid=os.getpid(),
            )
            spool.ring()  # its daemon sees the claim renamed and stops the attempt
            return found
        dest = transitions.cancel(spool, found)
        crash_point("cancel.renamed")
        _durable(os.path.dirname(found.path), os.path.dirname(dest))
        journal.append(
            log_dir,
            "cancelled",
            wall_us(),
            attempt=found.name.attempt,
            was=found.state,
            by_pid=os.getpid(),
        )
        _release_dependents(spool, found, dest)
        return found

    result: Located = _with_retries(spool, task_id, act)
    return result


def _release_dependents(spool: Spool, found: Located, dest: str) -> None:
    """After a cancel: what waited for the task is resolved; a waiting task waits no more."""
    from taskq.spool import deps

    if found.state == "waiting":
        with contextlib.suppress(TaskqError, OSError):
            deps.forget(spool, spool.read_body(dest).after, found.name)
    deps.after_end(spool, found.name.id, "cancelled", wall_us())


def _recorded_move(
    spool: Spool,
    found: Located,
    event: str,
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
    if event == "retried":
        crash_point("retry.recorded")
    else:
        crash_point("reschedule.recorded")
    try:
        name = move()
    except OSError:
        if written is not None:
            journal.revoke(log_dir, event, written)
        raise
    if event == "retried":
        crash_point("retry.moved")
    else:
        crash_point("reschedule.moved")
    byid.point_name(spool, name)
    _durable(os.path.dirname(found.path), spool.bucket_dir(name.bucket), spool.pending)
    spool.ring()
    return name


def _record(log_dir: str, event: str, attempt: int, fields: dict[str, Any]) -> int | None:
    """Write the durable record of a schedule change; its time, or None if not needed.

    A first attempt's schedule is its file name, so a member of a shared
    spool, who may reschedule his own pending task but not write logs/,
    moves it without the record. A later attempt's schedule is the record.
    """
    written = wall_us()
    try:
        journal.append_durable(log_dir, event, written, **fields)
    except PermissionError:
        if event != "rescheduled" or attempt != 1:
            raise
        return None
    return written


def reschedule(spool: Spool, task_id: str, run_at: int) -> TaskName:
    """Move a pending task to another run time."""

    def act(found: Located) -> TaskName:
        if found.state != "pending":
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
            "rescheduled",
            fields,
            lambda: transitions.reschedule(spool, found, run_at),
        )

    result: TaskName = _with_retries(spool, task_id, act)
    return result


def retry(spool: Spool, task_id: str, run_at: int) -> TaskName:
    """Put a failed task back in pending, as a new attempt with a fresh budget."""

    def act(found: Located) -> TaskName:
        if found.state != "failed":
            raise Conflict(
                f"task {found.name.id} is {found.state}; only a failed task can be retried"
            )
        fields = {
            "attempt": found.name.attempt + 1,
            "run_at": format_iso(run_at),
            "by_pid": os.getpid(),
        }
        return _recorded_move(
            spool, found, "retried", fields, lambda: transitions.requeue(spool, found, run_at)
        )

    result: TaskName = _with_retries(spool, task_id, act)
    return result


def ended(spool: Spool, task_id: str) -> Located | None:
    """The task if it is in an end state, else None (a lookup by id: O(1))."""
    try:
        found = spool.locate(task_id)
    except NotFound:
        return None  # pruned meanwhile; wait's first lookup said it existed
    return found if found.state in END_STATES else None


def wait(spool: Spool, task_ids: list[str], timeout: float | None) -> Iterator[Located]:
    """Yield each task as it reaches an end state; stop at the timeout.

    Each poll looks up every id still awaited (O(1) each: byid.py); between
    polls, inotify names the ids that just ended on this host (endwatch.py),
    and only those are looked up at once.
    """
    from taskq.client.endwatch import POLL_UNWATCHED, POLL_WATCHED, EndWatch

    waiting = {check_id(t) for t in task_ids}
    for task_id in waiting:
        spool.locate(task_id)  # NotFound now, not a silent wait forever
    deadline = None if timeout is None else time.monotonic() + timeout
    watch: EndWatch | None = None  # started only if the first poll leaves some to wait for
    try:
        pause, next_full, check = 0.02, 0.0, set(waiting)
        while True:
            now = time.monotonic()
            if now >= next_full:  # a full poll: ends on other hosts, or unwatched
                check, next_full = set(waiting), now + pause
                longest = POLL_WATCHED if watch and watch.watching else POLL_UNWATCHED
                pause = min(pause * 1.5, longest)
            yield from _ended_of(spool, waiting, check)
            now = time.monotonic()
            if not waiting or (deadline is not None and now >= deadline):
                return
            watch = watch or EndWatch(spool)
            wake_at = next_full if deadline is None else min(next_full, deadline)
            check = watch.take(max(wake_at - now, 0.0)) & waiting
    finally:
        if watch is not None:
            watch.stop()


def _ended_of(spool: Spool, waiting: set[str], check: set[str]) -> Iterator[Located]:
    for task_id in sorted(check):
        found = ended(spool, task_id)
        if found is not None:
            waiting.discard(task_id)
            yield found


def outcome(spool: Spool, found: Located) -> tuple[str, int | None]:
    """How an ended task ended: (done|failed|expired|cancelled, last exit status)."""
    records = journal.read(spool.log_dir(found.name.id))
    status = journal.exit_status(records)
    if found.state == "failed" and journal.expired(records):
        return "expired", status
    return found.state, status


def follow(spool: Spool, task_id: str, attempt: int | None, write: Callable[[bytes], None]) -> None:
    """Copy an attempt's output as it grows, like tail -f, until the attempt ends."""
    task_id = check_id(task_id)
    spool.locate(task_id)  # NotFound (exit 3) for no such task, as without -f
    log_dir = spool.log_dir(task_id)
    while attempt is None:
        attempt = latest_attempt(log_dir)
        if attempt is None:
            if ended(spool, task_id) is not None:
                return  # ended without ever running (cancelled, expired)
            spool.locate(task_id)
            time.sleep(0.1)
    path = runner.out_path(log_dir, attempt)
    offset = 0
    while True:
        running = runner.supervisor_alive(log_dir, attempt)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            data = b""
        if data:
            write(data)
            offset += len(data)
        if not running and not data:
            return
        time.sleep(0.1)


def latest_attempt(log_dir: str) -> int | None:
    """The highest attempt number with an output file, if any."""
    numbers = [
        int(n[:-4]) for n in fsutil.listdir(log_dir) if n.endswith(".out") and n[:-4].isdigit()
    ]
    return max(numbers, default=None)
