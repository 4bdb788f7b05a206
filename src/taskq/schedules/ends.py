"""How a schedule's occurrences ended: failures in a row, the last success, the auto-pause.

Each pass looks at the occurrences in the state's `live` list that are not
running (one lookup by id each) and, for those that have ended, records
the end: a failure adds one to `failures`, a success sets it back to 0 and
moves `last_success`, any end moves `last_end` (where --every-after counts
from). Once `failures` reaches the schedule's --pause-after-failures, the
schedule is paused (state.auto_paused holds the `since` it paused at, so a
resume, which moves `since`, lifts it), journalled, and handed to the
daemon as an event for the hook and mail.
"""

from __future__ import annotations

from typing import Any

from taskq.errors import NotFound, TaskqError
from taskq.schedules.store import SKIP_REASONS, Cursor, Schedule, Store
from taskq.spool import byid, journal
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.states import END_STATES
from taskq.times.timespec import format_iso
from taskq.times.when import parse_when


def auto_paused(sched: Schedule, state: Cursor) -> bool:
    """Whether --pause-after-failures has paused the schedule (and no resume since)."""
    return state.auto_paused is not None and state.auto_paused == sched.since


def health(sched: Schedule, state: Cursor) -> dict[str, Any]:
    """How the schedule goes, from its state: `schedule show` and the metrics read this."""
    return {
        "paused": sched.paused or auto_paused(sched, state),
        "last_slot": None if state.cursor <= 0 else format_iso(state.cursor),
        "last_success": _iso(state.last_success),
        "last_end": _iso(state.last_end),
        "failures_in_a_row": state.failures,
        "paused_by_failures": auto_paused(sched, state),
        "missed": state.missed,
        "skipped": {why: state.skipped.get(why, 0) for why in SKIP_REASONS},
        "running_or_waiting": list(state.live),
    }


def _iso(us: int | None) -> str | None:
    return None if us is None else format_iso(us)


def watch(
    store: Store, sched: Schedule, state: Cursor, running: frozenset[str], now: int
) -> dict[str, Any] | None:
    """Record the ends of live occurrences; the pause event if this pass paused it."""
    if state.auto_paused is not None and not auto_paused(sched, state):
        state.auto_paused, state.failures = None, 0  # resumed since
    ends = []
    for tid in list(state.live):
        if tid in running:
            continue
        end = _end_of(store.spool, tid)
        if end is not None:
            state.live.remove(tid)
            if end[0] != "gone":
                ends.append((end[1], end[0], tid))
    for when, how, _ in sorted(ends):
        state.last_end = max(state.last_end or when, when)
        if how == "done":
            state.failures, state.last_success = 0, max(state.last_success or when, when)
        elif how == "failed":
            state.failures += 1
    limit = sched.pause_after
    if limit is None or state.failures < limit or auto_paused(sched, state):
        return None
    state.auto_paused = sched.since
    last = ([None] + [tid for _, how, tid in sorted(ends) if how == "failed"])[-1]
    store.log(sched.name, Event.PAUSED, now, why="failures", failures=state.failures, task=last)
    return {
        "event": "schedule-paused",
        "schedule": sched.name,
        "why": "failures",
        "failures": state.failures,
        "task": last,
        "time": format_iso(now),
    }


def _end_of(spool: Spool, tid: str) -> tuple[str, int] | None:
    """(state, when) of an ended task; ("gone", 0) if none; None if it has not ended.

    When is its last attempt's end record, written before the task moves
    to its end state, so every daemon reads the same instant; a task that
    never ran (cancelled, expired) ended at its run time, for the same reason.
    """
    try:
        found = byid.locate(spool, tid)
    except NotFound:
        return "gone", 0
    if found.state not in END_STATES:
        return None
    records = journal.read(spool.log_dir(tid))
    ends = [
        r["time"] for r in records if r.get("event") == "end" and isinstance(r.get("time"), str)
    ]
    return found.state, _instant(ends[-1] if ends else None, found.name.run_at)


def _instant(text: str | None, default: int) -> int:
    try:
        return default if text is None else parse_when(text, 0)
    except TaskqError:
        return default
