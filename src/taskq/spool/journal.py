"""The per-task attempt journal: append-only JSON lines in logs/<id>/journal.

History never goes into the task body: every start, end, retry, takeover,
release, expiry and cancellation is one line here. Readers tolerate a torn last
line (a crash mid-append) by skipping what does not parse.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from typing import Any

from taskq.spool.layout import journal_path
from taskq.times.timespec import format_iso


class Event(StrEnum):
    """What a journal line records: its "event" (taskq-spool(5), JOURNAL and SCHEDULES)."""

    # An attempt, by the daemon that holds its claim.
    START = "start"
    END = "end"
    LATE_END = "late-end"  # ended after its lease was lost; the new owner records the end
    RETRY = "retry"  # the next attempt, after a backoff
    DEAD = "dead"  # failed for good: attempts exhausted
    EXPIRED = "expired"  # past its --expires deadline: failed, never started
    SPAWN_FAILED = "spawn-failed"
    FILED = "filed"  # a member's submission, filed from the drop by a daemon
    # A claim changing hands.
    TAKEN_OVER = "taken-over"
    ADOPTED = "adopted"  # a taken-over attempt that still runs, watched to its end
    LEASE_LOST = "lease-lost"
    HANDED_OVER = "handed-over"  # to another daemon of this host, which watches it now
    RELEASED = "released"  # back to pending (a claim never started, a dependent, a queued slot)
    # Operators, dependencies and the teller.
    CANCEL_REQUESTED = "cancel-requested"
    CANCELLED = "cancelled"
    RESCHEDULED = "rescheduled"
    RETRIED = "retried"  # an operator's retry: a fresh budget of attempts
    REVOKED = "revoked"  # a record written ahead of a rename that lost its race
    TOLD = "told"  # the [notify] hook and mail were run
    # A schedule's own journal.
    ADDED = "added"
    REPLACED = "replaced"
    PAUSED = "paused"
    RESUMED = "resumed"
    MADE = "made"  # an occurrence submitted ahead of its slot
    CAUGHT_UP = "caught-up"  # an occurrence made for a slot missed while no daemon ran
    SKIPPED = "skipped"
    QUEUED = "queued"  # held until the occurrence before it ends (--overlap queue)
    REPLACING = "replacing"  # held until the running one it stops has ended (--overlap replace)
    STOPPED = "stopped"  # a running occurrence cancelled by a replacing one
    MANUAL = "manual"  # an occurrence asked for by hand (taskq schedule run)
    BACKFILLED = "backfilled"  # an occurrence made for a past slot (taskq schedule backfill)
    SKIP = "skip"  # an operator's skip of the slots before skip_before (taskq schedule skip)


def append(log_dir: str, event: Event, now: int, **fields: Any) -> bool:
    """Append one record, creating the log directory if needed.

    Most records are history, not state: a record that cannot be written
    (disk full) is logged and skipped, and the caller carries on. Returns
    success.
    """
    try:
        _write(log_dir, _line(event, now, fields), sync=False)
    except OSError as e:
        import logging  # rarely: off submit's import budget (tests/e2e/test_submit.py)

        logging.getLogger("taskq").warning("cannot journal %s in %s: %s", event, log_dir, e)
        return False
    return True


def begin(log_dir: str, event: Event, now: int, group: int | None, **fields: Any) -> bool:
    """Append a task's first record, making its journal readable by `group` (0640) if given.

    For a root daemon's record of a member's task: the member, alone in its
    own group, may then read its history (runas.private_group). Like
    append, a record that cannot be written is logged and skipped.
    """
    try:
        fd = _open(log_dir)
        try:
            if group is not None:
                os.fchown(fd, -1, group)
                os.fchmod(fd, 0o640)
            os.write(fd, _after_torn(fd) + _line(event, now, fields))
        finally:
            os.close(fd)
    except OSError as e:
        import logging

        logging.getLogger("taskq").warning("cannot journal %s in %s: %s", event, log_dir, e)
        return False
    return True


def append_durable(log_dir: str, event: Event, now: int, **fields: Any) -> None:
    """Append a record that decides what the daemon does, and fsync it; OSError if not.

    An operator's `rescheduled` and `retried` records set a task's schedule
    and its budget of attempts, so they are written before the change they
    announce and made durable, and a failure stops the change.
    """
    _write(log_dir, _line(event, now, fields), sync=True)


def _line(event: Event, now: int, fields: dict[str, Any]) -> bytes:
    record = {"event": event, "time": format_iso(now), **fields}
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def _write(log_dir: str, line: bytes, sync: bool) -> None:
    fd = _open(log_dir)
    try:
        os.write(fd, _after_torn(fd) + line)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync:
        from taskq.spool.fsutil import fsync_dir

        fsync_dir(log_dir)  # a journal created just now


def _open(log_dir: str) -> int:
    try:
        return os.open(journal_path(log_dir), _FLAGS, 0o600)
    except FileNotFoundError:
        from taskq.spool.fsutil import ensure_dir

        ensure_dir(log_dir)
        return os.open(journal_path(log_dir), _FLAGS, 0o600)
    except PermissionError:  # may append but not read: no torn-record check
        return os.open(journal_path(log_dir), _FLAGS & ~os.O_RDWR | os.O_WRONLY)


def _after_torn(fd: int) -> bytes:
    """A newline if the journal ends in a torn record (a crash mid-append), else nothing.

    Without it the next record would be glued to the torn one, and both lost.
    """
    size = os.fstat(fd).st_size
    try:
        if size and os.pread(fd, 1, size - 1) != b"\n":
            return b"\n"
    except OSError:  # opened write-only
        pass
    return b""


_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def read(log_dir: str) -> list[dict[str, Any]]:
    """Return every well-formed record, oldest first; [] if there is none."""
    try:
        with open(journal_path(log_dir), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("event"), str):
            records.append(record)
    return records


def budget_start(records: list[dict[str, Any]], attempt: int) -> int:
    """The first attempt of the task's current budget: 1, or an operator's retry.

    Only a retry that took effect counts: its record is not revoked, and its
    attempt number is not beyond the attempt the task has reached (a retry
    whose rename never happened, after a crash, names an attempt never made).
    """
    first = 1
    for i, r in enumerate(records):
        n = r.get("attempt")
        if r["event"] != Event.RETRIED or not isinstance(n, int) or n > attempt:
            continue
        if not _revoked(r, records[i + 1 :]):
            first = n
    return first


def last_end(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The `end` record of the latest attempt that has one (its first, if several).

    Each attempt has one `end`: the daemon that held its claim writes it,
    and a daemon that lost the lease meanwhile writes `late-end` instead.
    Ordering by attempt, not by place in the file, keeps the answer the
    same however the records of racing daemons interleave.
    """
    best: dict[str, Any] | None = None
    for r in records:
        n = r.get("attempt")
        if r["event"] != Event.END or not isinstance(n, int):
            continue
        if best is None or n > best["attempt"]:
            best = r
    return best


def exit_status(records: list[dict[str, Any]]) -> int | None:
    """The task's last exit status, as a shell reports it (128+N for signal N); None if none."""
    last = last_end(records)
    if last is None or not isinstance(last.get("exit_status", last.get("signal")), int):
        return None
    return int(last["exit_status"]) if "exit_status" in last else 128 + int(last["signal"])


def revoke(log_dir: str, event: Event, written: int) -> None:
    """Cancel a record written ahead of a rename that then lost its race."""
    append(log_dir, Event.REVOKED, written, revokes=f"{event}@{format_iso(written)}")


def _revoked(record: dict[str, Any], later: list[dict[str, Any]]) -> bool:
    mark = f"{record['event']}@{record.get('time')}"
    return any(r["event"] == Event.REVOKED and r.get("revokes") == mark for r in later)


def expired(records: list[dict[str, Any]]) -> bool:
    """Whether the task's latest fate was to expire (a later retry clears it)."""
    fate = False
    for r in records:
        if r["event"] == Event.EXPIRED:
            fate = True
        elif r["event"] in (Event.RETRIED, Event.START):
            fate = False
    return fate


def scheduled_for(log_dir: str, attempt: int, run_at: int, default: int) -> int:
    """A task's run time as last set by a person (submit, reschedule, retry).

    The name is authoritative for the first attempt (its run_at is the one
    submit or a reschedule set): then run_at (the name's) is the answer and
    no journal is read. A later attempt's schedule is the last `rescheduled`
    or `retried` record that took effect, or the submitted one (default).
    """
    if attempt == 1:
        return run_at
    return person_schedule(read(log_dir), attempt, run_at, default)


def person_schedule(records: list[dict[str, Any]], attempt: int, run_at: int, default: int) -> int:
    """The last run time that an operator's record set and that took effect.

    A record took effect if it is not revoked and names an attempt reached
    so far, with the run time that attempt then had: the current name's
    (run_at) for the current attempt, its start record's for an earlier
    one. A record whose rename never happened (a crash between the two)
    fails that test and is ignored.
    """
    from taskq.times.when import parse_when

    started = {
        r.get("attempt"): r.get("run_at")
        for r in records
        if r["event"] == Event.START and isinstance(r.get("run_at"), str)
    }
    scheduled = default
    for i, r in enumerate(records):
        n, when = r.get("attempt"), r.get("run_at")
        if r["event"] not in (Event.RESCHEDULED, Event.RETRIED) or not isinstance(when, str):
            continue
        if not isinstance(n, int) or n > attempt or _revoked(r, records[i + 1 :]):
            continue
        truth = format_iso(run_at) if n == attempt else started.get(n)
        if r["event"] == Event.RESCHEDULED and truth is not None and truth != when:
            continue  # overtaken by a later change, or never made
        scheduled = parse_when(when, default)
    return scheduled
