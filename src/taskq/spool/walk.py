"""The one walk of the spool by state: the directories that hold each state's tasks, and the tasks.

States are walked in the order tasks move through them (states.STATES).
pending/ holds one bucket per minute and done/ one directory per day, by
name, so a window of run times (or of end days) picks which of them are
read at all; claimed/ holds three states, told apart by the phase in each
claim's name. A bucket or a day a member made unreadable (or a link) is
skipped with a warning (Spool.readable_entries). Names that are strays
or no task's are skipped; a caller that judges them (fsck) is told of
the directories that are no bucket or day.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from taskq.spool import fsutil
from taskq.spool.layout import Located, Spool, stray
from taskq.spool.states import PHASE_OF, STATES, State
from taskq.spool.task import ClaimName, TaskName, valid_bucket, valid_buckets


class Place(NamedTuple):
    """A directory holding tasks of one state (in claimed/: of one phase)."""

    state: State
    directory: str
    dated: bool  # a bucket or a done/ day: made by whoever came first, skipped if unreadable


class Window(NamedTuple):
    """Which buckets and days to walk, by name (names sort as the instants they stand for)."""

    first_bucket: str = ""
    last_bucket: str = "~"
    first_day: str = ""


EVERYWHERE = Window()


def places(
    spool: Spool,
    states: Iterable[State] = STATES,
    window: Window = EVERYWHERE,
    bad: Callable[[str, str], None] | None = None,
) -> Iterator[Place]:
    """The directories that hold tasks in these states, in the order given.

    With `bad`, each name in pending/ or done/ that is no bucket or day (not
    a directory, a link, a bad bucket name) is reported to it with the
    reason, at the cost of an lstat per directory.
    """
    for state in states:
        if state == State.PENDING and bad is None:
            for bucket in buckets(spool, window):
                yield Place(state, spool.bucket_dir(bucket), True)
        elif state == State.PENDING and bad is not None:
            for bucket in fsutil.listdir(spool.pending):
                if stray(bucket) or not window.first_bucket <= bucket <= window.last_bucket:
                    continue
                path = spool.bucket_dir(bucket)
                if _judged(path, valid_bucket(bucket), bad, "a bucket"):
                    yield Place(state, path, True)
        elif state == State.DONE:
            for day in fsutil.listdir(spool.done):
                if stray(day) or day < window.first_day:
                    continue
                path = spool.done_dir(day)
                if bad is None or _judged(path, True, bad, "a day directory"):
                    yield Place(state, path, True)
        elif state in PHASE_OF:
            yield Place(state, spool.claimed, False)
        else:
            yield Place(state, getattr(spool, state), False)


def buckets(spool: Spool, window: Window = EVERYWHERE) -> list[str]:
    """The names of pending/'s buckets in the window, sorted (as instants): one listing, no stat."""
    names = fsutil.listdir(spool.pending)
    first = bisect.bisect_left(names, window.first_bucket)
    last = bisect.bisect_right(names, window.last_bucket, first)
    return valid_buckets(names[first:last])


def _judged(path: str, named_right: bool, bad: Callable[[str, str], None], what: str) -> bool:
    """Whether path is a real directory of its kind; if not, tell `bad`."""
    if named_right and os.path.isdir(path) and not os.path.islink(path):
        return True
    parent = os.path.basename(os.path.dirname(path))
    bad(path, f"not {what} in {parent}/")
    return False


def entries(spool: Spool, place: Place) -> list[str]:
    """The names in a place's directory, sorted (a dated one unreadable: none, with a warning)."""
    if place.dated:
        return spool.readable_entries(place.directory)
    return fsutil.listdir(place.directory)


def tasks(spool: Spool, states: Iterable[State] = STATES) -> Iterator[Located]:
    """The tasks in these states; names that do not parse are skipped."""
    for place in places(spool, states):
        phase = PHASE_OF.get(place.state)
        for entry in entries(spool, place):
            if stray(entry):
                continue
            path = f"{place.directory}/{entry}"
            try:
                if phase is None:
                    yield Located(place.state, path, TaskName.parse(entry))
                    continue
                claim = ClaimName.parse(entry)
            except ValueError:
                continue
            if claim.phase == phase:
                yield Located(place.state, path, claim.task, claim)


def find(spool: Spool, ids: set[str]) -> dict[str, Located]:
    """Find tasks by walking every state; those that are nowhere are left out.

    A task may move while we look; walking the states in the order tasks
    move through them, then once more, finds it unless it is moving back
    and forth faster than we list.
    """
    found: dict[str, Located] = {}
    for _ in range(2):
        for located in tasks(spool):
            if located.name.id in ids and located.name.id not in found:
                found[located.name.id] = located
                if len(found) == len(ids):
                    return found
    return found
