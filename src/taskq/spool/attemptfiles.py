"""An attempt's files in logs/<id>/: its output N.out and its supervisor's N.status.

The supervisor (daemon/runner.py) holds N.status flock()ed while the
command runs, writes `S` when it begins and the exit status when the
command ends; the lock and the status outlive the daemon. Recovery, the
attempts part and `taskq logs -f` read them here.
"""

from __future__ import annotations

from taskq.spool import locks
from taskq.spool.layout import status_path


def supervisor_alive(log_dir: str, attempt: int) -> bool:
    """Tell whether an attempt's supervisor still runs (holds the status lock)."""
    return locks.held(status_path(log_dir, attempt))


def read_status(log_dir: str, attempt: int) -> int | None:
    """The exit status the supervisor recorded, or None if it recorded none."""
    return read_supervisor(log_dir, attempt)[1]


def read_supervisor(log_dir: str, attempt: int) -> tuple[bool, int | None]:
    """(whether the supervisor began, the exit status it recorded if any)."""
    try:
        with open(status_path(log_dir, attempt), "rb") as f:
            lines = f.read(64).split()
    except FileNotFoundError:
        return False, None
    began = b"S" in lines
    code = int(lines[-1]) if lines and lines[-1].isdigit() else None
    return began or code is not None, code
