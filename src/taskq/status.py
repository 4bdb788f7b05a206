"""Daemon health records: run/HOST_PID.status, written by each daemon.

A daemon rewrites its record (tmp file, then rename) whenever its health
changes and at every clock check, so `taskq status` can say which daemons
are dispatching, their clock uncertainty and how busy they are. A record is
advisory; the claims in claimed/ are the truth about ownership.
"""

from __future__ import annotations

import json
import os
from typing import Any

from taskq import fsutil

SUFFIX = ".status"


def write(run_dir: str, owner: str, record: dict[str, Any]) -> None:
    """Replace a daemon's record atomically; failures are the caller's to log."""
    path = os.path.join(run_dir, owner + SUFFIX)
    tmp = os.path.join(run_dir, f".{owner}.status.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
        f.write("\n")
    os.replace(tmp, path)


def remove(run_dir: str, owner: str) -> None:
    try:
        os.unlink(os.path.join(run_dir, owner + SUFFIX))
    except FileNotFoundError:
        pass


def read_all(run_dir: str) -> list[dict[str, Any]]:
    """Every daemon's last record, by owner name; unreadable ones are skipped."""
    records = []
    for entry in fsutil.listdir(run_dir):
        if not entry.endswith(SUFFIX) or entry.startswith("."):
            continue
        try:
            with open(os.path.join(run_dir, entry)) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
