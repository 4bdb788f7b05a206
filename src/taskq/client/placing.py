"""Putting a batch's durable tmp/ bodies into their pending buckets, by descriptor.

Each placement is one rename of tmp/ID.task to pending/BUCKET/NAME,
unsynced (the caller syncs), as submit.py's one-task placement does, but
through one descriptor for tmp/ and one for each bucket in turn (the
tasks grouped by bucket), so no rename walks the spool's path again and
no bucket is looked at twice. pending/ is listed once, where that costs
less than looking for each bucket, so that a bucket the listing lacks is
made without a failed open first. A rename that fails (a daemon removed the
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
    placed: Callable[[int], None] | None,
    slowly: Callable[[Spool, str, TaskName], bool],
) -> list[bool]:
    """Place each (tmp/ entry, name); whether each was ours to place (not published by another).

    The tasks are renamed bucket by bucket, each bucket opened once; when
    one is placed, placed(its index in todo) is called, if given (the
    caller's crash point). A rename that fails goes to slowly(spool, tmp/ path,
    name), the one-task placement. Hints are the caller's, written before.
    """
    done = [False] * len(todo)
    groups = _by_bucket(todo)
    st = os.stat(spool.pending)  # the mode a new bucket takes after, and how many there are
    present = _buckets_present(spool, len(groups), st.st_nlink)
    pending = st.st_mode
    for bucket, members in groups.items():
        fd = _open_bucket(spool, bucket, pending, present is None or bucket in present)
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
                    fd = _open_bucket(spool, bucket, pending, True)
                if placed is not None:
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


# Listing pending/ costs a fraction of a failed open an entry (getdents and a name);
# it is worth it while pending/ holds at most this many buckets for each one needed.
LIST_PER_BUCKET = 16


def _buckets_present(spool: Spool, needed: int, links: int) -> set[str] | None:
    """pending/'s entries, or None where a look for each bucket costs less than the listing.

    links: pending/'s link count, two and one for each subdirectory where
    the filesystem counts them (ext4, tmpfs, XFS); where it does not (1,
    btrfs and many FUSE filesystems), nothing says how long the listing
    is, so each bucket is looked for.
    """
    if links < 2 or links - 2 > LIST_PER_BUCKET * needed:
        return None
    try:
        return set(os.listdir(spool.pending))
    except OSError:
        return None  # (the opens that follow say what is wrong)


# A daemon removes an empty past bucket (once a rescan), so a bucket made here may
# be gone again before it is opened: made and opened again, up to this many times.
OPEN_TRIES = 100


def _open_bucket(spool: Spool, bucket: str, pending: int, listed: bool) -> int:
    """A descriptor of the bucket, made first if missing; CorruptFile if it is a link or a file.

    pending: pending/'s st_mode, which a new bucket's follows (fsutil.ensure_dir).
    listed: whether the bucket may be there (False: pending/'s listing lacks
    it, so it is made before the first open).
    """
    path = spool.bucket_dir(bucket)
    try:
        if not listed:
            fsutil.ensure_dir(path, parent_mode=pending)
        for _ in range(OPEN_TRIES - 1):
            try:
                return fsutil.open_dir(path)
            except FileNotFoundError:  # missing, or removed again as empty before our open
                fsutil.ensure_dir(path, parent_mode=pending)
        return fsutil.open_dir(path)
    except CorruptFile as e:
        raise CorruptFile(f"{path} {e}") from None
