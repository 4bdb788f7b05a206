"""Occurrences asked for by hand: `schedule run` (a manual slot, now) and `schedule backfill`.

A manual run is an occurrence of the schedule at the instant it is asked
for, keyed NAME@manual@INSTANT and journalled as `manual`; the schedule's
overlap policy is honoured against the occurrences that run now (skip:
refused; queue: it starts once they have ended; replace: they are stopped,
TERM then KILL after the grace, and it starts once they have ended; allow:
it runs beside them), unless forced.

A backfill makes the occurrences of the slots in a range, each with its
slot's own key, so that a slot that already has an occurrence (made,
caught up or backfilled before) gets it back rather than a second one,
however often it is asked. A slot whose occurrence was skipped (cancelled
before it started) is run by a second key, NAME@SLOT+backfill, once.
`--overlap queue` chains them, oldest first, each starting once the one
before it has ended; `allow` lets them run at once.

Both add their occurrences to the state's live ids, which overlap and
--pause-after-failures look at.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq.client import operations, request
from taskq.client.submit import submit
from taskq.errors import BadInput, Conflict, NotFound, TaskqError
from taskq.schedules.materialise import Pass, cancel_if_pending, running_before, running_ids
from taskq.schedules.store import Schedule, Store, backfill_key, manual_key
from taskq.spool import byid, journal
from taskq.spool.journal import Event
from taskq.spool.task import TaskName
from taskq.times.timespec import format_iso

MAX_BACKFILL = 10_000  # slots in one backfill


@dataclass(frozen=True)
class Made:
    """One occurrence asked for: its slot, its task id, and whether this call made it."""

    slot: int
    task: str
    created: bool


def run_now(store: Store, sched: Schedule, now: int, force: bool) -> tuple[Made, list[str]]:
    """Make a manual occurrence now; it and the running occurrences it waits for (or stopped)."""
    state = store.state(sched.name, sched.since)
    running = running_before(Pass(store, now, running_ids(store.spool)), state, None)
    after: list[str] = []
    if running and not force:
        if sched.overlap == "skip":
            raise Conflict(
                f"schedule {sched.name} is running ({', '.join(running)}) and its overlap "
                "is skip; give --force to run it anyway"
            )
        if sched.overlap in ("queue", "replace"):
            after = running
    asked = sched.request(now, now, key=manual_key(sched.name, now), after=after)
    name, created = submit(store.spool, request.body(asked, sched.task.argv, now))
    if created:
        store.log(sched.name, Event.MANUAL, now, slot=format_iso(now), task=name.id, after=after)
        store.add_live(sched.name, sched.since, name.id)
    if created and sched.overlap == "replace" and not force:
        for tid in running:
            try:
                operations.cancel(store.spool, tid)
            except TaskqError:
                continue  # ended meanwhile
            store.log(sched.name, Event.STOPPED, now, task=tid, why="replaced")
    return Made(now, name.id, created), after


def skip(store: Store, sched: Schedule, before: int, slots: list[int], now: int) -> list[int]:
    """Skip the slots before `before`; the slots skipped (less one that has just started).

    The waiting occurrence is cancelled at once if it falls before `before`
    (the daemons' passes would cancel it only at its guard, which may have
    passed); one already claimed runs, and is left out of the answer.
    """
    store.with_skip(sched.name, before)
    state = store.state(sched.name, sched.since)
    started = None
    if state.cursor_task is not None and state.cursor < before:
        p = Pass(store, now, frozenset())
        if cancel_if_pending(p, state.cursor_task) is not None:
            store.log(sched.name, Event.SKIPPED, now, slot=format_iso(state.cursor), why="skip")
        else:
            started = state.cursor  # claimed already: it runs
    store.log(sched.name, Event.SKIP, now, skip_before=format_iso(before), slots=len(slots))
    store.spool.ring()
    return [s for s in slots if s != started]


def backfill(store: Store, sched: Schedule, lo: int, hi: int, chain: bool, now: int) -> list[Made]:
    """Make the occurrences of the slots in [lo, hi]; each slot once, however often asked."""
    if hi < lo:
        raise BadInput("--to is before --from")
    if sched.every_after:
        raise BadInput(f"schedule {sched.name} runs --every-after: it has no slots to backfill")
    slots, count = sched.when.between(lo - 1, hi, MAX_BACKFILL)
    if count > MAX_BACKFILL:
        raise BadInput(f"{count} slots from --from to --to; backfill at most {MAX_BACKFILL}")
    out: list[Made] = []
    previous: str | None = None
    earlier = _made_before(store, sched.name)
    for slot in slots:
        gone = earlier.get(format_iso(slot))
        if gone is not None and not _exists(store, gone):  # ran, and removed since
            out.append(Made(slot, gone, False))
            continue
        made = _one(store, sched, slot, [previous] if chain and previous else [], now)
        out.append(made)
        previous = made.task
    return out


def _made_before(store: Store, name: str) -> dict[str, str]:
    """Slot -> task of the occurrences the journal says were made (their keys may be gone)."""
    out = {}
    for record in store.history(name):
        if record.get("event") in (Event.MADE, Event.CAUGHT_UP, Event.BACKFILLED, Event.RELEASED):
            slot, task = record.get("slot"), record.get("task")
            if isinstance(slot, str) and isinstance(task, str):
                out[slot] = task
    return out


def _one(store: Store, sched: Schedule, slot: int, after: list[str], now: int) -> Made:
    """The occurrence of one slot: its own, or (if that was skipped) its backfill's."""
    name, created = _submit(store, sched, slot, None, after, now)
    if not created and _skipped(store, name):
        name, created = _submit(store, sched, slot, backfill_key(sched.name, slot), after, now)
    if created:
        store.log(sched.name, Event.BACKFILLED, now, slot=format_iso(slot), task=name.id)
        store.add_live(sched.name, sched.since, name.id)
    return Made(slot, name.id, created)


def _submit(
    store: Store, sched: Schedule, slot: int, key: str | None, after: list[str], now: int
) -> tuple[TaskName, bool]:
    live_after = [t for t in after if _exists(store, t)]
    asked = sched.request(slot, now, key=key, after=live_after)
    return submit(store.spool, request.body(asked, sched.task.argv, now))


def _exists(store: Store, task_id: str) -> bool:
    try:
        byid.locate(store.spool, task_id)
    except NotFound:
        return False
    return True


def _skipped(store: Store, name: TaskName) -> bool:
    """Whether an occurrence was cancelled before any attempt of it started."""
    try:
        found = byid.locate(store.spool, name.id)
    except NotFound:
        return False
    if found.state != "cancelled":
        return False
    records = journal.read(store.spool.log_dir(name.id))
    return not any(r.get("event") == "start" for r in records)
