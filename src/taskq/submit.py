"""Durable submission: a task is accepted only once its file is on disk.

Write the body in tmp/, fsync it, rename it into its pending bucket without
clobbering, fsync the bucket and pending/ itself; only then is the id given
out. With an idempotency key, a key file (created by link(), which refuses
an existing name) binds the key to the first task's id before that task is
published, so the key never names a task that cannot appear.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

from taskq import byid, fsutil
from taskq.faults import crash_point
from taskq.spool import Spool
from taskq.task import TaskBody, TaskName

_PUBLISH_TRIES = (
    1000  # a daemon removes a bucket at most once a rescan; 1000 losses in a row is no race
)


def submit(spool: Spool, body: TaskBody) -> tuple[TaskName, bool]:
    """Make the task durable; return its name and whether it was created.

    On a key hit nothing is created and the name is the first task's (as it
    was submitted). On failure nothing is left behind, unless a daemon had
    already claimed the published task: then it exists, and so does its key.
    """
    name = TaskName(body.run_at, body.id, 1, body.queue)
    tmp = os.path.join(spool.tmp, f"{body.id}.task")
    bound = None
    try:
        fsutil.write_new(tmp, body.to_json())
        crash_point("submit.written")
        if body.key is not None:
            existing = _bind_key(spool, body.key, name)
            if existing is not None:
                os.unlink(tmp)
                return existing, False
            bound = key_path(spool, body.key)
            crash_point("submit.key-bound")
        publish(spool, tmp, name)
        crash_point("submit.synced")
    except OSError as e:
        if _withdraw(spool, tmp, name) and bound is not None:
            with contextlib.suppress(OSError):
                os.unlink(bound)
        raise fsutil.as_taskq_error(e, f"cannot submit to {spool.root}") from None
    spool.ring()
    return name, True


def _withdraw(spool: Spool, tmp: str, name: TaskName) -> bool:
    """Undo a failed submission; False if it cannot be undone (already claimed)."""
    published = os.path.join(spool.bucket_dir(name.bucket), str(name))
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


def _place(spool: Spool, tmp: str, name: TaskName) -> bool:
    """Rename tmp into its bucket (no sync); False if someone else did it first.

    The id's hint (byid.py) is written first, so a published task has one
    unless a crash loses it; it is not synced (a lookup without it searches).
    """
    bucket = spool.bucket_dir(name.bucket)
    byid.point(spool, name.id, os.path.join(bucket, str(name)))
    for _ in range(_PUBLISH_TRIES):
        fsutil.ensure_dir(bucket)
        try:
            fsutil.rename_cas(tmp, os.path.join(bucket, str(name)))
            return True
        except FileNotFoundError:
            if not os.path.exists(tmp):
                return False
    raise OSError(f"bucket {bucket} keeps vanishing")


def submit_batch(spool: Spool, bodies: list[TaskBody]) -> list[tuple[TaskName, bool]]:
    """Submit many tasks with group commit: three syncs for the whole batch.

    Bodies are written unsynced and made durable by one syncfs; keys are
    bound (staging file, then link) and a second syncfs makes them durable;
    then every body is renamed into its bucket and a last syncfs makes the
    renames durable. Nothing is acknowledged before that. On failure, what
    was published is withdrawn, with its key; a task a daemon has already
    claimed cannot be withdrawn and keeps its key.
    """
    names = [TaskName(b.run_at, b.id, 1, b.queue) for b in bodies]
    results: list[tuple[TaskName, bool] | None] = [None] * len(bodies)
    first_of_key: dict[str, int] = {}
    repeats: dict[int, int] = {}  # a line repeating an earlier line's key -> that line
    todo: list[int] = []
    for i, body in enumerate(bodies):
        if body.key is not None and body.key in first_of_key:
            repeats[i] = first_of_key[body.key]
        else:
            if body.key is not None:
                first_of_key[body.key] = i
            todo.append(i)
    tmps = {i: os.path.join(spool.tmp, f"{bodies[i].id}.task") for i in todo}
    bound: dict[int, str] = {}
    try:
        for i in todo:
            fsutil.write_new(tmps[i], bodies[i].to_json(), sync=False)
        fsutil.syncfs(spool.root)
        crash_point("submit.written")
        keyed = [i for i in todo if bodies[i].key is not None]
        for i in keyed:
            existing = _bind_key(spool, str(bodies[i].key), names[i], sync=False)
            if existing is None:
                bound[i] = key_path(spool, str(bodies[i].key))
            else:
                results[i] = (existing, False)
                os.unlink(tmps[i])
        if keyed:
            fsutil.syncfs(spool.root)
            crash_point("submit.key-bound")
        for i in todo:
            if results[i] is None:
                _place(spool, tmps[i], names[i])
                results[i] = (names[i], True)
                crash_point("submit.renamed")
        fsutil.syncfs(spool.root)
        crash_point("submit.synced")
        for i, first in repeats.items():
            results[i] = (results[first] or (names[first], True))[0], False
    except OSError as e:
        for i in todo:
            if _withdraw(spool, tmps[i], names[i]) and i in bound:
                with contextlib.suppress(OSError):
                    os.unlink(bound[i])
        raise fsutil.as_taskq_error(e, f"cannot submit to {spool.root}") from None
    spool.ring()
    return [r for r in results if r is not None]


def key_path(spool: Spool, key: str) -> str:
    """The key file of an idempotency key: a hash, so any key is a safe name."""
    return os.path.join(spool.keys, hashlib.sha256(key.encode()).hexdigest()[:40])


def read_key(path: str) -> TaskName:
    """The task a key file names; OSError if it cannot be read, ValueError if it names none."""
    with open(path) as f:
        return TaskName.parse(f.read().strip())


def bound_key(spool: Spool, task_file: str, task_id: str) -> str | None:
    """The key file that binds the key of this task's body to this task, if any."""
    try:
        body = spool.read_body(task_file)
    except Exception:
        return None
    if body.key is None:
        return None
    path = key_path(spool, body.key)
    try:
        return path if read_key(path).id == task_id else None
    except (OSError, ValueError):
        return None


def _bind_key(spool: Spool, key: str, name: TaskName, sync: bool = True) -> TaskName | None:
    """Bind key to this task; return the task already bound to it, if any.

    With sync=False the caller syncs the staging file before and the key
    directory after (group commit).
    """
    path = key_path(spool, key)
    staging = os.path.join(spool.keys, f".{name.id}.tmp")
    fsutil.write_new(staging, f"{name}\n".encode(), sync=sync)
    try:
        os.link(staging, path)
    except FileExistsError:
        return _adopt_key(spool, path)
    finally:
        os.unlink(staging)
    if sync:
        fsutil.fsync_dir(spool.keys)
    return None


def _adopt_key(spool: Spool, path: str) -> TaskName:
    """Return the task a key names, finishing its submission if that was cut short."""
    first = read_key(path)
    tmp = os.path.join(spool.tmp, f"{first.id}.task")
    if os.path.exists(tmp):
        # The first submitter bound the key and then stopped (or is about to
        # publish): publishing its durable body is exactly what it would do.
        publish(spool, tmp, first)
    return first


def clean_tmp(spool: Spool, now: int, max_age: int) -> None:
    """Delete submissions abandoned in tmp/ (never acknowledged) and their keys."""
    cutoff = (now - max_age) / 1e6
    for entry in fsutil.listdir(spool.keys):
        path = os.path.join(spool.keys, entry)
        try:
            if entry.startswith(".") and os.lstat(path).st_mtime <= cutoff:
                os.unlink(path)  # a key's staging file, left by a killed submitter
        except OSError:
            continue
    for entry in fsutil.listdir(spool.tmp):
        path = os.path.join(spool.tmp, entry)
        try:
            if os.lstat(path).st_mtime > cutoff:
                continue
            if entry.endswith(".task"):
                _forget_key(spool, path, entry[: -len(".task")])
            os.unlink(path)
        except (OSError, ValueError):
            continue


def _forget_key(spool: Spool, tmp: str, task_id: str) -> None:
    """Remove the key file that names an abandoned submission, if any."""
    path = bound_key(spool, tmp, task_id)
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)
