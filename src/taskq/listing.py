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

from taskq import fsutil
from taskq.errors import NotFound
from taskq.spool import STATES, Spool, stray
from taskq.submit import key_path, read_key
from taskq.task import CLAIM_NAME, MAX_BODY, TASK_NAME, bucket_of, day_of, valid_bucket
from taskq.timespec import HOUR, format_compact

_PHASE_OF = {"claimed": "claimed", "running": "started", "cancelling": "cancelling"}
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DECODER = json.JSONDecoder()
_DONE_SLACK = HOUR  # a task finishes after its run_at, give or take clocks that disagree


@dataclass(frozen=True)
class Filter:
    """What to list: states (in listing order), queues, a run_at window, a limit."""

    states: tuple[str, ...] = STATES
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

    state: str
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
        text = _read(entry, dir_fd).decode()
        doc = _fields(text)
    except (OSError, ValueError):
        return None, ()
    if not isinstance(doc, dict):
        return None, ()
    argv, after = doc.get("argv"), doc.get("after") or []
    waits = tuple(a for a in after if isinstance(a, str)) if isinstance(after, list) else ()
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return argv, waits
    return None, waits


_OWN = '{\n "version": '  # how every body taskq writes begins (TaskBody.to_json, indent=1)
_ARGV = '\n "argv": '
_AFTER = '\n "after": '


def _fields(text: str) -> object:
    """The body's argv and after, without decoding the rest (its environment is most of it).

    In a body taskq wrote, top-level keys, and only they, start a line with
    one space (a newline inside a string is written as an escape), so the
    two values can be decoded where they stand. Any other body, such as one
    an operator rewrote by hand, is decoded whole.
    """
    if not text.startswith(_OWN) or (start := text.find(_ARGV)) < 0:
        return _DECODER.decode(text)
    argv, end = _DECODER.raw_decode(text, start + len(_ARGV))
    after = text.find(_AFTER, end)
    if after < 0:
        return {"argv": argv}
    return {"argv": argv, "after": _DECODER.raw_decode(text, after + len(_AFTER))[0]}


def _read(path: str, dir_fd: int | None = None) -> bytes:
    """A file's bytes, read in small steps: most bodies are a few hundred bytes,
    and asking os.read for MAX_BODY at once costs a 4 MB allocation per file."""
    fd = os.open(path, _READ, dir_fd=dir_fd)
    try:
        chunks = [os.read(fd, 16384)]
        while len(chunks[-1]) == 16384 and len(chunks) * 16384 <= MAX_BODY:
            chunks.append(os.read(fd, 16384))
        return b"".join(chunks)
    finally:
        os.close(fd)


def rows(spool: Spool, flt: Filter) -> Iterator[Row]:
    """Yield the tasks the filter selects, by state then run_at, stopping at the limit."""
    left = flt.limit
    if left is not None and left <= 0:
        return
    for state in flt.states:
        for row in _state_rows(spool, state, flt):
            yield row
            if left is not None:
                left -= 1
                if left == 0:
                    return


def _state_rows(spool: Spool, state: str, flt: Filter) -> Iterator[Row]:
    low, high = flt.window()
    if state == "pending":
        first = "" if flt.after is None else bucket_of(flt.after)
        last = "~" if flt.before is None else bucket_of(flt.before)
        for bucket in fsutil.listdir(spool.pending):
            if valid_bucket(bucket) and first <= bucket <= last:
                yield from _dir_rows(spool.bucket_dir(bucket), state, flt, low, high, spool)
    elif state in _PHASE_OF:
        yield from _claimed_rows(spool, state, flt, low, high)
    elif state == "done":
        first = "" if flt.after is None else day_of(flt.after - _DONE_SLACK)
        for day in fsutil.listdir(spool.done):
            if not stray(day) and day >= first:
                yield from _dir_rows(os.path.join(spool.done, day), state, flt, low, high, spool)
    else:
        yield from _dir_rows(getattr(spool, state), state, flt, low, high)


def _dir_rows(
    directory: str, state: str, flt: Filter, low: str, high: str, skip: Spool | None = None
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
        prefix = directory + os.sep
        for entry in entries:
            row = _row(state, prefix + entry, entry, flt, dir_fd)
            if row is not None:
                yield row
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def _claimed_rows(spool: Spool, state: str, flt: Filter, low: str, high: str) -> Iterator[Row]:
    phase = _PHASE_OF[state]
    for entry in fsutil.listdir(spool.claimed):
        m = CLAIM_NAME.fullmatch(entry)
        if m is None or m.group(2) != phase or not low <= m.group(1) < high:
            continue
        row = _row(state, os.path.join(spool.claimed, entry), m.group(1), flt)
        if row is not None:
            yield row


def _row(state: str, path: str, name: str, flt: Filter, dir_fd: int | None = None) -> Row | None:
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
        found = spool.locate(task_id)
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
    if row.state == "waiting":
        doc["after"] = list(row.after)
    return doc
