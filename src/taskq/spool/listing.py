"""Streaming listings for `taskq ls`: read only what the filters need, one line at a time.

A task file's name holds its run time (in a form that sorts as it orders),
id, attempt and queue, so every filter but none is decided from the name,
before the body is opened, and most decide which directories are read at
all: --state picks the state directories, --before/--after pick the pending
buckets (a bucket is one minute of run_at) and skip done/ days that ended
before --after, --limit stops reading, --key reads one key file and finds
its task by id. Each directory is listed and sorted on its own and its lines
are written before the next one is read, so memory is bounded by the largest
single directory (a minute bucket, a done/ day, failed/ or cancelled/), not
by the spool, and the first line comes at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from taskq.errors import NotFound
from taskq.spool import byid, fsutil, walk
from taskq.spool.keys import key_path, read_key
from taskq.spool.layout import Spool
from taskq.spool.states import PHASE_OF, STATES, State
from taskq.spool.task import CLAIM_NAME, MAX_BODY, TASK_NAME, bucket_of, day_of
from taskq.spool.walk import Place
from taskq.times.timespec import HOUR, format_compact

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DECODER = json.JSONDecoder()
_DONE_SLACK = HOUR  # a task finishes after its run_at, give or take clocks that disagree


@dataclass(frozen=True)
class Filter:
    """What to list: states (in listing order), queues, a run_at window, a limit."""

    states: tuple[State, ...] = STATES
    queues: frozenset[str] = frozenset()
    after: int | None = None  # run_at >= after
    before: int | None = None  # run_at < before
    limit: int | None = None
    bodies: bool = True  # read each task's command (False: names only)

    def window(self) -> tuple[str, str]:
        """The run_at window as compact strings, which compare as the instants do."""
        low = "" if self.after is None else format_compact(self.after)
        high = "~" if self.before is None else format_compact(self.before)
        return low, high


class Row(NamedTuple):
    """One listed task: what its file name says, and the command its body holds."""

    state: State
    path: str
    compact: str  # run_at, as in the name
    id: str
    attempt: int
    queue: str
    command: list[str] | None  # None if the body cannot be read as a task's
    after: tuple[str, ...] = ()  # a waiting task's dependencies (--after)

    def run_at_iso(self) -> str:
        c = self.compact
        return f"{c[0:4]}-{c[4:6]}-{c[6:8]}T{c[9:11]}:{c[11:13]}:{c[13:15]}{c[15:22]}Z"


def command_of(entry: str, dir_fd: int | None) -> tuple[list[str] | None, tuple[str, ...]]:
    """A task file's argv (None if it is not a task's body) and what it waits for."""
    try:
        fd = os.open(entry, _READ, dir_fd=dir_fd)
    except OSError:
        return None, ()
    try:
        data = os.read(fd, _STEP)
        if len(data) == _STEP:
            data += _rest(fd)
        text = data.decode()
        if text.startswith(_OWN) and (start := text.find(_ARGV)) > 0:
            argv, end = _DECODER.raw_decode(text, start + _ARGV_LEN)
            at = text.find(_AFTER, end)
            after = _DECODER.raw_decode(text, at + _AFTER_LEN)[0] if at > 0 else ()
        else:
            argv, after = _whole(text)
    except (OSError, ValueError, RecursionError):  # not a body: nested too deep, among others
        return None, ()
    finally:
        os.close(fd)
    waits = tuple(a for a in after if isinstance(a, str)) if type(after) is list else ()
    if type(argv) is list and argv and all(type(a) is str for a in argv):
        return argv, waits
    return None, waits


# In a body taskq wrote (TaskBody.to_json, indent=1) top-level keys, and only
# they, start a line with one space (a newline inside a string is written as
# an escape), so argv and after can be decoded where they stand, without
# decoding the environment that is most of a body. Any other body, such as
# one an operator rewrote by hand, is decoded whole.
_OWN = '{\n "version": '
_ARGV = '\n "argv": '
_AFTER = '\n "after": '
_ARGV_LEN, _AFTER_LEN = len(_ARGV), len(_AFTER)
_STEP = 16384  # most bodies are a few hundred bytes: never a MAX_BODY buffer per file


def _whole(text: str) -> tuple[object, list[object] | tuple[()]]:
    """argv and after of a body in a layout of its own, decoded whole."""
    doc = _DECODER.decode(text)
    if not isinstance(doc, dict):
        return None, ()
    after = doc.get("after")
    return doc.get("argv"), after if isinstance(after, list) else ()


def _rest(fd: int) -> bytes:
    """What follows a body's first step, up to MAX_BODY."""
    chunks = [os.read(fd, _STEP)]
    while len(chunks[-1]) == _STEP and len(chunks) * _STEP <= MAX_BODY:
        chunks.append(os.read(fd, _STEP))
    return b"".join(chunks)


def rows(spool: Spool, flt: Filter) -> Iterator[Row]:
    """Yield the tasks the filter selects, by state then run_at, stopping at the limit."""
    left = flt.limit
    if left is not None and left <= 0:
        return
    for job in jobs(spool, flt):
        for row in job_rows(spool, job, flt):
            yield row
            if left is not None:
                left -= 1
                if left == 0:
                    return


def jobs(spool: Spool, flt: Filter) -> Iterator[Place]:
    """The directories to list, in listing order: only those the filter's window can need."""
    window = walk.Window(
        first_bucket="" if flt.after is None else bucket_of(flt.after),
        last_bucket="~" if flt.before is None else bucket_of(flt.before),
        first_day="" if flt.after is None else day_of(flt.after - _DONE_SLACK),
    )
    return walk.places(spool, flt.states, window)


def job_rows(spool: Spool, job: Place, flt: Filter) -> Iterator[Row]:
    """The rows of one directory, by run_at."""
    low, high = flt.window()
    if job.state in PHASE_OF:
        yield from _claimed_rows(spool, job.state, flt, low, high)
    else:
        yield from _dir_rows(job.directory, job.state, flt, low, high, spool if job.dated else None)


def _dir_rows(
    directory: str, state: State, flt: Filter, low: str, high: str, skip: Spool | None = None
) -> Iterator[Row]:
    """A directory's rows; bodies are opened relative to it (no path walk per task).

    With skip, the directory is a bucket or done day that a member may have
    made unreadable (or a link): it is skipped with a warning, not an error.
    """
    names = fsutil.listdir(directory) if skip is None else skip.readable_entries(directory)
    entries = [e for e in names if low <= e < high]  # names start with run_at
    if not entries:
        return
    try:
        dir_fd: int | None = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        dir_fd = None
    try:
        prefix, match, queues = directory + os.sep, TASK_NAME.compiled().fullmatch, flt.queues
        for entry in entries:  # _row, inlined: this loop runs once per listed task
            m = match(entry)
            if m is None or (queues and m.group(4) not in queues):
                continue
            run_at, task_id, attempt, queue = m.groups()
            body = entry if dir_fd is not None else prefix + entry
            command, after = command_of(body, dir_fd) if flt.bodies else (None, ())
            yield Row(state, prefix + entry, run_at, task_id, int(attempt), queue, command, after)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def _claimed_rows(spool: Spool, state: State, flt: Filter, low: str, high: str) -> Iterator[Row]:
    phase = PHASE_OF[state]
    for entry in fsutil.listdir(spool.claimed):
        m = CLAIM_NAME.fullmatch(entry)
        if m is None or m.group(2) != phase or not low <= m.group(1) < high:
            continue
        row = _row(state, os.path.join(spool.claimed, entry), m.group(1), flt)
        if row is not None:
            yield row


def _row(state: State, path: str, name: str, flt: Filter, dir_fd: int | None = None) -> Row | None:
    """The row of a task file (name: its task name part), or None if filtered out.

    The body is read here, relative to the open directory (no walk of the
    whole path per task), so a row never outlives the descriptor it used.
    """
    m = TASK_NAME.fullmatch(name)
    if m is None or (flt.queues and m.group(4) not in flt.queues):
        return None
    run_at, task_id, attempt, queue = m.groups()
    entry = path if dir_fd is None else name  # in a directory we opened, name is the entry
    command, after = command_of(entry, dir_fd) if flt.bodies else (None, ())
    return Row(state, path, run_at, task_id, int(attempt), queue, command, after)


def by_key(spool: Spool, key: str, flt: Filter) -> Iterator[Row]:
    """The task bound to an idempotency key, if the filter selects it: one key file, one lookup."""
    try:
        task_id = read_key(key_path(spool, key)).id
        found = byid.locate(spool, task_id)
    except (OSError, ValueError, NotFound):
        return
    low, high = flt.window()
    row = _row(found.state, found.path, str(found.name), flt)
    if row is not None and found.state in flt.states and low <= row.compact < high:
        yield row


def as_object(row: Row, with_command: bool = True) -> dict[str, object]:
    """The ls --json object of a row (one NDJSON line)."""
    doc: dict[str, object] = {
        "id": row.id,
        "state": row.state,
        "run_at": row.run_at_iso(),
        "attempt": row.attempt,
        "queue": row.queue,
    }
    if with_command:
        doc["command"] = row.command
    if row.state == State.WAITING:
        doc["after"] = list(row.after)
    return doc
