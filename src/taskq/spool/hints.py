"""The ids/ hints: where each task was put last, so that a lookup by id need not list the spool.

ids/XY/ID (XY: the id's last two characters, random bits that spread ids
evenly over at most 1,024 directories) is a symbolic link whose target is
the name of the file where the task was put last by a submit, an
operator's reschedule or retry, or a lookup that had to search, with the id
left out: RUN_AT_ATTEMPT_QUEUE. It is only ever a hint, and never
followed: byid.py reads it and probes where that name can be now.

So a hint costs a submit one symlink() (kept in the link's inode: no data
block) and no fsync (a batch's last syncfs makes it durable for free),
costs the daemon nothing, and cannot make a lookup wrong: a stale or
missing hint only makes it slower. `taskq fsck` rebuilds every hint from
the spool alone.
"""

from __future__ import annotations

import contextlib
import os

from taskq.errors import TaskqError
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import ClaimName, TaskName
from taskq.times.timespec import format_compact


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
    directory = spool.hint_dir(name.id)
    link = f"{directory}/{name.id}"
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


def point_names(spool: Spool, names: list[TaskName]) -> None:
    """point_name for each of a batch's new tasks: best effort, never synced, never fails.

    The common case, a new link in a directory that exists, costs one
    symlink(); the target is cut from the name's text (RUN_AT_ID_ATTEMPT_QUEUE),
    which the batch formats anyway to publish the task.
    """
    hint_path = spool.hint_path
    for name in names:
        run_at, _, rest = str(name).partition("_")
        target, link = run_at + rest[len(name.id) :], hint_path(name.id)
        try:
            os.symlink(target, link)
        except FileNotFoundError:  # the first hint of its directory: ids/ is there already
            try:
                fsutil.ensure_dir(spool.hint_dir(name.id))
                os.symlink(target, link)
            except (OSError, TaskqError):
                point_name(spool, name)
        except OSError:
            point_name(spool, name)  # an old link to replace


def _replace(directory: str, task_id: str, target: str) -> None:
    staging = os.path.join(directory, f".{task_id}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging)
    os.symlink(target, staging)
    os.replace(staging, os.path.join(directory, task_id))


def forget(spool: Spool, task_id: str) -> None:
    """Remove an id's hint (its task is gone for good); best effort."""
    with contextlib.suppress(OSError):
        os.unlink(spool.hint_path(task_id))


def read_hint(spool: Spool, task_id: str) -> TaskName | None:
    """The task name the hint gives, or None if there is no usable hint.

    A target is RUN_AT_ATTEMPT_QUEUE, or (as hints were first written) a
    path whose last component is the task file's name.
    """
    try:
        entry = os.path.basename(os.readlink(spool.hint_path(task_id)))
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
