"""Finding a task by id without listing the spool: its ids/ hint, checked by probing.

A lookup reads the id's hint (hints.py), puts the id back into the name and
probes the few places that name can be in now, in the order tasks move
through them: its bucket in pending/, claimed/ (listed: it holds only the
tasks in flight), failed/, cancelled/ and each day of done/. Moves that
change the name without touching the hint (the daemon's retry after a
failed attempt: attempt + 1, a later run_at) are journalled with the new
run_at, so the journal's names are probed next. A task in none of those
places (its hint lost in a crash, a spool from before ids/ existed, or a
task that moved back and forth while we looked) is found by listing the
spool, the way every lookup once worked, and its hint is rewritten.

A stale or missing hint cannot make a lookup wrong, only slower.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

from taskq.errors import NotFound, TaskqError
from taskq.spool import journal, walk
from taskq.spool.hints import point, read_hint
from taskq.spool.journal import Event
from taskq.spool.layout import Located, Spool
from taskq.spool.states import STATE_OF, State
from taskq.spool.task import ClaimName, TaskBody, TaskName, check_id

ROUNDS = 3  # probe rounds before a lookup falls back to listing the spool
_RESCHEDULES = (Event.RESCHEDULED, Event.RETRIED, Event.RETRY)  # journal events that rename a task


def journal_names(spool: Spool, hint: TaskName) -> list[TaskName]:
    """The names the journal says the task was given since, newest first."""
    names = [hint]
    for r in journal.read(spool.log_dir(hint.id)):
        attempt = r.get("next_attempt", r.get("attempt"))
        if r["event"] not in _RESCHEDULES or not isinstance(r.get("run_at"), str):
            continue
        if not isinstance(attempt, int) or attempt < 1:
            continue
        from taskq.times.when import parse_when  # rarely needed: off submit's start-up path

        try:
            run_at = parse_when(r["run_at"], 0)
        except TaskqError:
            continue
        name = TaskName(run_at, hint.id, attempt, hint.queue)
        if name not in names:
            names.append(name)
    return [names[0], *reversed(names[1:])] if len(names) > 1 else names


def probe(spool: Spool, task_id: str, names: list[TaskName]) -> Located | None:
    """Look for the task under these names in every state, in the order tasks move."""
    for name in names:
        path = spool.pending_path(name)
        if os.path.lexists(path):
            return Located(State.PENDING, path, name)
        path = spool.waiting_path(name)  # --after: named as in pending/
        if os.path.lexists(path):
            return Located(State.WAITING, path, name)
    found = claimed(spool, task_id)
    if found is not None:
        return found
    ended = (State.FAILED, State.CANCELLED)
    for place in itertools.chain(walk.places(spool, ended), _days_newest_first(spool)):
        for name in names:
            path = f"{place.directory}/{name}"
            if os.path.lexists(path):
                return Located(place.state, path, name)
    return None


def _days_newest_first(spool: Spool) -> Iterator[walk.Place]:
    yield from reversed(list(walk.places(spool, (State.DONE,))))


def claimed(spool: Spool, task_id: str) -> Located | None:
    """The task's claim in claimed/, listed (fresh on shared filesystems), if it has one."""
    try:
        entries = os.listdir(spool.claimed)
    except FileNotFoundError:
        return None
    for entry in entries:
        if task_id not in entry:
            continue
        try:
            claim = ClaimName.parse(entry)
        except ValueError:
            continue
        if claim.task.id == task_id:
            path = os.path.join(spool.claimed, entry)
            return Located(STATE_OF[claim.phase], path, claim.task, claim)
    return None


def locate(spool: Spool, task_id: str) -> Located:
    """Find a task by id in any state; raise NotFound if it is nowhere.

    Probes from the hint cost a few stat() calls whatever the spool holds;
    only a task the hints cannot reach costs a listing of the spool.
    """
    task_id = check_id(task_id)
    found = locate_all(spool, [task_id]).get(task_id)
    if found is None:
        raise NotFound(f"no task {task_id} in {spool.root}")
    return found


def locate_all(spool: Spool, ids: list[str]) -> dict[str, Located]:
    """Find tasks by id, each through its hint; those the hints cannot reach, by one listing.

    A task that is nowhere is left out of the answer.
    """
    found: dict[str, Located] = {}
    for task_id in map(check_id, ids):
        hit = _from_hint(spool, task_id)
        if hit is not None:
            found[task_id] = hit
    missing = {check_id(i) for i in ids} - found.keys()
    if missing:
        for task_id, hit in walk.find(spool, missing).items():
            point(spool, task_id, hit.path)
            found[task_id] = hit
    return found


def _from_hint(spool: Spool, task_id: str) -> Located | None:
    """The task where its hint, or the journal's names since, say it is; None if not there."""
    hint = read_hint(spool, task_id)
    if hint is None:
        return None
    found = probe(spool, task_id, [hint])
    if found is not None:
        return found
    for _ in range(ROUNDS):
        found = probe(spool, task_id, journal_names(spool, hint))
        if found is not None:
            point(spool, task_id, found.path)
            return found
    return None


def load(spool: Spool, task_id: str) -> tuple[Located, TaskBody]:
    """Locate a task and read its body, looking again if it moves meanwhile."""
    for _ in range(10):
        found = locate(spool, task_id)
        try:
            return found, spool.read_body(found.path)
        except FileNotFoundError:
            continue
    raise NotFound(f"task {task_id} keeps moving; try again")


def known(spool: Spool, task_id: str) -> bool:
    """Whether a task with this id exists (a full lookup)."""
    try:
        locate(spool, task_id)
    except NotFound:
        return False
    return True
