"""Turning schedules into tasks: the next occurrence always waits in pending/.

One pass over a schedule (`advance`) does, in order:

1. release a queued occurrence whose predecessor has ended (overlap=queue);
2. catch up: slots that fell due with no task made for them (every daemon
   was down) are run or skipped as --catchup says;
3. judge overlap (or pause) for the next slot, GUARD before it: if the
   occurrence before it is still running, skip it (cancel its task) or
   queue it (move it to HELD_AT until the running one ends);
4. top up: once the next slot is due, make a task for the one after it.

Each occurrence is an ordinary task submitted with the key NAME@SLOT, so any
number of daemons (and `taskq schedule add`) can run passes over one spool:
the first to submit a slot creates its task, the others get that task back.
Cancels and holds are compare-and-swap renames of a pending task, so a
daemon that loses the race to a claim leaves the occurrence to run.
The daemon calls `Materialiser.tick` from its loop; the CLI calls `advance`
once after add and resume.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from taskq.client import operations, request
from taskq.client.submit import submit
from taskq.errors import BadInput, CorruptFile, NotFound, TaskqError
from taskq.schedules import ends, following
from taskq.schedules.store import MAX_LIVE, Cursor, Schedule, Store, catchup_keep
from taskq.spool import byid, deps, fsutil
from taskq.spool.ending import end_task
from taskq.spool.journal import Event
from taskq.spool.keys import key_path, read_key
from taskq.spool.layout import Handling, Located, Spool, unguarded
from taskq.spool.states import State
from taskq.spool.task import ClaimName, TaskBody, TaskName, bucket_of
from taskq.spool.transitions import CLAIM_LEAD_MAX
from taskq.times.timespec import MAX_INSTANT, MS, SECOND, format_iso
from taskq.times.when import parse_when

log = logging.getLogger("taskq")

GUARD = SECOND  # overlap is judged this long before a daemon may claim a slot's task
HELD_AT = MAX_INSTANT  # a queued occurrence waits here until the one before it ends
REFRESH = 5 * SECOND  # passes at least this often: schedules added on other hosts
HELD_POLL = 250 * MS  # how often a queued occurrence's predecessor is looked at
RING_GAP = 200 * MS  # passes caused by the doorbell are at least this far apart
BUSY_WAIT = SECOND  # a pass waits at most this long for prepared attempts to start
LISTED = 10  # skipped slots journalled one by one; more are one range record


@dataclass
class Pass:
    """What one pass over a schedule needs: the store, now, and the running task ids.

    events collects what the pass tells people of (a schedule paused by
    its failures), for the daemon to hand to the hook and mail.
    """

    store: Store
    now: int
    running: frozenset[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    lost: bool = False  # a compare-and-swap of this pass lost: its state is not saved
    health: dict[str, dict[str, Any]] = field(default_factory=dict)  # by schedule, for metrics
    lead: int = 0  # how far ahead of a task's run time this process may claim it
    judge_at: int = HELD_AT  # the earliest slot-less-guard still to judge (see Materialiser)

    @property
    def spool(self) -> Spool:
        return self.store.spool


def running_ids(spool: Spool) -> frozenset[str]:
    """The ids of tasks in claimed/ (claimed, started, or being cancelled)."""
    ids = set()
    for entry in fsutil.listdir(spool.claimed):
        try:
            ids.add(ClaimName.parse(entry).task.id)
        except ValueError:
            continue
    return frozenset(ids)


def guard(sched: Schedule) -> int:
    """How long before a slot its overlap is judged: before any daemon may claim its task.

    A daemon claims a task up to CLAIM_LEAD_MAX before its run time; a
    decision after that claim could no longer hold or cancel the task.
    Half of intervals shorter than 4 s, so that the previous slot has begun.
    """
    every = sched.spec.every
    ahead = GUARD + CLAIM_LEAD_MAX
    return min(ahead, every // 2) if every else ahead


def advance(p: Pass, sched: Schedule) -> int | None:
    """One pass over one schedule; the instant it next needs one (None: never)."""
    state = p.store.state(sched.name, sched.since)
    base = replace(state, live=list(state.live), skipped=dict(state.skipped))
    before = state.to_json()
    told = ends.watch(p.store, sched, state, p.running, p.now)
    if told is not None:
        p.events.append(told)
    paused = sched.paused or ends.auto_paused(sched, state)
    if state.held is None and sched.overlap in ("queue", "replace"):
        _adopt_held(p, sched, state)
    if state.held is not None:
        _release(p, sched, state)
    if paused:
        _judge(p, sched, state, paused=True)
    elif sched.every_after:
        _follow(p, sched, state)
    else:
        _catch_up(p, sched, state)
        _judge(p, sched, state, paused=False)
        _top_up(p, sched, state)
        _judge(p, sched, state, paused=False)  # one made within the lead: before any claim
    if p.lost:  # another pass moved the occurrence first and saved its state: read it next
        p.lost = False
        return p.now + HELD_POLL
    if state.to_json() != before:
        p.store.save_state(sched.name, state, base)
    p.health[sched.name] = ends.health(sched, state)
    return _next_pass(p, sched, state, paused)


def _next_pass(p: Pass, sched: Schedule, state: Cursor, paused: bool) -> int | None:
    out = []
    if state.held is not None or (state.live and sched.every_after):
        out.append(p.now + HELD_POLL)
    elif state.live and sched.pause_after:
        out.append(p.now + REFRESH)
    if state.cursor_task is not None and not state.checked:
        out.append(state.cursor - guard(sched) - p.lead)
        p.judge_at = min(p.judge_at, state.cursor - guard(sched))
    if not paused and not sched.every_after and sched.when.after(state.cursor) is not None:
        out.append(state.cursor)
    return min(out) if out else None


# -- the steps ---------------------------------------------------------------


def _catch_up(p: Pass, sched: Schedule, state: Cursor) -> None:
    """Decide the slots that fell due with no task (every daemon down), as --catchup says."""
    keep = catchup_keep(sched.catchup)
    lo = max(state.cursor, sched.since - 1)
    missed, count = sched.when.between(lo, p.now, max(keep, 1))
    if count == 0:
        return
    kept = missed[-keep:] if keep else []
    # Occurrences made before the downtime and not started fell due with
    # the rest: they are the oldest missed slots, kept only if room is left.
    waiting = [
        t
        for t in (state.prev_task, state.cursor_task)
        if t is not None and t != state.held and _pending(p, t) is not None
    ]
    for task in waiting[: max(0, len(waiting) - max(0, keep - count))]:
        dest = cancel_if_pending(p, task)
        if dest is not None:
            nominal = _slot_of(p, dest)
            p.store.log(
                sched.name, Event.SKIPPED, p.now, slot=nominal, task=_id(task), why="catchup"
            )
            if task == state.cursor_task:
                state.cursor_task = None
            if task == state.prev_task:
                state.prev_task = None
    if state.cursor_task is not None:
        state.prev_task = state.cursor_task
    skipped = [s for s in missed if s not in kept]
    _log_skipped(p, sched.name, lo, skipped, count - len(missed), kept)
    state.missed += count
    state.count_skipped("catchup", count - len(kept))
    for slot in [s for s in kept if skipped_by_operator(sched, s)]:
        p.store.log(sched.name, Event.SKIPPED, p.now, slot=format_iso(slot), why="skip")
        state.count_skipped("skip")
        kept.remove(slot)
    for slot in kept:
        name = make(p, sched, state, slot, slot, Event.CAUGHT_UP)
        if name is not None:
            state.prev_task = name
    state.cursor, state.cursor_task, state.checked = missed[-1], None, True


def _log_skipped(
    p: Pass, name: str, lo: int, listed: list[int], unlisted: int, kept: list[int]
) -> None:
    """Journal the slots catch-up skips: each one, or a range when there are many."""
    if unlisted == 0 and len(listed) <= LISTED:
        for slot in listed:
            p.store.log(name, Event.SKIPPED, p.now, slot=format_iso(slot), why="catchup")
        return
    first = kept[0] if kept else (listed[-1] if listed else lo)
    p.store.log(
        name,
        Event.SKIPPED,
        p.now,
        after=format_iso(lo),
        before=format_iso(first),
        count=unlisted + len(listed),
        why="catchup",
    )


def _follow(p: Pass, sched: Schedule, state: Cursor) -> None:
    """--every-after: make the next occurrence once the previous one has ended."""
    slot = following.next_slot(sched, state)
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
    state.cursor_task = make(p, sched, state, slot, slot, Event.MADE)
    state.checked = True


def _judge(p: Pass, sched: Schedule, state: Cursor, paused: bool) -> None:
    """GUARD before the next slot: skip it if paused or skipped; on overlap, as --overlap says."""
    if state.cursor_task is None or state.checked:
        return
    if p.now + p.lead < state.cursor - guard(sched):  # no claim of ours can reach it yet
        return
    state.checked = True
    slot = format_iso(state.cursor)
    why = "paused" if paused else ("skip" if skipped_by_operator(sched, state.cursor) else None)
    if why is not None:
        if cancel_if_pending(p, state.cursor_task) is not None:
            p.store.log(sched.name, Event.SKIPPED, p.now, slot=slot, why=why)
            state.count_skipped(why)
            state.cursor_task = None
        return
    if sched.overlap == "allow":
        return
    running = running_before(p, state, _id(state.cursor_task))
    queued = state.held is not None and _id(state.held) != _id(state.cursor_task)
    if not queued and not running:
        return
    behind = running[0] if running else state.held_behind
    if sched.overlap == "replace" and queued and cancel_if_pending(p, str(state.held)):
        p.store.log(sched.name, Event.SKIPPED, p.now, task=_id(state.held), why="replaced")
        state.count_skipped("replaced")
        state.held, queued = None, False
    if sched.overlap in ("queue", "replace") and not queued:
        held = _reschedule_if_pending(p, state.cursor_task, HELD_AT)
        if held is None:
            p.lost = _held_by_another(p, state.cursor_task)
            if not p.lost and sched.overlap == "replace":
                _claimed_first(p, sched.name, slot, behind, running)
            return
        event = Event.QUEUED if sched.overlap == "queue" else Event.REPLACING
        p.store.log(sched.name, event, p.now, slot=slot, behind=behind)
        state.held, state.held_behind, state.cursor_task = held, behind, held
        if sched.overlap == "replace":
            _stop(p, sched.name, running)
        return
    if cancel_if_pending(p, state.cursor_task) is not None:
        p.store.log(sched.name, Event.SKIPPED, p.now, slot=slot, why="overlap", behind=behind)
        state.count_skipped("overlap")
        state.cursor_task = None


def _claimed_first(p: Pass, name: str, slot: str, behind: str | None, running: list[str]) -> None:
    """A daemon claimed the slot's task before it could be held (a pass late by more
    than the guard): it starts at its slot, and the running one is stopped now."""
    p.store.log(name, Event.REPLACING, p.now, slot=slot, behind=behind, claimed=True)
    _stop(p, name, running)


def _held_by_another(p: Pass, name: str) -> bool:
    """Whether another pass has just queued this occurrence (so its state holds it)."""
    try:
        found = byid.locate(p.spool, TaskName.parse(name).id)
    except (TaskqError, ValueError):
        return False
    return found.state == State.PENDING and found.name.run_at == HELD_AT


def skipped_by_operator(sched: Schedule, slot: int) -> bool:
    """Whether `taskq schedule skip` covers this slot."""
    return sched.skip_before is not None and slot < sched.skip_before


def running_before(p: Pass, state: Cursor, not_this: str | None) -> list[str]:
    """The schedule's occurrences that run now, other than not_this (the one being judged).

    The previous occurrence counts while it is due and still pending too: a
    claim reaching the judged one takes it first (a daemon that started
    late judges before its first claim, and a queue limit may hold it).
    """
    ids = [_id(state.prev_task), *state.live]
    out = {t for t in ids if t is not None and t != not_this and t in p.running}
    prev = _id(state.prev_task)
    if prev is not None and prev != not_this and _due_pending(p, str(state.prev_task)):
        out.add(prev)
    return sorted(out)


def _due_pending(p: Pass, name: str) -> bool:
    """Whether an occurrence waits in pending/ with its run time within this pass's lead."""
    found = _pending(p, name)
    return found is not None and found[0].run_at <= p.now + p.lead


def _stop(p: Pass, name: str, running: list[str]) -> None:
    """Stop the running occurrences a replacing one waits for: TERM, then KILL after the grace."""
    for tid in running:
        try:
            operations.cancel(p.spool, tid)
        except TaskqError:
            continue  # ended meanwhile
        p.store.log(name, Event.STOPPED, p.now, task=tid, why="replaced")


def _release(p: Pass, sched: Schedule, state: Cursor) -> None:
    """Start a queued (or replacing) occurrence once those it waits for have ended."""
    assert state.held is not None
    if running_before(p, state, _id(state.held)) or state.held_behind in p.running:
        return
    moved = _reschedule_if_pending(p, state.held, max(p.now, _held_slot(p, state)))
    if moved is not None:
        p.store.log(sched.name, Event.RELEASED, p.now, task=_id(moved))
    for attr in ("cursor_task", "prev_task"):
        if getattr(state, attr) == state.held:
            setattr(state, attr, moved)
    state.held = state.held_behind = None


def _held_slot(p: Pass, state: Cursor) -> int:
    """The slot of the held occurrence: it is released at it at the earliest (never early)."""
    found = _pending(p, str(state.held))
    slot = None if found is None else _slot_of(p, found[1])
    try:
        return state.cursor if slot is None else parse_when(slot, 0)
    except TaskqError:
        return state.cursor


def _adopt_held(p: Pass, sched: Schedule, state: Cursor) -> None:
    """Take back a queued occurrence whose pass was killed before it saved its state."""
    bucket = p.spool.bucket_dir(bucket_of(HELD_AT))
    for entry in fsutil.listdir(bucket):
        try:
            body = p.spool.read_body(os.path.join(bucket, entry))
        except (TaskqError, OSError):
            continue
        if body.env.get("TASKQ_SCHEDULE") == sched.name and str(body.key).startswith(
            f"{sched.name}@"
        ):
            state.held, state.held_behind = entry, None
            return


def _top_up(p: Pass, sched: Schedule, state: Cursor) -> None:
    """Once the cursor slot is due, make the first slot after now (catch-up took the rest)."""
    if state.cursor > p.now:
        return  # the next one is made, or decided, ahead
    slot = sched.when.after(max(p.now, sched.since - 1))
    if slot is None:
        return
    if state.cursor_task is not None:
        state.prev_task = state.cursor_task
    if skipped_by_operator(sched, slot):  # no task at all: nothing a late pass could miss
        p.store.log(sched.name, Event.SKIPPED, p.now, slot=format_iso(slot), why="skip")
        state.count_skipped("skip")
        state.cursor, state.cursor_task, state.checked = slot, None, True
        return
    jitter = random.randrange(sched.jitter) if sched.jitter else 0
    state.cursor = slot
    state.cursor_task = make(p, sched, state, slot, slot + jitter, Event.MADE)
    state.checked = False


# -- tasks -------------------------------------------------------------------


def make(
    p: Pass, sched: Schedule, state: Cursor, slot: int, run_at: int, event: Event
) -> str | None:
    """Submit the occurrence of slot (or get the one already made); its name."""
    body = request.body(sched.request(slot, run_at), sched.task.argv, p.now)
    name, created = submit(p.spool, body)
    if created:
        p.store.log(sched.name, event, p.now, slot=format_iso(slot), task=name.id)
    if name.id not in state.live and len(state.live) < MAX_LIVE:
        state.live.append(name.id)
    return str(name)


def _id(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        return TaskName.parse(name).id
    except ValueError:
        return None


def _pending(p: Pass, name: str) -> tuple[TaskName, str] | None:
    try:
        task = TaskName.parse(name)
    except ValueError:
        return None
    path = p.spool.pending_path(task)
    return (task, path) if os.path.exists(path) else None


def _slot_of(p: Pass, path: str) -> str | None:
    """The slot an occurrence's body names (TASKQ_SCHEDULED_AT)."""
    try:
        return p.spool.read_body(path).env.get("TASKQ_SCHEDULED_AT")
    except (TaskqError, OSError):
        return None


def cancel_if_pending(p: Pass, name: str) -> str | None:
    """Cancel an occurrence still pending under this name; its new path, None if it moved on."""
    found = _pending(p, name)
    if found is None:
        return None
    task, path = found
    try:
        pending = Located(State.PENDING, path, task)
        end = end_task(p.spool, pending, State.CANCELLED, p.now, Event.CANCELLED, by="schedule")
    except FileNotFoundError:
        return None  # claimed meanwhile: it runs
    if end.waited_for:
        deps.release_waiters(p.spool, task.id, p.now)
    return end.path


def _reschedule_if_pending(p: Pass, name: str, run_at: int) -> str | None:
    """Move a pending occurrence to run_at; its new name, or None if it moved on."""
    if _pending(p, name) is None:
        return None
    task = TaskName.parse(name)
    try:
        return str(operations.reschedule(p.spool, task.id, run_at))
    except (TaskqError, FileNotFoundError, FileExistsError):  # moved on, or held by another pass
        return None


# -- the daemon's part -------------------------------------------------------


Told = Callable[[dict[str, Any], TaskBody], None]


class Materialiser:
    """The daemon's part: passes over every schedule when one is needed.

    After each pass it hands on_health each schedule's health (ends.health,
    for the metrics) and on_event what a pass tells people of, with the
    schedule's task template (whom to mail).
    """

    def __init__(
        self,
        spool: Spool,
        on_health: Callable[[dict[str, dict[str, Any]]], None] | None = None,
        on_event: Told | None = None,
        handling: Handling = unguarded,
    ) -> None:
        self.store = Store(spool)
        self.handling = handling  # the daemon's poison guard: a schedule that breaks it goes
        self.on_health = on_health
        self.on_event = on_event
        self.due_at = 0  # wall instant of the next pass
        self.judge_at = HELD_AT  # the earliest slot less its guard not yet judged
        self.last = -RING_GAP
        self.passed = False  # a first pass is made before the daemon's first dispatch

    def tick(self, now: int, rang: bool, busy: bool = False, lead: int = 0) -> None:
        """Pass over the schedules if one needs it now, or the doorbell rang.

        busy: attempts wait to start at their instant, and a pass (a few
        fsyncs) would delay them; it waits, up to BUSY_WAIT past its time,
        unless an overlap is to be judged (see judging).
        """
        judging = self.judging(now, lead)
        if now < self.due_at and not judging and not (rang and now >= self.last + RING_GAP):
            return
        if busy and self.passed and not judging and now < self.due_at + BUSY_WAIT:
            return
        self.last, self.passed = now, True
        p = Pass(self.store, now, running_ids(self.store.spool), lead=lead)
        due = now + REFRESH
        for name in self.store.names():
            nxt = self._one(p, name)
            if nxt is not None:
                due = min(due, nxt)
        self.due_at, self.judge_at = due, p.judge_at
        if self.on_health is not None:
            self.on_health(p.health)

    def judging(self, now: int, lead: int) -> bool:
        """Whether a slot's overlap must be judged now: a claim `lead` ahead could take its task.

        The daemon asks before it claims, so that no claim of its own beats
        a judgment, however far its slow commits make it claim ahead.
        """
        return now + lead >= self.judge_at

    def wake_at(self, busy: bool, lead: int = 0) -> int:
        """The wall instant the loop must wake for the next pass (see tick's busy)."""
        return min(self.due_at + (BUSY_WAIT if busy and self.passed else 0), self.judge_at - lead)

    def _one(self, p: Pass, name: str) -> int | None:
        path = self.store.schedule_file(name)
        with self.handling("schedule", name, path, "materialise"):
            try:
                sched = self.store.read(name)
                if os.lstat(path).st_uid != os.getuid():
                    return None  # its tasks would be ours: see taskq-daemon(8) SCHEDULES
                told = len(p.events)
                nxt = advance(p, sched)
                for doc in p.events[told:]:
                    if self.on_event is not None:
                        self.on_event(doc, sched.task)
                return nxt
            except (CorruptFile, BadInput) as e:  # a bad file, or an occurrence it cannot make
                log.error("quarantining schedule %s: %s", name, e)
                self.store.spool.quarantine(path, str(e), p.now)
            except NotFound:
                pass
            except TaskqError as e:  # the spool's trouble (full, read-only): tried again
                log.error("schedule %s: %s", name, e)
        return None


def retire(store: Store, name: str, now: int) -> list[str]:
    """Cancel a schedule's waiting occurrences and free their keys (rm, --replace).

    The keys go so that a schedule added again under the name can use the
    same slots. Returns the ids cancelled.
    """
    state = store.state(name, now)
    p = Pass(store, now, frozenset())
    out = []
    for task in {state.cursor_task, state.held} - {None}:
        assert task is not None
        if cancel_if_pending(p, task) is None:
            continue
        tid = _id(task)
        out.append(str(tid))
        path = key_path(store.spool, _key_of(store, task))
        try:
            if read_key(path).id == tid:
                os.unlink(path)
        except (OSError, ValueError):
            pass
    store.reset_state(name)
    return out


def _key_of(store: Store, task: str) -> str:
    """The key a pending occurrence was submitted with, read from its body."""
    found = byid.locate(store.spool, str(_id(task)))
    return str(store.spool.read_body(found.path).key)
