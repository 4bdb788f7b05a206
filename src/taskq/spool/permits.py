"""Permits in SPOOL/permits/: cluster-wide limits made of the spool's own renames.

A limit of N on something (a queue's running attempts, a mutex, a queue's
starts per period) is N permits, KIND_NAME_I for I in 0..N-1, KIND one of
`queue`, `mutex`, `rate`. A permit is free while no entry of that name
exists, and held while a directory of that name holds exactly one lease
file, TASKID_EXPIRY_PID_HOST: the attempt it is held for, until when, and
by which daemon.

* Take: make tmp/permit-RANDOM/ with the lease file in it, then rename(2)
  the directory to permits/KIND_NAME_I. rename onto a directory that is not
  empty fails (ENOTEMPTY or EEXIST) on every POSIX filesystem, NFS and
  FUSE included, and needs no RENAME_NOREPLACE: exactly one taker wins a
  free permit. (An empty directory of that name, which only a crash between
  the two steps of a release leaves, is replaced.)
* Renew: rename the lease file to the same name with a later expiry.
* Give back, and reclaim an expired lease: rename the exact lease file out
  to tmp/ (the compare-and-swap: one actor wins, a renamed or renewed
  lease is ENOENT), then rmdir the emptied permit directory.
* Hand over (a daemon adopting an orphaned attempt): rename the lease file
  to the new holder's name, in place.

A rate permit's lease runs for the period from the start it allowed and is
never renewed nor given back: it is free again once expired and reclaimed.

Waiting for a mutex: a ticket, permits/wait_MUTEX_TASKNAME (an empty file,
made with O_EXCL), says that task waits for that mutex; a daemon takes the
mutex only for the oldest waiting task (by run time, then id).

Nothing here judges time; callers decide expiry with their clock's
uncertainty. Every reader refuses a name it did not write (ValueError), so
that the daemon quarantines it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from typing import NamedTuple

from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, check_queue, check_token, valid_id
from taskq.times.timespec import format_compact, format_iso, parse_compact

KINDS = ("queue", "mutex", "rate")
MAX_PERMITS = 10_000  # the most permits one limit may have (I has at most four digits)
_PERMIT = re.compile(r"(queue|mutex|rate)_([A-Za-z0-9][A-Za-z0-9.-]{0,63})_(0|[1-9]\d{0,3})")
_LEASE = re.compile(
    r"([0-9A-HJKMNP-TV-Z]{26})_(\d{8}T\d{6}\.\d{6}Z)_([1-9]\d{0,9})_([A-Za-z0-9][A-Za-z0-9._-]{0,63})"
)
_WAIT = re.compile(r"wait_([A-Za-z0-9][A-Za-z0-9.-]{0,63})_(.+)")


class Permit(NamedTuple):
    kind: str
    name: str  # a queue's or a mutex's name
    number: int

    def __str__(self) -> str:
        return f"{self.kind}_{self.name}_{self.number}"

    @classmethod
    def parse(cls, entry: str) -> Permit:
        m = _PERMIT.fullmatch(entry)
        if m is None:
            raise ValueError(f"not a permit name: {entry!r}")
        return cls(m.group(1), m.group(2), int(m.group(3)))


class Lease(NamedTuple):
    """Who holds a permit: for which task, until when (µs), which daemon."""

    task_id: str
    expiry: int
    pid: int
    host: str

    def __str__(self) -> str:
        return f"{self.task_id}_{format_compact(self.expiry)}_{self.pid}_{self.host}"

    @property
    def daemon(self) -> str:
        return f"{self.host}_{self.pid}"

    @classmethod
    def parse(cls, entry: str) -> Lease:
        m = _LEASE.fullmatch(entry)
        if m is None or not valid_id(m.group(1)):
            raise ValueError(f"not a permit lease name: {entry!r}")
        return cls(m.group(1), parse_compact(m.group(2)), int(m.group(3)), m.group(4))


class Ticket(NamedTuple):
    """A task waiting for a mutex."""

    mutex: str
    task: TaskName

    def __str__(self) -> str:
        return f"wait_{self.mutex}_{self.task}"

    @classmethod
    def parse(cls, entry: str) -> Ticket:
        m = _WAIT.fullmatch(entry)
        if m is None:
            raise ValueError(f"not a mutex ticket name: {entry!r}")
        return cls(check_mutex_name(m.group(1)), TaskName.parse(m.group(2)))


def check_mutex_name(text: str) -> str:
    try:
        return check_queue(text, "mutex")
    except Exception as e:  # BadInput: a name of another form is no ticket of ours
        raise ValueError(str(e)) from None


class Listing(NamedTuple):
    """What permits/ holds, by its names alone: the permits in use, the tickets, and bad names."""

    held: frozenset[Permit]
    tickets: tuple[Ticket, ...]  # oldest task first
    bad: tuple[str, ...]

    def in_use(self, kind: str, name: str) -> int:
        return sum(1 for s in self.held if s.kind == kind and s.name == name)

    def oldest_waiting(self, mutex: str) -> TaskName | None:
        return next((t.task for t in self.tickets if t.mutex == mutex), None)


def listing(spool: Spool) -> Listing:
    """One listing of permits/ (a missing directory is an empty one)."""
    held, tickets, bad = set(), [], []
    for entry in fsutil.listdir(spool.permits):
        if entry.startswith("."):
            continue
        try:
            if entry.startswith("wait_"):
                tickets.append(Ticket.parse(entry))
            else:
                held.add(Permit.parse(entry))
        except ValueError:
            bad.append(entry)
    tickets.sort(key=lambda t: (t.task.run_at, t.task.id))
    return Listing(frozenset(held), tuple(tickets), tuple(bad))


def lease_of(spool: Spool, permit: Permit) -> Lease | None:
    """The lease in a held permit; None if it is free or being given back; ValueError if bad."""
    found = fsutil.listdir(spool.permit_path(str(permit)))
    if not found:
        return None
    if len(found) != 1:
        raise ValueError(f"permit {permit} holds {len(found)} files, not one lease")
    return Lease.parse(found[0])


def take(spool: Spool, permit: Permit, lease: Lease) -> bool:
    """Take a free permit with this lease; False if it is held."""
    fsutil.ensure_dir(spool.permits, 0o700)
    tmp = os.path.join(spool.tmp, f"permit-{secrets.token_hex(8)}")
    os.mkdir(tmp, 0o700)
    fd = os.open(os.path.join(tmp, str(lease)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    try:
        os.rename(tmp, spool.permit_path(str(permit)))
        return True
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY):  # else: held
            raise
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(tmp, str(lease)))
            os.rmdir(tmp)


def renew(spool: Spool, permit: Permit, old: Lease, new: Lease) -> None:
    """Extend or hand over a lease in place; FileNotFoundError if it is no longer that one."""
    where = spool.permit_path(str(permit))
    fsutil.rename_cas(os.path.join(where, str(old)), os.path.join(where, str(new)), unique=True)


def give_back(spool: Spool, permit: Permit, lease: Lease) -> bool:
    """Free a permit held with exactly this lease (ours, or an expired one); False if it was not."""
    where = spool.permit_path(str(permit))
    gone = os.path.join(spool.tmp, f"permit-{secrets.token_hex(8)}-{lease}")
    try:
        os.rename(os.path.join(where, str(lease)), gone)
    except FileNotFoundError:
        return False
    with contextlib.suppress(OSError):  # ENOTEMPTY: taken again already
        os.rmdir(where)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(gone)
    return True


def drop_empty(spool: Spool, permit: Permit) -> None:
    """Remove a permit directory a crash left empty (safe: rmdir fails on a held one)."""
    with contextlib.suppress(OSError):
        os.rmdir(spool.permit_path(str(permit)))


def wait(spool: Spool, ticket: Ticket) -> None:
    """Say that a task waits for a mutex (idempotent)."""
    fsutil.ensure_dir(spool.permits, 0o700)
    with contextlib.suppress(FileExistsError):
        path = spool.permit_path(str(ticket))
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def unwait(spool: Spool, ticket: Ticket) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(spool.permit_path(str(ticket)))


class Holding(NamedTuple):
    """A held permit as an operator sees it: what, for which task, by whom, since when."""

    permit: Permit
    lease: Lease
    since: int  # µs: when it was taken (its lease file's mtime, by the filesystem's clock)

    def to_doc(self) -> dict[str, object]:
        return {
            "permit": str(self.permit),
            "kind": self.permit.kind,
            "name": self.permit.name,
            "number": self.permit.number,
            "task": self.lease.task_id,
            "owner": self.lease.daemon,
            "since": format_iso(self.since),
            "lease_expiry": format_iso(self.lease.expiry),
        }


def holdings(spool: Spool) -> list[Holding]:
    """Every permit held now, in name order; what is bad or goes away meanwhile is left out.

    Renewing or handing a lease over renames its file, which keeps its
    mtime: since is when the permit was first taken for that attempt.
    """
    found = (_holding(spool, permit) for permit in sorted(listing(spool).held))
    return [h for h in found if h is not None]


def _holding(spool: Spool, permit: Permit) -> Holding | None:
    for _ in range(3):  # a lease renewed between the listing and the lstat: look again
        try:
            lease = lease_of(spool, permit)
            if lease is None:
                return None
            st = os.lstat(f"{spool.permit_path(str(permit))}/{lease}")
        except ValueError:  # not ours to judge here: the daemon quarantines it
            return None
        except FileNotFoundError:
            continue
        return Holding(permit, lease, st.st_mtime_ns // 1000)
    return None


def lease_for(task_id: str, expiry: int, pid: int, host: str) -> Lease:
    return Lease(task_id, expiry, pid, check_token("host id", host))
