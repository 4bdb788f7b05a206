"""The run/ directory: each daemon's lock, clock probe and health record.

run/HOST_PID.lock is flock()ed by its daemon for as long as it lives, so on
the same host a free lock means a dead daemon. run/HOST_PID.status is the
daemon's health record, rewritten (tmp file, then rename) at every clock
check, so `taskq status` can say which daemons are dispatching, their clock
uncertainty and how busy they are. Records are advisory; the claims in
claimed/ are the truth about ownership.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from taskq.errors import BadInput, CorruptFile, TaskqError
from taskq.spool import fields, fsutil, locks
from taskq.spool.layout import DAEMON_FILES, LOCK, RECORD, daemon_file
from taskq.spool.notice import notice
from taskq.text.quote import quote
from taskq.times.timespec import SECOND
from taskq.times.when import parse_when


def daemon_alive(run_dir: str, daemon: str) -> bool:
    """Tell whether a daemon of this host holds its lock (is alive)."""
    return locks.held(daemon_file(run_dir, daemon, LOCK))


def record_alive(run_dir: str, record: dict[str, Any], local_host: str, now: int) -> bool:
    """Judge whether a health record's daemon still runs.

    Its lock says so wherever flock() works; a record from another host,
    whose lock we may not be able to judge, counts while it is fresh (three
    clock checks old at most, by our clock: clocks may disagree).
    """
    if daemon_alive(run_dir, str(record.get("owner"))):
        return True
    if record.get("host") == local_host:
        return False
    try:
        age = now - parse_when(str(record["updated_at"]), now)
        return bool(age <= 3 * float(record["clock_check"]) * SECOND)
    except (KeyError, ValueError, TypeError, TaskqError):
        return False


def daemons(run_dir: str, local_host: str, now: int) -> list[dict[str, Any]]:
    """Every daemon's last record, each with whether it still runs ("alive")."""
    records = read_all(run_dir)
    for record in records:
        record["alive"] = record_alive(run_dir, record, local_host, now)
    return records


def forget(run_dir: str, daemon: str) -> None:
    """Remove a dead daemon's files from run/."""
    for kind in DAEMON_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(daemon_file(run_dir, daemon, kind))


def write(run_dir: str, daemon: str, record: dict[str, Any]) -> None:
    """Replace a daemon's record atomically; failures are the caller's to log."""
    data = (json.dumps(record) + "\n").encode()
    staging = os.path.join(run_dir, f".{daemon}.status.tmp")
    fsutil.replace_file(daemon_file(run_dir, daemon, RECORD), data, sync=False, staging=staging)


def remove(run_dir: str, daemon: str) -> None:
    """Remove a daemon's record, if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(daemon_file(run_dir, daemon, RECORD))


def read_all(run_dir: str) -> list[dict[str, Any]]:
    """Every daemon's last record, by owner name; what is not one is skipped, with a warning.

    Each record is read as any spool file is (no link, no FIFO, bounded)
    and checked (read_record): `taskq status`, `stats` and the metrics
    show what it holds.
    """
    records = []
    for entry in fsutil.listdir(run_dir):
        if not entry.endswith(RECORD) or entry.startswith("."):
            continue
        path = os.path.join(run_dir, entry)
        try:
            records.append(read_record(path))
        except FileNotFoundError:
            continue  # its daemon stopped meanwhile
        except (OSError, CorruptFile) as e:
            notice(f"skipped {quote(path)}: {e}", once_for=path)
    return records


def read_record(path: str) -> dict[str, Any]:
    """One daemon's health record; CorruptFile says why it is not one."""
    data, _ = fsutil.read_small(path, MAX_RECORD)
    try:
        record = fields.document(data)
    except BadInput as e:
        raise CorruptFile(f"not a status record: {e}") from None
    owner = os.path.basename(path)[: -len(RECORD)]
    if record.get("owner") != owner or not fields.conforms(record, _RECORD):
        raise CorruptFile(f"not a status record of {owner}")
    return record


MAX_RECORD = 64 << 10
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_RECORD: dict[str, fields.Check] = {
    "owner": fields.is_text,
    "host": fields.is_text,
    "pid": fields.is_whole(1, (1 << 31) - 1),
    "started_at": fields.is_time,
    "updated_at": fields.is_time,
    "dispatching": fields.is_flag,
    "reason": lambda v: v is None or type(v) is str,
    "stopping": fields.is_flag,
    "uncertainty": fields.is_number,
    "offset": fields.is_number,
    "busy": fields.is_whole(0, 1 << 31),
    "workers": fields.is_whole(0, 1 << 31),
    "max_uncertainty": fields.is_number,
    "lease": fields.is_number,
    "clock_check": fields.is_number,
    "cgroups": fields.or_none(fields.is_text),  # "v2", "v1", or null: none (daemon/confinement)
    "cgroup_controllers": fields.is_text,
    "cgroups_problem": fields.or_none(fields.is_text),
}
