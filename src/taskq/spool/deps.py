"""Dependencies between tasks (submit --after): waiting/, deps/ and their resolution.

A task submitted with --after waits in waiting/ (named like a pending task),
outside the due index, until the tasks it names have ended. For each
dependency X, deps/X/ holds one empty file per waiting task, named as that
task's file in waiting/, and, once X has ended, a marker `ended.STATE`
(done, failed or cancelled). Every end of a task writes the marker if the
task has a deps/ directory (ending.end_task, right after the end rename;
in a daemon, in the same group commit), and so does a submitter that
finds a dependency already ended; then the waiters are resolved: a waiting task
whose dependencies all have markers moves to pending/ (to run at its
run_at, at once if that has passed); under the default --after-ok, one
naming a dependency that failed or was cancelled moves to cancelled/ at
once, and that end is resolved in turn. Each move is one rename of the
exact waiting/ name, so racing resolvers (two daemons, a submitter) cannot
both win. Nothing polls: a waiting task costs nothing until one of its
dependencies ends.

The submitter links its entries before it looks at its dependencies and
places its task in waiting/ after that look; an ender writes its marker
after its end rename and lists the entries after its marker. So either the
submitter sees the end (and resolves its own task), or the ender sees the
entry; a task in waiting/ is never forgotten.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from taskq.errors import CorruptFile, NotFound
from taskq.spool import byid, fsutil, hints, journal, transitions
from taskq.spool.ending import end_task, mark_ended, marker
from taskq.spool.journal import Event
from taskq.spool.layout import MARK, Handling, Located, Spool, marker_path, unguarded
from taskq.spool.states import END_STATES, State
from taskq.spool.task import TaskBody, TaskName, check_id, valid_id

_LINK_TRIES = 100  # a resolver removes an emptied deps/X/ at most once per end


@dataclass(frozen=True)
class Resolved:
    """A waiting task that moved on: to pending (its dependencies ended) or cancelled."""

    name: TaskName
    state: State  # pending or cancelled
    reason: str
    path: str
    waited_for: bool = False  # it was cancelled, and something waits for it in turn


def reopen(spool: Spool, task_id: str) -> None:
    """Take back a dependency's end marker: an operator's retry put it back in pending.

    Until then the marker would say "ended" to every task submitted after
    the retry; tasks that still wait for it (--after-any, others pending)
    wait for its new end instead. Called after the retry's rename: a
    submitter that looks in between is told by publish_waiting's own look
    at the dependency's state, not by the marker.
    """
    directory = spool.dep_dir(task_id)
    removed = False
    for state in END_STATES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker_path(directory, state))
            removed = True
    if removed:
        fsutil.fsync_dir(directory)


def waiters(spool: Spool, task_id: str) -> list[TaskName]:
    """The waiting tasks linked under a dependency (markers and strays skipped)."""
    out = []
    for entry in fsutil.listdir(spool.dep_dir(task_id)):
        with contextlib.suppress(ValueError):
            out.append(TaskName.parse(entry))
    return out


def verdict(body: TaskBody, ended: dict[str, State | None]) -> tuple[State, str] | None:
    """Where a waiting task goes given how its dependencies ended; None: keep waiting."""
    if not body.after_any:
        for dep in body.after:
            if ended.get(dep) in (State.FAILED, State.CANCELLED):
                return State.CANCELLED, f"dependency {dep} {ended[dep]}"
    if any(ended.get(dep) is None for dep in body.after):
        return None
    how = "ended" if body.after_any else "done"
    return State.PENDING, f"dependencies {how}: {', '.join(body.after)}"


def resolve(
    spool: Spool, name: TaskName, now: int, live: frozenset[str] = frozenset()
) -> Resolved | None:
    """Move one waiting task on if its dependencies allow; None if it stays (or is gone).

    live names dependencies known not to have ended (a submitter just saw
    them so): a marker of theirs is taken back (reopen) or an end being
    recorded now, whose ender resolves this task in turn.
    """
    path = spool.waiting_path(name)
    try:
        body = spool.read_body(path)
    except FileNotFoundError:
        return None  # resolved by someone else, cancelled, or not placed yet
    except (CorruptFile, OSError) as e:
        spool.quarantine(path, str(e), now)
        return None
    ends = {dep: None if dep in live else marker(spool, dep) for dep in body.after}
    found = verdict(body, ends)
    if found is None:
        return None
    state, reason = found
    located = Located(State.WAITING, path, name)
    waited_for = False
    try:
        if state == State.PENDING:
            dest = _release(spool, located, now, reason)
        else:
            end = end_task(
                spool, located, state, now, Event.CANCELLED, reason=reason, was="waiting"
            )
            dest, waited_for = end
    except FileNotFoundError:
        return None  # another resolver won
    forget(spool, body.after, name)
    return Resolved(name, state, reason, dest, waited_for)


def _release(spool: Spool, found: Located, now: int, reason: str) -> str:
    """waiting -> pending, at its own run_at: its dependencies allow it to run."""
    touched: set[str] = set()
    new = transitions.reschedule(spool, found, found.name.run_at, touched)
    for directory in sorted(touched):
        fsutil.fsync_dir(directory)
    log_dir = spool.log_dir(found.name.id)
    journal.append(log_dir, Event.RELEASED, now, attempt=1, reason=reason, was="waiting")
    return spool.pending_path(new)


def cascade(
    spool: Spool, ended: list[str], now: int, handling: Handling = unguarded
) -> list[Resolved]:
    """Resolve the waiters of tasks that ended, and of the waiters cancelled in turn.

    Each waiting file is resolved within `handling` (the daemon's poison
    guard): one that breaks its resolution is quarantined, and the rest go on.
    """
    out: list[Resolved] = []
    todo = list(ended)
    while todo:
        task_id = todo.pop()
        for name in waiters(spool, task_id):
            done = None
            path = spool.waiting_path(name)
            with handling("task", name.id, path, "resolve"):
                done = resolve(spool, name, now)
            if done is None:
                continue
            out.append(done)
            if done.waited_for:
                todo.append(name.id)
        tidy(spool, task_id)
    return out


def release_waiters(spool: Spool, task_id: str, now: int) -> list[Resolved]:
    """Resolve at once the waiters of a task ended outside a daemon (taskq cancel)."""
    resolved = cascade(spool, [task_id], now)
    if any(r.state == State.PENDING for r in resolved):
        spool.ring()
    return resolved


def forget(spool: Spool, after: list[str], name: TaskName) -> None:
    """Remove a task's entries under its dependencies (it waits no more)."""
    for dep in after:
        with contextlib.suppress(OSError):
            os.unlink(f"{spool.dep_dir(dep)}/{name}")


def tidy(spool: Spool, task_id: str) -> None:
    """Remove deps/X/ once nothing waits there (a late submitter recreates it)."""
    directory = spool.dep_dir(task_id)
    names = fsutil.listdir(directory)
    if not names or any(not n.startswith(MARK) for n in names):
        return
    for n in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, n))
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def pending_ends(spool: Spool, *, unmarked: bool = False) -> list[str]:
    """Dependencies with a recorded end (a safety pass resolves what they still hold).

    With unmarked (a daemon's start-up pass), each dependency with no marker
    is looked up by id, and one found ended is marked now: its ender was
    killed between its end rename and its marker.
    """
    ids = [d for d in fsutil.listdir(spool.deps) if valid_id(d)]
    ended = [d for d in ids if marker(spool, d) is not None]
    if unmarked:
        found = states_of(spool, sorted(set(ids) - set(ended)))
        ended += [
            d for d, state in found.items() if state in END_STATES and mark_ended(spool, d, state)
        ]
    return ended


# -- the submitter's side -----------------------------------------------------


def states_of(spool: Spool, ids: list[str]) -> dict[str, State]:
    """Where each of the tasks is now, found by id (byid.locate_all); one not found is left out."""
    return {task_id: found.state for task_id, found in byid.locate_all(spool, ids).items()}


def check_known(spool: Spool, ids: list[str]) -> None:
    """Refuse dependencies on tasks that do not exist (NotFound names the first)."""
    found = states_of(spool, ids)
    for task_id in ids:
        if check_id(task_id) not in found:
            raise NotFound(f"--after: no task {check_id(task_id)} in {spool.root}")


def publish_waiting(spool: Spool, tmp: str, name: TaskName, after: list[str], now: int) -> None:
    """Place a durable tmp/ body in waiting/, linked under each dependency; resolve it
    at once if a dependency has already ended (see the module docstring for the order)."""
    for dep in after:
        _link(spool, dep, name)
    fsutil.fsync_dir(spool.deps)
    states = states_of(spool, after)
    for dep in after:
        state = states.get(dep)
        if state is None:
            forget(spool, after, name)
            raise NotFound(f"--after: task {dep} is gone (removed by retention?)")
        if state in END_STATES:
            mark_ended(spool, dep, state)
    try:
        fsutil.rename_cas(tmp, spool.waiting_path(name))
    except FileNotFoundError:
        if os.path.exists(tmp):
            raise
        return  # a racing publisher of this body (a key's adopter) placed it: it resolves it
    hints.point_name(spool, name)  # a lookup's hint
    fsutil.fsync_dir(spool.waiting)
    live = frozenset(dep for dep in after if states[dep] not in END_STATES)
    if any(dep not in live for dep in after):
        resolve(spool, name, now, live)


def _link(spool: Spool, dep: str, name: TaskName) -> None:
    directory = spool.dep_dir(dep)
    for _ in range(_LINK_TRIES):
        fsutil.ensure_dir(directory)
        try:
            fsutil.write_new(f"{directory}/{name}", b"", sync=False)
            break
        except FileExistsError:
            break  # linked by a racing publisher of the same body (a key's adopter)
        except FileNotFoundError:
            continue  # a resolver removed the emptied directory meanwhile
    else:
        raise OSError(f"{directory} keeps vanishing")
    fsutil.fsync_dir(directory)
