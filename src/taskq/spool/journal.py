"""The per-task attempt journal: append-only JSON lines in logs/<id>/journal.

History never goes into the task body: every start, end, retry, takeover,
release, expiry and cancellation is one line here. Readers tolerate a torn last
line (a crash mid-append) by skipping what does not parse, and any record
whose known fields are not what their readers need (read's `_checked`).
Neither reading nor appending ever blocks on, or follows, what stands at
the journal's name.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from taskq.errors import CorruptFile
from taskq.spool import fields
from taskq.spool.fsutil import ensure_dir, fsync_dir, read_tail
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


def append(log_dir: str, event: Event, now: int, **values: Any) -> bool:
    """Append one record, creating the log directory if needed.

    Most records are history, not state: a record that cannot be written
    (disk full) is logged and skipped, and the caller carries on. Returns
    success.
    """
    try:
        _write(log_dir, _line(event, now, values), sync=False)
    except (OSError, CorruptFile) as e:
        import logging  # rarely: the CLI's start-up need not import it

        logging.getLogger("taskq").warning("cannot journal %s in %s: %s", event, log_dir, e)
        return False
    return True


def begin(log_dir: str, event: Event, now: int, group: int | None, **values: Any) -> bool:
    """Append a task's first record, making its journal readable by `group` (0640) if given.

    For a root daemon's record of a member's task: the member, alone in its
    own group, may then read its history (runas.private_group). Like
    append, a record that cannot be written is logged and skipped.
    """
    try:
        _write(log_dir, _line(event, now, values), sync=False, group=group)
    except (OSError, CorruptFile) as e:
        import logging  # as in append: only when a record is lost

        logging.getLogger("taskq").warning("cannot journal %s in %s: %s", event, log_dir, e)
        return False
    return True


def append_durable(log_dir: str, event: Event, now: int, **values: Any) -> None:
    """Append a record that decides what the daemon does, and fsync it; OSError (or
    CorruptFile: no regular file stands at the journal's name) if not.

    An operator's `rescheduled` and `retried` records set a task's schedule
    and its budget of attempts, so they are written before the change they
    announce and made durable, and a failure stops the change.
    """
    _write(log_dir, _line(event, now, values), sync=True)


def _line(event: Event, now: int, values: dict[str, Any]) -> bytes:
    record = {"event": event, "time": format_iso(now), **values}
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def _write(log_dir: str, line: bytes, sync: bool, group: int | None = None) -> None:
    fd = _open(log_dir)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # opened without blocking; never written into
            raise CorruptFile(f"{journal_path(log_dir)} is not a regular file")
        if group is not None:
            os.fchown(fd, -1, group)
            os.fchmod(fd, 0o640)
        os.write(fd, _after_torn(fd, st.st_size) + line)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync:
        fsync_dir(log_dir)  # a journal created just now


def _open(log_dir: str) -> int:
    try:
        return os.open(journal_path(log_dir), _FLAGS, 0o600)
    except FileNotFoundError:
        ensure_dir(log_dir)
        return os.open(journal_path(log_dir), _FLAGS, 0o600)
    except PermissionError:  # may append but not read: no torn-record check
        return os.open(journal_path(log_dir), _FLAGS & ~os.O_RDWR | os.O_WRONLY)


def _after_torn(fd: int, size: int) -> bytes:
    """A newline if the journal ends in a torn record (a crash mid-append), else nothing.

    Without it the next record would be glued to the torn one, and both lost.
    """
    try:
        if size and os.pread(fd, 1, size - 1) != b"\n":
            return b"\n"
    except OSError:  # opened write-only
        pass
    return b""


_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read(log_dir: str) -> list[dict[str, Any]]:
    """Return every well-formed record, oldest first; [] if there is none.

    A record is well formed if it is a JSON object whose known fields have
    the types and ranges the code reading them needs (`_checked`); any
    other line (a torn last line, a line someone wrote by hand) is skipped.
    A journal that is no regular file (a FIFO would block for good) reads
    as none, with a warning once; one over MAX_READ bytes is read from its
    last MAX_READ bytes (a schedule's journal grows with its occurrences).
    """
    path = journal_path(log_dir)
    try:
        data = _read_tail(path)
    except FileNotFoundError:
        return []
    except (OSError, CorruptFile) as e:
        from taskq.spool.notice import notice  # only when there is something to say

        notice(f"journal {path} read as empty: {e}", once_for=path)
        return []
    records = []
    for line in data.splitlines():
        record = _checked(line)
        if record is not None:
            records.append(record)
    return records


MAX_READ = 16 << 20


def _read_tail(path: str) -> bytes:
    """The journal's bytes, or its last MAX_READ bytes from a line's start; never blocks."""
    data = read_tail(path, MAX_READ + 1)
    return data if len(data) <= MAX_READ else data[data.find(b"\n") + 1 :]


def _checked(line: bytes) -> dict[str, Any] | None:
    """A journal line as a record, if it is one (see read); else None."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if type(record) is not dict or type(record.get("event")) is not str:
        return None
    return record if fields.conforms(record, _FIELDS) else None


_text, _when, _number, _whole = fields.is_text, fields.is_time, fields.is_number, fields.is_whole
_PID = _whole(1, (1 << 31) - 1)
# The known fields and what their readers need of them (budget_start,
# recovery's start record, stats' lateness, show, schedule show...).
_FIELDS: dict[str, Callable[[object], bool]] = {
    "event": _text,
    "time": _when,
    "attempt": _whole(1, 999_999),
    "next_attempt": _whole(1, 999_999),
    "pid": _PID,
    "daemon_pid": _PID,
    "proc_start": lambda v: v is None or (type(v) is int and v >= 0),
    "exit_status": _whole(0, 255),
    "signal": _whole(1, 127),
    "run_at": _when,
    "deadline": _when,
    "lateness": _number,
    "duration": _number,
    "fence": _whole(0, 1 << 63),
    "count": _whole(0, 1 << 63),
    "lost": lambda v: type(v) is bool,
    "notes": lambda v: type(v) is list and all(type(n) is str for n in v),
    "slot": _text,
    "before": _text,
    "after": lambda v: _text(v) or (type(v) is list and all(_text(t) for t in v)),  # manual: ids
    "task": _text,
}
# A writer may record a field as null (a skip with no task, a start whose
# process start time could not be read): every reader takes the field with
# .get() and checks its type, so null is well formed for all but these two.
_FIELDS = {k: (c if k in ("event", "time") else fields.or_none(c)) for k, c in _FIELDS.items()}


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
    from taskq.times.when import parse_when  # off the start-up of submit --after

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
