"""Retention: prune done/ days, their tasks' logs and keys, once old enough.

A day directory done/YYYYMMDD is removed once the whole day is older than
the retention period; with it go each task's logs/<id>/ and the key file
that names it. failed/ and cancelled/ are left for the operator.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from taskq import fsutil
from taskq.spool import Spool
from taskq.submit import key_path
from taskq.task import TaskName
from taskq.timespec import DAY, parse_compact


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
        for entry in fsutil.listdir(directory):
            _remove_task(spool, os.path.join(directory, entry), entry, report, dry_run)
        if not dry_run:
            try:
                os.rmdir(directory)
            except OSError:
                pass  # something not ours is in it; leave it for fsck
    return report


def _remove_task(spool: Spool, path: str, entry: str, report: Report, dry_run: bool) -> None:
    try:
        name = TaskName.parse(entry)
    except ValueError:
        return
    report.tasks += 1
    key = _key_naming(spool, path, name)
    if key is not None:
        report.keys += 1
    if dry_run:
        return
    if key is not None:
        _unlink(key)
    shutil.rmtree(spool.log_dir(name.id), ignore_errors=True)
    _unlink(path)


def _key_naming(spool: Spool, path: str, name: TaskName) -> str | None:
    """The key file that binds a key to this task, if any."""
    try:
        body = spool.read_body(path)
    except Exception:
        return None
    if body.key is None:
        return None
    candidate = key_path(spool, body.key)
    try:
        with open(candidate) as f:
            bound = TaskName.parse(f.read().strip())
    except (OSError, ValueError):
        return None
    return candidate if bound.id == name.id else None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
