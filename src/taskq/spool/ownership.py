"""Whose task id it is: bound to a user at its first start, checked at every start.

In a shared spool a member can write a task file under any id he has seen
(ids show in pending/ and logs/). An id's log directory (its output, status
and journal) belongs to the user who first ran a task under it: the daemon
records that uid in logs/<id>/owner at the first start, and refuses a task
file with that id owned by anyone else. A log directory without that record
(the daemon's own tasks, whose first output file it owns, or a directory
from before the record) takes its owner from its first attempt's output
file.
"""

from __future__ import annotations

import os

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.layout import out_path, output_attempt, owner_path


def bind(log_dir: str, uid: int) -> int:
    """Bind an id (its log directory) to uid unless bound already; return its owner's uid."""
    path = owner_path(log_dir)
    if fsutil.ensure_dir(log_dir):
        if uid == os.geteuid():
            # The daemon's own task: its first attempt's output file, which the
            # daemon creates next and owns, says whose the id is.
            return uid
        owner = uid  # made just now: nothing ran under this id (the common first start)
    else:
        try:
            data, _ = fsutil.read_small(path, 64)
            return int(data)
        except FileNotFoundError:
            pass
        except (CorruptFile, ValueError):  # torn by a crash (it is written unsynced): bind anew
            os.unlink(path)
        first = _first_output_owner(log_dir)
        owner = uid if first is None else first
    try:
        fsutil.write_new(path, f"{owner}\n".encode(), mode=0o644, sync=False)
    except FileExistsError:  # another daemon bound it first
        return bind(log_dir, uid)
    return owner


def _first_output_owner(log_dir: str) -> int | None:
    """The owner of the earliest attempt's output, where the id ran before it was bound."""
    attempts = sorted(n for e in fsutil.listdir(log_dir) if (n := output_attempt(e)) is not None)
    for attempt in attempts:
        try:
            return os.lstat(out_path(log_dir, attempt)).st_uid
        except FileNotFoundError:
            continue
    return None
