"""Retention: prune done/ days, their tasks' logs and keys, once old enough.

A day directory done/YYYYMMDD is removed once the whole day is older than
the retention period; with it go each task's logs/<id>/ and the key file
that names it. failed/ and cancelled/ are left for the operator.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass

from taskq.client.submit import bound_key
from taskq.spool import byid, fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName
from taskq.times.timespec import DAY, parse_compact


@dataclass
class Report:
    days: int = 0
    tasks: int = 0
    keys: int = 0


def day_end(day: str) -> int | None:
    """The first instant after a done/ day, or None if the name is no day."""
    try:
        return parse_compact(f"{day}T000000.000000Z") + DAY
    except ValueError:
        return None


def collect(spool: Spool, now: int, older_than: int, dry_run: bool = False) -> Report:
    """Remove done/ days that ended more than older_than ago; report what went."""
    report = Report()
    for day in fsutil.listdir(spool.done):
        end = day_end(day)
        if end is None or end > now - older_than:
            continue
        report.days += 1
        directory = os.path.join(spool.done, day)
        tasks = [(os.path.join(directory, e), e) for e in fsutil.listdir(directory)]
        # Keys go first, and durably: a key must never name a task that is
        # gone (a later submit would be told that id), while a task that
        # outlives its key after a crash is harmless.
        keys = [k for path, entry in tasks if (k := _key_of(spool, path, entry)) is not None]
        report.keys += len(keys)
        report.tasks += sum(1 for _, entry in tasks if _is_task(entry))
        if dry_run:
            continue
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(key)
        if keys:
            fsutil.fsync_dir(spool.keys)
        for path, entry in tasks:
            if _is_task(entry):
                task_id = TaskName.parse(entry).id
                shutil.rmtree(spool.log_dir(task_id), ignore_errors=True)
                byid.forget(spool, task_id)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        try:
            os.rmdir(directory)
        except OSError:
            pass  # something not ours is in it; leave it for the operator
    return report


def _is_task(entry: str) -> bool:
    try:
        TaskName.parse(entry)
    except ValueError:
        return False
    return True


def _key_of(spool: Spool, path: str, entry: str) -> str | None:
    """The key file that binds a key to this task, if any."""
    try:
        return bound_key(spool, path, TaskName.parse(entry).id)
    except ValueError:
        return None
