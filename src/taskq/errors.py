"""The one exception family of taskq; each error carries its exit status.

The core raises these and never prints or exits. The CLI turns them into a
one-line message and an exit status in exactly one place. The statuses are a
public table, documented in taskq(1); the statuses that say how tasks ended
(wait) or what remains wrong (fsck) are decided here too.
"""

from __future__ import annotations

from collections.abc import Sequence

EX_OK = 0
EX_FAILURE = 1  # a generic failure, e.g. the spool is unusable
EX_USAGE = 2  # bad arguments or input (click uses 2 for usage errors too)
EX_NOTFOUND = 3  # no task with that id
EX_CONFLICT = 4  # the task is in a state that does not allow the request
EX_TEMPFAIL = 75  # retrying later can succeed (disk full, spool busy)
EX_NOPERM = 77  # permission denied on the spool
EX_CONFIG = 78  # the spool's config.toml is wrong
EX_WAIT_CANCELLED = 120  # taskq wait, one task: it was cancelled
EX_WAIT_EXPIRED = 121  # taskq wait, one task: it expired without running
EX_WAIT_TIMEOUT = 124  # taskq wait: the time ran out (as timeout(1) exits)
# wait's own statuses keep out of the numbers wrappers give meanings to:
# sysexits (64-78, which taskq uses), xargs(1) (123-127), timeout(1), env(1)
# and nice(1) (125 failed itself, 126 cannot run, 127 not found) and the
# shells' 128+N for a signal. A failed task's status passes through, as
# timeout(1) passes its command's: `taskq wait --json` tells them apart.


class TaskqError(Exception):
    """A failure that the CLI reports as one line and an exit status."""

    exit_status = EX_FAILURE


class BadInput(TaskqError):
    """The request itself is wrong: a bad time, duration, id or command."""

    exit_status = EX_USAGE


class NotFound(TaskqError):
    """No task with the given id exists in the spool."""

    exit_status = EX_NOTFOUND


class Conflict(TaskqError):
    """The task exists but its state does not allow the request."""

    exit_status = EX_CONFLICT


class TempFail(TaskqError):
    """A transient failure (disk full, read-only spool): retry later."""

    exit_status = EX_TEMPFAIL


class NoPermission(TaskqError):
    """The spool or one of its files may not be read or written by us."""

    exit_status = EX_NOPERM


class ConfigError(TaskqError):
    """The spool's configuration file cannot be read or is wrong."""

    exit_status = EX_CONFIG


class WaitTimeout(TaskqError):
    """taskq wait: the --timeout ran out before every task ended."""

    exit_status = EX_WAIT_TIMEOUT


class Unprinted(TaskqError):
    """A command that changes nothing could not write its output (closed, full, broken)."""

    errno: int | None = None  # the write's, e.g. EPIPE: the reader has gone


class CorruptFile(TaskqError):
    """A spool file that cannot be parsed; the caller quarantines it."""


def for_status(status: int, message: str) -> TaskqError:
    """The error that exits with this status: a daemon's answer, reported as its command would."""
    for kind in (BadInput, NotFound, Conflict, TempFail, NoPermission, ConfigError):
        if kind.exit_status == status:
            return kind(message)
    error = TaskqError(message)
    error.exit_status = status if 0 < status < 256 else EX_FAILURE
    return error


def wait_status(ends: Sequence[tuple[str, int | None]]) -> int:
    """taskq wait's status, from how each task ended: (state, its last exit status).

    All done: 0. One task that did not: its last exit status if it failed
    (1 if it has none), 120 if cancelled, 121 if expired, 3 if it left the
    spool without ending (quarantined, removed: as a wait begun after).
    Several: 1.
    """
    if len(ends) == 1:
        how, status = ends[0]
        codes = {
            "done": EX_OK,
            "cancelled": EX_WAIT_CANCELLED,
            "expired": EX_WAIT_EXPIRED,
            "gone": EX_NOTFOUND,
        }
        return codes.get(how, status or EX_FAILURE)
    return EX_OK if all(how == "done" for how, _ in ends) else EX_FAILURE


def fsck_status(problems: int, fixed: int) -> int:
    """taskq fsck's status: 0 when no problem remains, else 1."""
    return EX_OK if problems == fixed else EX_FAILURE
