"""Watching tasks from outside: `taskq wait` until they end, `taskq logs -f` as they run.

Read-only: a wait looks tasks up by id (spool/byid.py) and is woken early by
inotify on the end-state directories (endwatch.py) for ends made on this
host; a follow copies an attempt's output as it grows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from taskq.errors import CorruptFile, NotFound
from taskq.observe.endwatch import POLL_UNWATCHED, POLL_WATCHED, EndWatch
from taskq.spool import attemptfiles, byid, fsutil, journal
from taskq.spool.layout import Located, Spool, output_attempt
from taskq.spool.states import END_STATES, State
from taskq.spool.task import check_id


def ended(spool: Spool, task_id: str) -> Located | None:
    """The task if it is in an end state, else None (a lookup by id: O(1))."""
    try:
        found = byid.locate(spool, task_id)
    except NotFound:
        return None  # pruned meanwhile; wait's first lookup said it existed
    return found if found.state in END_STATES else None


class Gone(NamedTuple):
    """An awaited task that left the spool without ending: quarantined, or removed."""

    id: str
    why: str  # "quarantined: REASON" (its .reason in corrupt/), or "removed"


def gone(spool: Spool, task_id: str) -> Gone | None:
    """The task's quarantine in corrupt/ (named TIME_TASKNAME there), if it has one."""
    for entry in fsutil.listdir(spool.corrupt):
        if task_id in entry and not entry.endswith(".reason"):
            try:
                data, _ = fsutil.read_small(os.path.join(spool.corrupt, entry + ".reason"), 4096)
                reason = data.decode("utf-8", "replace").strip().partition(": ")[2]
            except (OSError, CorruptFile):
                reason = "no reason recorded"
            return Gone(task_id, f"quarantined: {reason or 'no reason recorded'}")
    return None


def wait(spool: Spool, task_ids: list[str], timeout: float | None) -> Iterator[Located | Gone]:
    """Yield each task as it reaches an end state, or as it leaves; stop at the timeout.

    Each poll looks up every id still awaited (O(1) each: byid.py); between
    polls, inotify names the ids that just ended on this host (endwatch.py),
    and only those are looked up at once. A task that is nowhere any more
    was quarantined (a daemon found its file bad: found in corrupt/ at
    once) or removed by hand (nowhere in two polls running, so that a task
    moving back and forth while we looked is not taken for gone): it will
    never end, and waiting for it must not last for ever.
    """
    waiting = {check_id(t) for t in task_ids}
    for task_id in waiting:
        byid.locate(spool, task_id)  # NotFound now, not a silent wait forever
    deadline = None if timeout is None else time.monotonic() + timeout
    watch: EndWatch | None = None  # started only if the first poll leaves some to wait for
    try:
        pause, next_full, check = 0.02, 0.0, set(waiting)
        missing: set[str] = set()  # nowhere at the last look
        while True:
            now = time.monotonic()
            if now >= next_full:  # a full poll: ends on other hosts, or unwatched
                check, next_full = set(waiting), now + pause
                longest = POLL_WATCHED if watch and watch.watching else POLL_UNWATCHED
                pause = min(pause * 1.5, longest)
            yield from _ended_of(spool, waiting, check, missing)
            now = time.monotonic()
            if not waiting or (deadline is not None and now >= deadline):
                return
            watch = watch or EndWatch(spool)
            wake_at = next_full if deadline is None else min(next_full, deadline)
            check = watch.take(max(wake_at - now, 0.0)) & waiting
    finally:
        if watch is not None:
            watch.stop()


def _ended_of(
    spool: Spool, waiting: set[str], check: set[str], missing: set[str]
) -> Iterator[Located | Gone]:
    for task_id in sorted(check):
        try:
            found: Located | Gone | None = byid.locate(spool, task_id)
        except NotFound:
            found = gone(spool, task_id)
            if found is None and task_id in missing:
                found = Gone(task_id, "removed")
            missing.add(task_id)
        else:
            missing.discard(task_id)
        if isinstance(found, Located) and found.state not in END_STATES:
            continue
        if found is not None:
            waiting.discard(task_id)
            yield found


def outcome(spool: Spool, found: Located) -> tuple[str, int | None]:
    """How an ended task ended: (done|failed|expired|cancelled, last exit status)."""
    records = journal.read(spool.log_dir(found.name.id))
    status = journal.exit_status(records)
    if found.state == State.FAILED and journal.expired(records):
        return "expired", status
    return found.state, status


def follow(spool: Spool, task_id: str, attempt: int | None, write: Callable[[bytes], None]) -> None:
    """Copy an attempt's output as it grows, like tail -f, until the attempt ends."""
    task_id = check_id(task_id)
    byid.locate(spool, task_id)  # NotFound (exit 3) for no such task, as without -f
    log_dir = spool.log_dir(task_id)
    while attempt is None:
        attempt = latest_attempt(log_dir)
        if attempt is None:
            if ended(spool, task_id) is not None:
                return  # ended without ever running (cancelled, expired)
            byid.locate(spool, task_id)
            time.sleep(0.1)
    offset = 0
    while True:
        running = attemptfiles.supervisor_alive(log_dir, attempt)
        try:
            data = attemptfiles.read_output(log_dir, attempt, offset)
        except FileNotFoundError:
            data = b""
        if data:
            write(data)
            offset += len(data)
        if not running and not data:
            return
        if len(data) < 1 << 20:  # caught up with it (a full read may have more behind it)
            time.sleep(0.1)


def latest_attempt(log_dir: str) -> int | None:
    """The highest attempt number with an output file, if any."""
    numbers = [n for e in fsutil.listdir(log_dir) if (n := output_attempt(e)) is not None]
    return max(numbers, default=None)
