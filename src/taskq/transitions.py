"""The state machine: every transition is one rename of an exact name.

A rename whose source is gone fails with FileNotFoundError: someone else
(another daemon, a cancel) moved the task first, and the caller has lost the
race and must do nothing. That is the spool's compare-and-swap. These
functions do not fsync; callers make a batch durable at once (group commit)
before anything that depends on it becomes visible.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from taskq import fsutil
from taskq.spool import Located, Spool
from taskq.task import ClaimName, TaskName, day_of

_MOVE_TRIES = 1000


@dataclass(frozen=True)
class Owner:
    """A daemon as it names itself in claims: host id and pid."""

    host: str
    pid: int


def _move(src: str, dest_dir: str, dest_name: str) -> str:
    """Rename src into dest_dir; recreate dest_dir if it vanished meanwhile."""
    dest = os.path.join(dest_dir, dest_name)
    for _ in range(_MOVE_TRIES):
        try:
            fsutil.rename_noreplace(src, dest)
            return dest
        except FileNotFoundError:
            if not os.path.lexists(src):
                raise
            fsutil.ensure_dir(dest_dir)
    raise OSError(f"directory {dest_dir} keeps vanishing")


def claim_path(spool: Spool, claim: ClaimName) -> str:
    return os.path.join(spool.claimed, str(claim))


def claim(spool: Spool, pending_path: str, name: TaskName, owner: Owner, expiry: int) -> ClaimName:
    """pending -> claimed: take a due task under a lease."""
    new = ClaimName(name, "claimed", expiry, owner.pid, owner.host)
    fsutil.rename_noreplace(pending_path, claim_path(spool, new))
    return new


def start(spool: Spool, held: ClaimName) -> ClaimName:
    """claimed -> started: the point of no return before exec."""
    return _rename_claim(spool, held, held.with_(phase="started"))


def renew(spool: Spool, held: ClaimName, expiry: int) -> ClaimName:
    """Extend a lease; fails if the claim was taken over or cancelled."""
    return _rename_claim(spool, held, held.with_(expiry=expiry))


def take_over(spool: Spool, held: ClaimName, owner: Owner, expiry: int) -> ClaimName:
    """Make another owner's claim ours, keeping its phase; fails if it moved."""
    return _rename_claim(spool, held, held.with_(pid=owner.pid, host=owner.host, expiry=expiry))


def _rename_claim(spool: Spool, old: ClaimName, new: ClaimName) -> ClaimName:
    fsutil.rename_noreplace(claim_path(spool, old), claim_path(spool, new))
    return new


def release(spool: Spool, held: ClaimName) -> TaskName:
    """claimed (not started) -> pending, unchanged: nothing ran."""
    _move(claim_path(spool, held), spool.bucket_dir(held.task.bucket), str(held.task))
    return held.task


def retry(spool: Spool, held: ClaimName, run_at: int) -> TaskName:
    """started -> pending at a later run_at, as the next attempt."""
    name = dataclasses.replace(held.task, run_at=run_at, attempt=held.task.attempt + 1)
    _move(claim_path(spool, held), spool.bucket_dir(name.bucket), str(name))
    return name


def finish(spool: Spool, held: ClaimName, state: str, now: int) -> str:
    """A claim -> done/YYYYMMDD/, failed/ or cancelled/ (an end state)."""
    dirs = {
        "done": os.path.join(spool.done, day_of(now)),
        "failed": spool.failed,
        "cancelled": spool.cancelled,
    }
    if state not in dirs:
        raise ValueError(f"finish into {state!r}")
    dest_dir = dirs[state]
    return _move(claim_path(spool, held), dest_dir, str(held.task))


def cancel(spool: Spool, found: Located) -> str:
    """pending or claimed (not started) -> cancelled: it never runs."""
    return _move(found.path, spool.cancelled, str(found.name))


def request_cancel(spool: Spool, held: ClaimName) -> ClaimName:
    """started -> cancelling: whoever owns the claim stops the attempt, then finishes it."""
    return _rename_claim(spool, held, held.with_(phase="cancelling"))


def reschedule(spool: Spool, found: Located, run_at: int) -> TaskName:
    """pending -> pending at another run_at; loses to a claim with ENOENT."""
    name = dataclasses.replace(found.name, run_at=run_at)
    _move(found.path, spool.bucket_dir(name.bucket), str(name))
    return name


def requeue(spool: Spool, found: Located, run_at: int) -> TaskName:
    """failed -> pending, as the next attempt (an operator's retry)."""
    name = dataclasses.replace(found.name, run_at=run_at, attempt=found.name.attempt + 1)
    _move(found.path, spool.bucket_dir(name.bucket), str(name))
    return name
