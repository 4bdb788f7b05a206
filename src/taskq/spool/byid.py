"""Finding a task by id without listing the spool: ids/ hints, checked by probing.

ids/XY/ID (XY: the id's last two characters, random bits that spread ids
evenly over at most 1,024 directories) is a symbolic link whose target is
the name of the file where the task was put last by a submit, an
operator's reschedule or retry, or a lookup that had to search, with the id
left out: RUN_AT_ATTEMPT_QUEUE. It is only ever a hint, and never
followed. A lookup reads it, puts the id back into the name and
probes the few places that name can be in now, in the order tasks move
through them: its bucket in pending/, claimed/ (listed: it holds only the
tasks in flight), failed/, cancelled/ and each day of done/. Moves that
change the name without touching the hint (the daemon's retry after a
failed attempt: attempt + 1, a later run_at) are journalled with the new
run_at, so the journal's names are probed next. A task in none of those
places (its hint lost in a crash, a spool from before ids/ existed, or a
task that moved back and forth while we looked) is found by listing the
spool, the way every lookup once worked, and its hint is rewritten.

So a hint costs a submit one symlink() (kept in the link's inode: no data
block) and no fsync (a batch's last syncfs
makes it durable for free), costs the daemon nothing, and cannot make a
lookup wrong: a stale or missing hint only makes it slower. `taskq fsck`
rebuilds every hint from the spool alone.
"""

from __future__ import annotations

import contextlib
import os

from taskq.errors import NotFound, TaskqError
from taskq.spool import fsutil, journal
from taskq.spool.layout import Located, Spool
from taskq.spool.states import STATE_OF, State
from taskq.spool.task import ClaimName, TaskBody, TaskName, check_id
from taskq.times.timespec import format_compact

ROUNDS = 3  # probe rounds before a lookup falls back to listing the spool
_RESCHEDULES = ("rescheduled", "retried", "retry")  # journal events that rename a task


def shard(spool: Spool, task_id: str) -> str:
    """The ids/ directory that holds this id's hint."""
    return os.path.join(spool.ids, task_id[-2:])


def hint_path(spool: Spool, task_id: str) -> str:
    return os.path.join(shard(spool, task_id), task_id)


def point(spool: Spool, task_id: str, path: str) -> None:
    """Make the id's hint name the task file at path; best effort, never synced, never fails."""
    name = name_of(path)
    if name is not None and name.id == task_id:
        point_name(spool, name)


def name_of(path: str) -> TaskName | None:
    """The task name of a task file's path (in claimed/, its claim's task), if it has one."""
    base = os.path.basename(path)
    try:
        return TaskName.parse(base)
    except ValueError:
        try:
            return ClaimName.parse(base).task
        except ValueError:
            return None


def point_name(spool: Spool, name: TaskName) -> None:
    """Make the hint of name.id name the task: best effort, never synced, never fails.

    Its target is the task's name without the id (the link's own name):
    RUN_AT_ATTEMPT_QUEUE, short enough (under 60 bytes for a queue name of
    up to 33 characters and a one-digit attempt) for the filesystem to keep
    it in the link's inode,
    which halves what the link costs to create. A new hint is one
    symlink(); an existing one is replaced by a rename, so a reader sees
    the old target or the new one, never none.
    """
    directory = shard(spool, name.id)
    link = os.path.join(directory, name.id)
    target = f"{format_compact(name.run_at)}_{name.attempt}_{name.queue}"
    with contextlib.suppress(OSError, TaskqError):
        for _ in range(2):
            try:
                os.symlink(target, link)
                return
            except FileExistsError:
                _replace(directory, name.id, target)
                return
            except FileNotFoundError:
                fsutil.ensure_dir(spool.ids)
                fsutil.ensure_dir(directory)


def _replace(directory: str, task_id: str, target: str) -> None:
    staging = os.path.join(directory, f".{task_id}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging)
    os.symlink(target, staging)
    os.replace(staging, os.path.join(directory, task_id))


def forget(spool: Spool, task_id: str) -> None:
    """Remove an id's hint (its task is gone for good); best effort."""
    with contextlib.suppress(OSError):
        os.unlink(hint_path(spool, task_id))


def read_hint(spool: Spool, task_id: str) -> TaskName | None:
    """The task name the hint gives, or None if there is no usable hint.

    A target is RUN_AT_ATTEMPT_QUEUE, or (as hints were first written) a
    path whose last component is the task file's name.
    """
    try:
        entry = os.path.basename(os.readlink(hint_path(spool, task_id)))
    except OSError:
        return None
    run_at, sep, rest = entry.partition("_")
    for text in (f"{run_at}_{task_id}_{rest}" if sep else "", entry):
        try:
            name = TaskName.parse(text)
        except ValueError:
            try:
                name = ClaimName.parse(text).task
            except ValueError:
                continue
        return name if name.id == task_id else None
    return None


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
        path = os.path.join(spool.bucket_dir(name.bucket), str(name))
        if os.path.lexists(path):
            return Located(State.PENDING, path, name)
        path = os.path.join(spool.waiting, str(name))  # --after: named as in pending/
        if os.path.lexists(path):
            return Located(State.WAITING, path, name)
    found = claimed(spool, task_id)
    if found is not None:
        return found
    for directory, state in ((spool.failed, State.FAILED), (spool.cancelled, State.CANCELLED)):
        for name in names:
            path = os.path.join(directory, str(name))
            if os.path.lexists(path):
                return Located(state, path, name)
    for day in reversed(fsutil.listdir(spool.done)):
        for name in names:
            path = os.path.join(spool.done, day, str(name))
            if os.path.lexists(path):
                return Located(State.DONE, path, name)
    return None


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
        for task_id, hit in spool.scan(missing).items():
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
