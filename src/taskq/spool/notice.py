"""How the spool's readers say that they skipped what they could not read.

A reader that meets a bad file where it can go on without it (a journal
that is a FIFO, a daemon's record that is not one, a bucket it may not
list) says so here, once per file, and goes on. A command's notices are
warnings on standard error; the daemon sends its own to its log (`sink`).
Imported only by what warns: a command's start-up never pays for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def _stderr(message: str) -> None:
    try:
        print(f"taskq: warning: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass  # no standard error to warn on: the command goes on all the same


_sink: Callable[[str], None] = _stderr
_told: set[str] = set()


def sink(tell: Callable[[str], None]) -> None:
    """Send this process's notices to tell (the daemon: its log) instead of standard error."""
    global _sink
    _sink = tell


def notice(message: str, once_for: str | None = None) -> None:
    """Say message, once for each `once_for` when it is given."""
    if once_for is not None:
        if once_for in _told:
            return
        _told.add(once_for)
    _sink(message)
