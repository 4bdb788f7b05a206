"""The state machine: every transition is one rename of an exact name.

A rename whose source is gone fails with FileNotFoundError: someone else
(another daemon, a cancel) moved the task first, and the caller has lost the
race and must do nothing. That is the spool's compare-and-swap, and it holds
on every supported filesystem because only rename() itself is relied on
(fsutil.rename_cas): a claim's destination name carries its owner and lease,
and a task's id appears in one file only, so no destination can clobber
another file. These functions do not fsync: each reports the directories
whose entries it changed to `touched`, and callers make those durable at
once (group commit) before anything that depends on them becomes visible.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.layout import Located, Spool
from taskq.spool.states import Phase, State
from taskq.spool.task import ClaimName, TaskName, day_of
from taskq.times.timespec import SECOND

_MOVE_TRIES = 1000
# A daemon claims a task at most this long before its run time (its prepare
# lead, daemon/commit.py): a decision on a pending task taken earlier than
# this before its run time comes before any claim of it.
CLAIM_LEAD_MAX = SECOND
log = logging.getLogger("taskq")
Touched = set[str]  # directories whose entries changed, to be fsynced together


@dataclass(frozen=True)
class DaemonId:
    """A daemon as it names itself in claims: host id and pid."""

    host: str
    pid: int


def _move(spool: Spool, src: str, dest_dir: str, dest_name: str, touched: Touched | None) -> str:
    """Rename src into dest_dir; recreate dest_dir if it vanished meanwhile.

    Both directories are opened without following a symbolic link
    (fsutil.open_dir), and the rename happens between the directories
    opened: a spool member cannot redirect it by swapping a bucket for a
    link. CorruptFile says one of them is a link or no directory.

    A file already at the destination (where the kernel refuses to replace
    it: renameat2's EEXIST) can only be a copy of this task's name, since a
    task's id is in one file only: it is quarantined, once, and the move
    made. It never makes the move fail for good. But a move of a file onto
    its own name (another process moved it there first) is FileExistsError:
    that file is the task, never a copy.
    """
    source = fsutil.open_dir(os.path.dirname(src))  # its bucket, as it is now
    try:
        try:
            _move_from(source, os.path.basename(src), dest_dir, dest_name, touched)
        except FileExistsError:
            if _same_file(src, os.path.join(dest_dir, dest_name)):
                raise
            _set_aside(spool, os.path.join(dest_dir, dest_name), src)
            _move_from(source, os.path.basename(src), dest_dir, dest_name, touched)
    finally:
        os.close(source)
    if touched is not None:
        touched.update((os.path.dirname(src), dest_dir))
    return os.path.join(dest_dir, dest_name)


def _move_from(
    source: int, name: str, dest_dir: str, dest_name: str, touched: Touched | None
) -> None:
    for _ in range(_MOVE_TRIES):
        try:
            fd = fsutil.open_dir(dest_dir)
        except FileNotFoundError:
            if fsutil.ensure_dir(dest_dir) and touched is not None:
                touched.add(os.path.dirname(dest_dir))  # a new directory's parent
            continue
        try:
            fsutil.rename_cas(name, dest_name, src_dir_fd=source, dst_dir_fd=fd)
            return
        except FileNotFoundError:
            try:
                os.lstat(name, dir_fd=source)
            except FileNotFoundError:
                raise FileNotFoundError(errno.ENOENT, "moved meanwhile", name) from None
            # dest_dir was removed after we opened it: make it again
        finally:
            os.close(fd)
    raise OSError(f"directory {dest_dir} keeps vanishing")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samestat(os.lstat(a), os.lstat(b))
    except OSError:
        return False


def _set_aside(spool: Spool, occupant: str, src: str) -> None:
    """Quarantine a file that stands where a task is moving to."""
    rel = os.path.relpath(src, spool.root)
    reason = f"a copy of a task's name, in the way of {rel} moving here"
    if spool.quarantine(occupant, reason, time.time_ns() // 1000):
        log.warning("quarantined %s: %s", os.path.relpath(occupant, spool.root), reason)


def claim(
    spool: Spool,
    pending_path: str,
    name: TaskName,
    daemon: DaemonId,
    expiry: int,
    touched: Touched | None = None,
) -> ClaimName:
    """pending -> claimed: take a due task under a lease."""
    new = ClaimName(name, Phase.CLAIMED, expiry, daemon.pid, daemon.host)
    # Through the bucket as opened now, never through a link put in its place
    # since it was listed: CorruptFile if the bucket is a link.
    bucket = fsutil.open_dir(os.path.dirname(pending_path))
    try:
        fsutil.rename_cas(
            os.path.basename(pending_path), spool.claim_path(new), True, src_dir_fd=bucket
        )
    finally:
        os.close(bucket)
    if touched is not None:
        touched.update((os.path.dirname(pending_path), spool.claimed))
    return new


def start(spool: Spool, held: ClaimName, touched: Touched | None = None) -> ClaimName:
    """claimed -> started: the point of no return before exec."""
    return _rename_claim(spool, held, held.with_(phase=Phase.STARTED), touched)


def renew(spool: Spool, held: ClaimName, expiry: int, touched: Touched | None = None) -> ClaimName:
    """Extend a lease; fails if the claim was taken over or cancelled."""
    return _rename_claim(spool, held, held.with_(expiry=expiry), touched)


def take_over(
    spool: Spool, held: ClaimName, daemon: DaemonId, expiry: int, touched: Touched | None = None
) -> ClaimName:
    """Make another daemon's claim ours, keeping its phase; fails if it moved."""
    new = held.with_(pid=daemon.pid, host=daemon.host, expiry=expiry)
    return _rename_claim(spool, held, new, touched)


def request_cancel(spool: Spool, held: ClaimName, touched: Touched | None = None) -> ClaimName:
    """started -> cancelling: whoever owns the claim stops the attempt, then finishes it."""
    return _rename_claim(spool, held, held.with_(phase=Phase.CANCELLING), touched, unique=False)


def _rename_claim(
    spool: Spool, old: ClaimName, new: ClaimName, touched: Touched | None, unique: bool = True
) -> ClaimName:
    fsutil.rename_cas(spool.claim_path(old), spool.claim_path(new), unique=unique)
    if touched is not None:
        touched.add(spool.claimed)
    return new


def release(spool: Spool, held: ClaimName, touched: Touched | None = None) -> TaskName:
    """claimed (not started) -> pending, unchanged: nothing ran."""
    return _to_pending(spool, spool.claim_path(held), held.task, touched)


def retry_later(
    spool: Spool, held: ClaimName, run_at: int, touched: Touched | None = None
) -> TaskName:
    """started -> pending at a later run_at, as the next attempt (the daemon's retry)."""
    name = held.task.with_(run_at=run_at, attempt=held.task.attempt + 1)
    return _to_pending(spool, spool.claim_path(held), name, touched)


def reschedule(
    spool: Spool, found: Located, run_at: int, touched: Touched | None = None
) -> TaskName:
    """pending -> pending at another run_at; loses to a claim with ENOENT."""
    name = found.name.with_(run_at=run_at)
    return _to_pending(spool, found.path, name, touched)


def requeue(spool: Spool, found: Located, run_at: int, touched: Touched | None = None) -> TaskName:
    """failed -> pending, as the next attempt (an operator's `taskq retry`)."""
    name = found.name.with_(run_at=run_at, attempt=found.name.attempt + 1)
    return _to_pending(spool, found.path, name, touched)


def _to_pending(spool: Spool, src: str, name: TaskName, touched: Touched | None) -> TaskName:
    bucket = spool.bucket_dir(name.bucket)
    try:
        _move(spool, src, bucket, str(name), touched)
    except CorruptFile as e:
        if not os.path.lexists(bucket) or (os.path.isdir(bucket) and not os.path.islink(bucket)):
            raise  # the source's directory, not the bucket, is what is wrong
        # A member put a link (or a file) where the bucket goes: set it
        # aside, so that the task goes into a real bucket.
        reason = f"{e}; set aside to put {name.id} back in pending"
        if spool.quarantine(bucket, reason, time.time_ns() // 1000):
            log.warning("quarantined pending/%s: %s", name.bucket, reason)
        _move(spool, src, bucket, str(name), touched)
    return name


def finish(
    spool: Spool, held: ClaimName, state: State, now: int, touched: Touched | None = None
) -> str:
    """A claim -> done/YYYYMMDD/, failed/ or cancelled/ (an end state)."""
    dirs = {
        State.DONE: spool.done_dir(day_of(now)),
        State.FAILED: spool.failed,
        State.CANCELLED: spool.cancelled,
    }
    if state not in dirs:
        raise ValueError(f"finish into {state!r}")
    return _move(spool, spool.claim_path(held), dirs[state], str(held.task), touched)


def cancel(spool: Spool, found: Located, touched: Touched | None = None) -> str:
    """pending or claimed (not started) -> cancelled: it never runs."""
    return _move(spool, found.path, spool.cancelled, str(found.name), touched)
