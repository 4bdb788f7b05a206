"""Putting a batch's durable tmp/ bodies into their pending buckets, by descriptor.

Each placement is one rename of tmp/ID.task to pending/BUCKET/NAME,
unsynced (the caller syncs), as submit.py's one-task placement does, but
through one descriptor for tmp/ and one for each bucket in turn (the
tasks grouped by bucket), so no rename walks the spool's path again and
no bucket is looked at twice. A rename that fails (a daemon removed the
emptied bucket meanwhile, or someone else published the body) is handed
to the one-task placement, which owns those retries. Only a batch imports
this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, bucket_of


def place_all(
    spool: Spool,
    tmp_fd: int,
    todo: list[tuple[str, TaskName]],
    placed: Callable[[int], None],
    slowly: Callable[[Spool, str, TaskName], bool],
) -> list[bool]:
    """Place each (tmp/ entry, name); whether each was ours to place (not published by another).

    The tasks are renamed bucket by bucket, each bucket opened once; when
    one is placed, placed(its index in todo) is called (the caller's crash
    point and bookkeeping). A rename that fails goes to slowly(spool, tmp/ path,
    name), the one-task placement. Hints are the caller's, written before.
    """
    done = [False] * len(todo)
    pending = os.stat(spool.pending).st_mode  # the mode a new bucket takes after
    for bucket, members in _by_bucket(todo).items():
        fd = _open_bucket(spool, bucket, pending)
        try:
            for i in members:
                entry, name = todo[i]
                try:
                    os.rename(entry, str(name), src_dir_fd=tmp_fd, dst_dir_fd=fd)
                    done[i] = True
                except FileNotFoundError:  # the bucket removed meanwhile, or the body published
                    os.close(fd)
                    fd = -1
                    done[i] = slowly(spool, f"{spool.tmp}/{entry}", name)
                    fd = _open_bucket(spool, bucket, pending)
                placed(i)
        finally:
            if fd >= 0:
                os.close(fd)
    return done


def _by_bucket(todo: list[tuple[str, TaskName]]) -> dict[str, list[int]]:
    """The indices of todo's tasks by their bucket, each bucket's in todo's order."""
    groups: dict[str, list[int]] = {}
    for i, (_, name) in enumerate(todo):
        bucket = bucket_of(name.run_at)
        members = groups.get(bucket)
        if members is None:
            groups[bucket] = [i]
        else:
            members.append(i)
    return groups


# A daemon removes an empty past bucket (once a rescan), so a bucket made here may
# be gone again before it is opened: made and opened again, up to this many times.
OPEN_TRIES = 100


def _open_bucket(spool: Spool, bucket: str, pending: int) -> int:
    """A descriptor of the bucket, made first if missing; CorruptFile if it is a link or a file.

    pending: pending/'s st_mode, which a new bucket's follows (fsutil.ensure_dir).
    """
    path = spool.bucket_dir(bucket)
    try:
        for _ in range(OPEN_TRIES - 1):
            try:
                return fsutil.open_dir(path)
            except FileNotFoundError:  # missing, or removed again as empty before our open
                fsutil.ensure_dir(path, parent_mode=pending)
        return fsutil.open_dir(path)
    except CorruptFile as e:
        raise CorruptFile(f"{path} {e}") from None
