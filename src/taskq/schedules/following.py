"""--every-after: each occurrence is made once the one before it has ended.

The slot of the next occurrence is the end of the previous one (its last
attempt's end record, which every daemon reads alike: see ends.py) plus
the interval; the first falls at --start, else one interval after the
schedule was added or resumed. So there is never more than one slot
outstanding, and catch-up has one meaning: the occurrence that fell due
while every daemon was down runs once, as soon as one is back. Slots that
`taskq schedule skip` covers are passed over as if each had ended at its
slot. Overlap cannot arise between the schedule's own slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskq.schedules.store import Cursor, Schedule
from taskq.spool.journal import Event
from taskq.spool.task import TaskName
from taskq.times.timespec import format_iso

if TYPE_CHECKING:
    from taskq.schedules.materialise import Pass


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


def follow(p: Pass, sched: Schedule, state: Cursor) -> None:
    """Make the next occurrence once the previous one has ended."""
    from taskq.schedules import materialise  # it calls this module: imported when used

    slot = next_slot(sched, state)
    if slot is None or (state.cursor_task is not None and slot <= state.cursor):
        return
    every = sched.spec.every
    assert every is not None
    if sched.skip_before is not None and slot < sched.skip_before:
        n = -(-(sched.skip_before - slot) // every)
        p.store.log(sched.name, Event.SKIPPED, p.now, slot=format_iso(slot), count=n, why="skip")
        state.count_skipped("skip", n)
        slot += n * every
        state.last_end = slot - every
    if sched.spec.end is not None and slot > sched.spec.end:
        return
    state.cursor = slot
    state.cursor_task = materialise.make(p, sched, state, slot, slot, Event.MADE)
    state.checked = True


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
