"""Retention: what the spool forgets, and when.

A day directory done/YYYYMMDD is removed once the whole day is older than
the retention period; with it go each task's logs/<id>/ and the key file
that names it. failed/ and cancelled/ are left for the operator.
Submissions abandoned in tmp/ (never acknowledged) are removed with their
keys once older than TMP_MAX_AGE, by the daemon and by fsck alike
(`abandoned`, `forget_abandoned`), and so are key files that a member
planted to block another (squats). A shared spool's answers to its members
(replies/) go a day after they were written (drop.REPLY_TTL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass

from taskq.spool import drop, fsutil, hints
from taskq.spool.keys import bound_key, key_owner, rightful
from taskq.spool.layout import Spool, body_id
from taskq.spool.task import TaskName
from taskq.times.timespec import DAY, HOUR, SECOND, parse_compact

TMP_MAX_AGE = HOUR  # a file in tmp/ this old is a submission that was never acknowledged


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
        directory = spool.done_dir(day)
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
                hints.forget(spool, task_id)
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


def clean_tmp(spool: Spool, now: int, max_age: int) -> list[str]:
    """Delete submissions abandoned in tmp/ (never acknowledged) and their keys.

    Also removes key files that a spool member planted to block another
    (squats: not regular files, or owned by someone else than their name
    says). Returns one line per such hostile file removed, for the log.
    """
    cutoff = (now - max_age) / 1e6
    hostile = []
    for entry in fsutil.listdir(spool.keys):
        path = os.path.join(spool.keys, entry)
        try:
            if entry.startswith("."):
                if os.lstat(path).st_mtime <= cutoff:
                    os.unlink(path)  # a key's staging file, left by a killed submitter
                continue
            reason = _squat(path, entry)
            if reason is not None:
                os.unlink(path)
                hostile.append(f"removed keys/{entry}: {reason}")
        except OSError:
            continue
    for entry in abandoned(spool, now, max_age):
        with contextlib.suppress(OSError, ValueError):
            forget_abandoned(spool, entry)
    return hostile


def abandoned(spool: Spool, now: int, max_age: int = TMP_MAX_AGE) -> list[str]:
    """The entries of tmp/ last changed max_age ago or longer: never acknowledged."""
    cutoff = (now - max_age) / SECOND
    out = []
    for entry in fsutil.listdir(spool.tmp):
        try:
            if os.lstat(f"{spool.tmp}/{entry}").st_mtime <= cutoff:
                out.append(entry)
        except FileNotFoundError:
            continue
    return out


def forget_abandoned(spool: Spool, entry: str) -> None:
    """Remove an abandoned entry of tmp/ and, if it is a body, the key file that binds it."""
    path = f"{spool.tmp}/{entry}"
    task_id = body_id(entry)
    if task_id is not None:
        _forget_key(spool, path, task_id)
    os.unlink(path)


def _squat(path: str, entry: str) -> str | None:
    """Why a key file is a squat (not a regular file, or not its user's), or None."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a squat)"
    uid = key_owner(entry)
    if uid is not None and not rightful(st.st_uid, uid):
        return f"owned by uid {st.st_uid}, not by uid {uid} whose key it is (a squat)"
    return None


def _forget_key(spool: Spool, tmp: str, task_id: str) -> None:
    """Remove the key file that names an abandoned submission, if any."""
    path = bound_key(spool, tmp, task_id)
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def clean_replies(spool: Spool, now: int) -> int:
    """Remove the answers in replies/ older than drop.REPLY_TTL; return how many went."""
    gone = 0
    for path in drop.old_replies(spool, now):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            gone += 1
    return gone
