"""Durable submission: a task is accepted only once its file is on disk.

Write the body in tmp/, fsync it, rename it into its pending bucket without
clobbering, fsync the bucket and pending/ itself; only then is the id given
out. With an idempotency key, a key file (created by link(), which refuses
an existing name) binds the key to the first task's id before that task is
published, so the key never names a task that cannot appear.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import TYPE_CHECKING

from taskq.errors import CorruptFile, NotFound
from taskq.spool import fsutil, hints
from taskq.spool.faults import armed, crash_point
from taskq.spool.layout import Spool
from taskq.spool.task import TaskBody, TaskName

if TYPE_CHECKING:
    from taskq.client.rekey import KeyPolicy  # only with --key-for or --on-key


def submit(
    spool: Spool, body: TaskBody, group: int | None = None, policy: KeyPolicy | None = None
) -> tuple[TaskName, bool]:
    """Make the task durable; return its name and whether it was created.

    On a key hit nothing is created and the name is the holder's (as it
    was submitted), unless policy (--key-for, --on-key replace: rekey.py)
    lets this task take the key over; policy.replaced then names the
    pending task it replaced. On failure nothing is left behind, unless a
    daemon had already claimed the published task: then it exists, and so
    does its key. A group given makes the task file readable by that group
    (a root daemon filing a member's task for the member alone to read:
    pickup.py).
    """
    name = TaskName(body.run_at, body.id, 1, body.queue)
    tmp = spool.tmp_body(body.id)
    bound = None
    try:
        if body.priority:
            spool.mark_ranked()
        fsutil.write_new(tmp, body.to_json(), 0o600 if group is None else 0o640, group=group)
        crash_point("submit.written")
        if body.key is not None:
            from taskq.spool.keys import key_path  # with a key only

            existing = _bind_key(
                spool, body.key, name, uid=_keyholder(body), policy=policy, now=body.submitted_at
            )
            if existing is not None and existing.id != body.id:
                os.unlink(tmp)
                return existing, False
            bound = key_path(spool, body.key, _keyholder(body))
            crash_point("submit.key-bound")
        _publish_body(spool, tmp, name, body)
        crash_point("submit.synced")
    except (OSError, NotFound) as e:  # NotFound: a dependency vanished meanwhile
        if _withdraw(spool, tmp, name) and bound is not None:
            with contextlib.suppress(OSError):
                os.unlink(bound)
        if isinstance(e, NotFound):
            raise
        raise fsutil.as_taskq_error(e, f"cannot submit to {spool.root}") from None
    spool.ring()
    return name, True


def _publish_body(spool: Spool, tmp: str, name: TaskName, body: TaskBody) -> None:
    """Publish into pending/, or into waiting/ for a task with dependencies."""
    if body.after:
        from taskq.spool import deps  # only for --after: off a plain submit's start-up

        deps.publish_waiting(spool, tmp, name, body.after, body.submitted_at)
    else:
        publish(spool, tmp, name)


def _withdraw(spool: Spool, tmp: str, name: TaskName) -> bool:
    """Undo a failed submission; False if it cannot be undone (already claimed)."""
    published = spool.pending_path(name)
    try:
        fsutil.rename_cas(published, tmp)  # published, then an fsync failed
    except FileNotFoundError:
        if not os.path.exists(tmp):
            return False  # never written, or a daemon has claimed it: it stands
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return True


def publish(spool: Spool, tmp: str, name: TaskName) -> bool:
    """Rename a durable tmp/ file into its bucket and make that durable.

    Returns False when the file had already been published by someone else
    (the rename lost with ENOENT); the bucket is made durable either way.
    A daemon may remove an empty bucket between our mkdir and our rename,
    so a vanished bucket is created again.
    """
    published = _place(spool, tmp, name)
    crash_point("submit.renamed")
    fsutil.fsync_dir(spool.bucket_dir(name.bucket))
    fsutil.fsync_dir(spool.pending)
    return published


_PUBLISH_TRIES = (
    1000  # a daemon removes a bucket at most once a rescan; 1000 losses in a row is no race
)


def _place(spool: Spool, tmp: str, name: TaskName, hint: bool = True) -> bool:
    """Rename tmp into its bucket (no sync); False if someone else did it first.

    The id's hint (hints.py) is written first, so a published task has one
    unless a crash loses it; it is not synced (a lookup without it
    searches). hint=False: the caller wrote it already.
    """
    bucket = spool.bucket_dir(name.bucket)
    published = f"{bucket}/{name}"
    if hint:
        hints.point_name(spool, name)
    for _ in range(_PUBLISH_TRIES):
        fsutil.ensure_dir(bucket)  # a link or a file there is refused (CorruptFile)
        try:
            fsutil.rename_fresh(tmp, published)
            return True
        except FileNotFoundError:
            if not os.path.exists(tmp):
                return False
    raise OSError(f"bucket {bucket} keeps vanishing")


def _place_unhinted(spool: Spool, tmp: str, name: TaskName) -> bool:
    return _place(spool, tmp, name, hint=False)


def _first_of_each_key(bodies: list[TaskBody]) -> tuple[list[int], dict[int, int]]:
    """The lines to submit, and each line repeating an earlier line's key -> that line.

    A key is its submitter's: members' bodies filed together share none.
    """
    first_of_key: dict[tuple[int | None, str], int] = {}
    repeats: dict[int, int] = {}
    todo: list[int] = []
    for i, body in enumerate(bodies):
        key = None if body.key is None else (body.submitter, body.key)
        if key is not None and key in first_of_key:
            repeats[i] = first_of_key[key]
        else:
            if key is not None:
                first_of_key[key] = i
            todo.append(i)
    return todo, repeats


def submit_batch(
    spool: Spool, bodies: list[TaskBody], groups: list[int | None] | None = None
) -> list[tuple[TaskName, bool]]:
    """Submit many tasks with group commit: three syncs for the whole batch.

    Bodies are written unsynced and made durable by one syncfs; keys are
    bound (staging file, then link) and a second syncfs makes them durable;
    then every body is renamed into its bucket and a last syncfs makes the
    renames durable. Nothing is acknowledged before that. On failure, what
    was published is withdrawn, with its key; a task a daemon has already
    claimed cannot be withdrawn and keeps its key. groups: each task
    file's group, as submit's group (the pickup filing members' tasks).
    """
    from taskq.client import placing  # only for a batch: off a plain submit's start-up

    names = [TaskName(b.run_at, b.id, 1, b.queue) for b in bodies]
    results: list[tuple[TaskName, bool] | None] = [None] * len(bodies)
    todo, repeats = _first_of_each_key(bodies)
    bound: dict[int, str] = {}
    tmp_fd = -1
    try:
        if any(b.priority for b in bodies):
            spool.mark_ranked()
        tmp_fd = fsutil.open_dir(spool.tmp)
        entries = [spool.tmp_entry(body.id) for body in bodies]  # (a repeated key's: unused)
        mine = None if groups is None else [groups[i] for i in todo]
        _write_bodies(spool, tmp_fd, [(entries[i], bodies[i], names[i]) for i in todo], mine)
        fsutil.syncfs_fd(tmp_fd, spool.root)
        crash_point("submit.written")
        _bind_keys(spool, tmp_fd, bodies, names, [i for i in todo if bodies[i].key], results, bound)
        order = [i for i in todo if results[i] is None]
        hints.point_names(spool, [names[i] for i in order if bodies[i].key is not None])

        renamed = _renamed if armed("submit.renamed") else None  # (not a call a line otherwise)
        placing.place_all(
            spool, tmp_fd, [(entries[i], names[i]) for i in order], renamed, _place_unhinted
        )
        for i in order:
            results[i] = (names[i], True)
        fsutil.syncfs_fd(tmp_fd, spool.root)
        crash_point("submit.synced")
        for i, first in repeats.items():
            results[i] = (results[first] or (names[first], True))[0], False
    except BaseException as e:  # nothing of a refused batch may stay behind
        for i in todo:
            if _withdraw(spool, spool.tmp_body(bodies[i].id), names[i]) and i in bound:
                with contextlib.suppress(OSError):
                    os.unlink(bound[i])
        if isinstance(e, OSError):
            raise fsutil.as_taskq_error(e, f"cannot submit to {spool.root}") from None
        raise
    finally:
        if tmp_fd >= 0:
            os.close(tmp_fd)
    spool.ring()
    return [r for r in results if r is not None]


def _renamed(_: int) -> None:
    crash_point("submit.renamed")


def _bind_keys(
    spool: Spool,
    tmp_fd: int,
    bodies: list[TaskBody],
    names: list[TaskName],
    keyed: list[int],
    results: list[tuple[TaskName, bool] | None],
    bound: dict[int, str],
) -> None:
    """Bind the keys of a batch's keyed tasks, then sync once; a key held already answers its line.

    A line whose key names another task gets that task as its result, and
    its body is removed; a bound key's path goes into `bound` (withdrawn
    with its task if the batch fails).
    """
    if not keyed:
        return
    from taskq.spool.keys import key_path  # with a key only

    for i in keyed:
        uid = _keyholder(bodies[i])
        existing = _bind_key(spool, str(bodies[i].key), names[i], sync=False, uid=uid)
        if existing is None or existing.id == bodies[i].id:  # (ours, filed again)
            bound[i] = key_path(spool, str(bodies[i].key), uid)
        else:
            results[i] = (existing, False)
            os.unlink(spool.tmp_entry(bodies[i].id), dir_fd=tmp_fd)
    fsutil.syncfs_fd(tmp_fd, spool.root)
    crash_point("submit.key-bound")


def _write_bodies(
    spool: Spool,
    tmp_fd: int,
    todo: list[tuple[str, TaskBody, TaskName]],
    groups: list[int | None] | None,
) -> None:
    """Write a batch's bodies in tmp/ (unsynced, through tmp_fd), after the hints of the unkeyed.

    A batch's ids follow one another, so their hints are one file for the
    lot (hints.point_batch), not a link each. A task with a key gets its
    hint when it is placed, once the key is known to be its own. Each hint
    names the task as it will be published; until then a lookup finds no
    task, as it should.
    """
    hints.point_batch(spool, [name for _, body, name in todo if body.key is None])
    write = fsutil.write_new
    if groups is None:
        fsutil.write_all_new(tmp_fd, [(entry, body.to_json()) for entry, body, _ in todo])
    else:
        for (entry, body, _), group in zip(todo, groups, strict=True):
            mode = 0o600 if group is None else 0o640
            write(entry, body.to_json(), mode, sync=False, group=group, dir_fd=tmp_fd)


def _keyholder(body: TaskBody) -> int:
    """Whose key a task's is: its submitter's (a member's drop file, filed by root), or ours."""
    return os.geteuid() if body.submitter is None else body.submitter


def _bind_key(
    spool: Spool,
    key: str,
    name: TaskName,
    sync: bool = True,
    uid: int | None = None,
    policy: KeyPolicy | None = None,
    now: int = 0,
) -> TaskName | None:
    """Bind uid's key (by default ours) to this task; return the task that holds it instead.

    With sync=False the caller syncs the staging file before and the key
    directory after (group commit). A key bound for another user (a
    member, by the root daemon filing the member's drop file) is readable,
    so that the member's submit finds it without asking a daemon. With a
    policy, a holder whose window has passed, or (--on-key replace) a
    pending or cancelled one, gives the key up to this task.
    """
    from taskq.spool.keys import binding, key_path, legacy_key_path  # with a key only

    me = os.geteuid()
    uid = me if uid is None else uid
    if uid == me:
        with contextlib.suppress(OSError, ValueError, CorruptFile):  # none, or not ours: ignored
            return _adopt_key(spool, legacy_key_path(spool, key), uid)
    path = key_path(spool, key, uid)
    staging = spool.key_path(f".{name.id}.tmp")
    until = None if policy is None else policy.until(now)
    fsutil.write_new(staging, binding(name, until), 0o600 if uid == me else 0o644, sync=sync)
    try:
        os.link(staging, path)
    except FileExistsError:
        holder = _adopt_key(spool, path, uid)
        if policy is None:
            return holder
        if not _taken(spool, path, uid, staging, policy, name, now):
            return _adopt_key(spool, path, uid)  # the holder, or whoever won the race for it
    finally:
        os.unlink(staging)
    if sync:
        fsutil.fsync_dir(spool.keys)
    return None


def _taken(
    spool: Spool, path: str, uid: int, staging: str, policy: KeyPolicy, name: TaskName, now: int
) -> bool:
    """Whether this task took the key over from its holder (see rekey.py).

    The holder is read, judged and replaced under the key's take-over
    marker (keys.taking), one taker at a time. A holder whose submission
    was cut short, or has not yet published, is published first, so that
    a replace cancels it like any pending holder instead of finding no
    task and leaving it to run beside this one.
    """
    from taskq.spool.keys import read_binding, take_over, taking  # with a key only

    with taking(spool, path):
        try:
            holder, until, seen = read_binding(path, uid)
        except FileNotFoundError:
            return _link_free(staging, path)  # the holder's key was removed meanwhile
        except (OSError, ValueError, CorruptFile):
            return False
        crash_point("rekey.read")
        _finish(spool, holder)
        if not policy.decide(spool, holder, until, name, now):
            return False
        return take_over(spool, path, seen, staging)


def _link_free(staging: str, path: str) -> bool:
    """Bind a key that is free again; False if another submitter bound it first."""
    try:
        os.link(staging, path)
    except FileExistsError:
        return False
    return True


def _finish(spool: Spool, first: TaskName) -> None:
    """Publish the durable body of a submission that bound its key and stopped (or is about to)."""
    tmp = spool.tmp_body(first.id)
    if os.path.exists(tmp):
        # The first submitter bound the key and then stopped (or is about to
        # publish): publishing its durable body is exactly what it would do.
        with contextlib.suppress(FileNotFoundError):  # it has just published it itself
            _publish_body(spool, tmp, first, spool.read_body(tmp))


def _adopt_key(spool: Spool, path: str, uid: int) -> TaskName:
    """Return the task a key names, finishing its submission if that was cut short.

    A key file that another user planted under this user's name is refused
    as a temporary failure: a daemon removes such files (clean_tmp).
    """
    from taskq.spool.keys import read_key  # with a key only

    try:
        first = read_key(path, uid)
    except (CorruptFile, ValueError) as e:  # a squat, or a file that names no task
        rel = os.path.relpath(path, spool.root)
        fix = "a daemon removes it" if isinstance(e, CorruptFile) else "taskq fsck removes it"
        raise OSError(errno.EAGAIN, f"key file {rel} {e}; {fix}, try again") from None
    _finish(spool, first)
    return first
