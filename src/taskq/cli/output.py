"""What a command writes on standard output, and what a failure to write means.

A command that only reads (ls, show, status, stats, logs, schedule ls...)
has failed when its output cannot be written: `write` raises Unprinted
(exit 1), never an error that reads as "the spool is full, try again"
(ENOSPC from a full standard output is not the spool's). A command that
changes the spool has done its work once the change is durable: `done`
prints what it did and, when standard output is closed, full or a broken
pipe, says so on standard error instead and returns, so the exit status
still says the change was made. A caller retrying on a non-zero status (75
above all) must never repeat a change that happened. `complain` writes to
standard error and never fails: an exit status must not depend on whether
a message could be shown.
"""

from __future__ import annotations

import os
import sys

from taskq.errors import Unprinted

# What a write to a stream that cannot take it raises: OSError (ENOSPC, EPIPE,
# EIO...), or ValueError for a stream already closed. UnicodeError is a
# ValueError too, but a bug (text not quoted), so it is not one of these.
_FAILED = (OSError, ValueError)


def hold_stdio() -> None:
    """Put /dev/null on whichever of descriptors 0, 1 and 2 the caller closed.

    Otherwise the first files taskq opens would get those numbers, and a
    child that inherits them (a hook, sendmail, the metrics counter) would
    write its output into a spool file. sys.stdin and sys.stdout stay None
    (Python set them so at start-up): reading or printing still knows that
    they were closed.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:  # a lower one was closed too, and is opened in its turn
                os.dup2(opened, fd)
                os.close(opened)


def write(text: str, end: str = "\n") -> None:
    """Write text and end to standard output, now; Unprinted if it cannot be written."""
    _put(text + end)


def write_bytes(data: bytes) -> None:
    """Write data to standard output as it is, now; Unprinted if it cannot be written."""
    stream = sys.stdout
    if stream is None:
        raise Unprinted("cannot write standard output: it is closed")
    try:
        stream.flush()
        stream.buffer.write(data)
        stream.buffer.flush()
    except _FAILED as e:
        if isinstance(e, UnicodeError):
            raise
        raise _unprinted(e) from None


def done(text: str, what: str | None = None) -> None:
    """Print what a change did (text), after it is durable; never fail for want of printing.

    When standard output cannot take it, standard error says `what` was done
    (text itself, by default) and why it was not printed.
    """
    try:
        _put(text + "\n")
    except Unprinted as e:
        complain(f"{what or text.replace(chr(10), '; ')}, but {e}")


def complain(message: str, prefix: str = "taskq: ", end: str = "\n") -> None:
    """Write prefix, message and end to standard error if it can be written; never raise."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"{prefix}{message}{end}")
        stream.flush()
    except _FAILED:
        _to_null(2)


def _put(text: str) -> None:
    stream = sys.stdout
    if stream is None:
        raise Unprinted("cannot write standard output: it is closed")
    try:
        stream.write(text)
        stream.flush()
    except _FAILED as e:
        if isinstance(e, UnicodeError):
            raise
        raise _unprinted(e) from None


def _unprinted(e: OSError | ValueError) -> Unprinted:
    """The error for output that failed; what was left in the buffer goes to /dev/null.

    Python flushes standard output once more at exit, and exits 120 if that
    fails: the buffer must not stay bound to the descriptor that failed.
    """
    _to_null(1)
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    err = Unprinted(f"cannot write standard output: {reason}")
    err.errno = e.errno if isinstance(e, OSError) else None
    return err


def _to_null(fd: int) -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    os.dup2(null, fd)
    os.close(null)
