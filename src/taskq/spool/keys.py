"""Idempotency keys: keys/<uid>-<hash>, each naming the task that holds the key.

A key file is created by link() (which refuses an existing name) and holds
one task name, then, for a key submitted with --key-for, a second line
`until ISO-INSTANT`: the end of its window, after which the key is free
for the next submission. It is its user's, or root's (a daemon binds a
member's key when it files the member's drop file). A binding is taken
over (an expired window, or --on-key replace) by `take_over`, under the
key's take-over marker (`taking`): the old file is renamed aside, checked
to be the one read, and the new one linked in its place. The marker,
keys/.<uid>-<hash>.taking created with O_EXCL, lets one take-over of a key
at a time read its holder, decide and swap: without it a second taker
that renamed the first's new binding aside would leave the name free for
an instant, a plain submitter could bind it then, and the first taker's
task would run beside the plain one's, named by no key. This module owns
where a user's key lives, reading one (refusing what is no small regular
file of that user), taking one over, and finding the key file that binds
a task; binding a new key is submit's (client/submit.py), removing squats
and abandoned ones is retention's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator

from taskq.errors import CorruptFile, TaskqError
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName
from taskq.times.timespec import format_iso, parse_iso_utc

KEY_LIMIT = 512  # a key file holds one task name
TAKING_STALE = 5.0  # seconds one take-over marker may stand before a waiter breaks it
TAKING_LIMIT = 30.0  # seconds a taker waits in all (markers renewed faster than they go stale)
_MARK = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def key_path(spool: Spool, key: str, uid: int | None = None) -> str:
    """The key file of a user's idempotency key: keys/<uid>-<hash>.

    Keys are scoped per submitting user (by default, this process's), so
    one member of a shared spool cannot answer another's key; a hash makes
    any key a safe name.
    """
    return spool.key_path(f"{os.geteuid() if uid is None else uid}-{_digest(key)}")


def legacy_key_path(spool: Spool, key: str) -> str:
    """Where keys were bound before they were scoped per user; honoured if the user owns it."""
    return spool.key_path(_digest(key))


def _digest(key: str) -> str:
    import hashlib  # only for keys: off submit's import budget (tests/e2e/test_submit.py)

    return hashlib.sha256(key.encode()).hexdigest()[:40]


def key_owner(entry: str) -> int | None:
    """The uid a key file's name gives it, or None for an unscoped (legacy) name."""
    uid, sep, _ = entry.partition("-")
    return int(uid) if sep and uid.isdigit() else None


class ForeignKey(CorruptFile):
    """A key file owned by someone other than the user whose key it is: a squat."""


def read_key(path: str, uid: int | None = None) -> TaskName:
    """The task a key file names.

    OSError if it cannot be read; CorruptFile if it is no small regular file
    (a FIFO would block an open() for good), or is not owned by `uid`;
    ValueError if it names no task.
    """
    return read_binding(path, uid)[0]


def read_binding(path: str, uid: int | None = None) -> tuple[TaskName, int | None, bytes]:
    """The task a key file names, the end of its window (None: for ever) and its bytes."""
    data, st = fsutil.read_small(path, KEY_LIMIT)
    if uid is not None and not rightful(st.st_uid, uid):
        raise ForeignKey(f"owned by uid {st.st_uid}, not by uid {uid} whose key it is")
    lines = data.decode(errors="replace").split("\n")
    until = None
    if len(lines) > 1 and lines[1].startswith("until "):
        try:
            until = parse_iso_utc(lines[1].removeprefix("until ").strip())
        except (TaskqError, ValueError):
            until = None
        if until is None:  # as binding() writes it, or no key file
            raise ValueError(f"bad window end {lines[1][:40]!r}")
    return TaskName.parse(lines[0].strip()), until, data


def binding(name: TaskName, until: int | None) -> bytes:
    """A key file's bytes: the task's name, and the end of its window if it has one."""
    return f"{name}\n".encode() + (
        b"" if until is None else f"until {format_iso(until)}\n".encode()
    )


def take_over(spool: Spool, path: str, seen: bytes, staging: str) -> bool:
    """Replace the key file that held `seen` with staging's; False if it changed meanwhile.

    The old file is renamed aside first, so only one of racing takers moves
    it; one that moved a newer binding puts it back and loses.
    """
    aside = os.path.join(spool.keys, f".{os.path.basename(staging).strip('.')}.old")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    try:
        mine = fsutil.read_small(aside, KEY_LIMIT)[0] == seen
    except (OSError, CorruptFile):
        mine = False
    try:
        os.link(aside if not mine else staging, path)
    except FileExistsError:
        mine = False  # bound by a plain submitter while the name was free: it holds it
    finally:
        os.unlink(aside)
    fsutil.fsync_dir(spool.keys)
    return mine


@contextlib.contextmanager
def taking(spool: Spool, path: str) -> Iterator[None]:
    """Hold the take-over marker of the key file at path while the block runs.

    Another taker's marker is waited for. One that stands unchanged for
    TAKING_STALE seconds of this process's own clock (a taker killed or
    stopped mid-way) is broken, so a dead taker holds a key back for
    seconds, never for good; the daemon also removes stale dot files of
    keys/ (retention.clean_tmp). The marker is not synced: a crash may
    leave it, to be broken the same way. A taker that has waited
    TAKING_LIMIT seconds in all (markers made anew faster than they go
    stale) gives up with EAGAIN, having changed nothing.
    """
    marker = os.path.join(spool.keys, f".{os.path.basename(path)}.taking")
    mine = _mark(marker, os.path.relpath(path, spool.root))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if os.lstat(marker).st_ino == mine:  # not broken and taken by another meanwhile
                os.unlink(marker)


def _mark(marker: str, what: str) -> int:
    """Create the marker, waiting out another's or breaking a stale one; its inode."""
    seen: tuple[int, int] | None = None
    began = since = time.monotonic()
    pause = 0.0005
    while time.monotonic() - began < TAKING_LIMIT:
        try:
            fd = os.open(marker, _MARK, 0o600)
        except FileExistsError:
            pass
        else:
            ino = os.fstat(fd).st_ino
            os.close(fd)
            return ino
        try:
            st = os.lstat(marker)
        except FileNotFoundError:
            continue
        if (st.st_ino, st.st_mtime_ns) != seen:
            seen, since = (st.st_ino, st.st_mtime_ns), time.monotonic()
        elif time.monotonic() - since >= TAKING_STALE:
            _break(marker)
            continue
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    raise OSError(errno.EAGAIN, f"{what} is being taken over by other submissions; try again")


def _break(marker: str) -> None:
    """Remove a stale marker: renamed aside first, so that of two breakers one removes it."""
    aside = f"{marker}.{os.getpid()}.broken"
    with contextlib.suppress(OSError):
        os.rename(marker, aside)
        if os.path.isdir(aside) and not os.path.islink(aside):
            os.rmdir(aside)  # (a directory planted there; one with files in it stays aside)
        else:
            os.unlink(aside)


def rightful(owner: int, uid: int) -> bool:
    """Whether a file owned by `owner` may bind uid's key: uid's own, or root's.

    A daemon run as root binds a member's keys itself when it files the
    member's drop files (a shared spool's keys/ is root's to write).
    """
    return owner == uid or owner == 0


def bound_key(spool: Spool, task_file: str, task_id: str) -> str | None:
    """The key file that binds the key of this task's body to this task, if any."""
    try:
        body, owner = spool.read_task(task_file)
    except Exception:
        return None
    if body.key is None:
        return None
    for path in (key_path(spool, body.key, owner), legacy_key_path(spool, body.key)):
        try:
            if read_key(path, owner).id == task_id:
                return path
        except (OSError, ValueError, CorruptFile):
            continue
    return None
