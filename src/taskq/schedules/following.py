"""--every-after: each occurrence is made once the one before it has ended.

The slot of the next occurrence is the end of the previous one (its last
attempt's end record, which every daemon reads alike: see ends.py) plus
the interval; the first falls at --start, else one interval after the
schedule was added or resumed. So there is never more than one slot
outstanding, and catch-up has one meaning: the occurrence that fell due
while every daemon was down runs once, as soon as one is back. Slots that
`taskq schedule skip` covers are passed over as if each had ended at its
slot. Overlap cannot arise between the schedule's own slots. This module
says when; materialise makes the occurrence (its pass calls next_slot).
"""

from __future__ import annotations

from taskq.schedules.store import Cursor, Schedule
from taskq.spool.task import TaskName


def next_slot(sched: Schedule, state: Cursor) -> int | None:
    """The slot of the next occurrence, if the previous one has ended (or there is none)."""
    every = sched.spec.every
    assert every is not None
    current = _id(state.cursor_task)
    if current is not None and current in state.live:
        return None  # waiting or running: the next counts from its end
    if state.last_end is not None and state.last_end >= sched.since:
        return state.last_end + every
    if sched.spec.start is not None and current is None:
        return max(sched.spec.start, sched.since)
    return sched.since + every


def upcoming(sched: Schedule, state: Cursor, now: int, n: int) -> list[int]:
    """The next n slots if every run took no time: what `schedule next` shows."""
    every = sched.spec.every
    assert every is not None
    first = next_slot(sched, state)
    if first is None:  # one waits (its slot) or runs (the next is at least an interval away)
        first = state.cursor if state.cursor > now else now + every
    slots = [first + i * every for i in range(n)]
    return [s for s in slots if sched.spec.end is None or s <= sched.spec.end]


def _id(name: str | None) -> str | None:
    try:
        return None if name is None else TaskName.parse(name).id
    except ValueError:
        return None
