"""Backpressure: submit refuses new work while the spool is over a limit.

A spool over a limit refuses new work with EX_TEMPFAIL (75) and a message
naming the limit and its value, instead of accepting work it cannot hold.
The limits are the [limits] table of the spool's config.toml (config.py):
max_overdue (pending tasks already due), min_free_bytes and min_free_inodes
(on the spool's filesystem).
"""

from __future__ import annotations

import os

from taskq.errors import TempFail
from taskq.spool import fsutil
from taskq.spool.config import Limits
from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, bucket_of, valid_bucket


def check(spool: Spool, limits: Limits, now: int, adding: int = 1) -> None:
    """Raise TempFail if accepting `adding` tasks would break a limit."""
    if limits.min_free_bytes or limits.min_free_inodes:
        st = os.statvfs(spool.root)
        free = st.f_bavail * st.f_frsize
        if free < limits.min_free_bytes:
            raise TempFail(
                f"spool is full: {free} bytes free, below limits.min_free_bytes = "
                f"{limits.min_free_bytes}; try again later"
            )
        if st.f_favail < limits.min_free_inodes + adding:
            raise TempFail(
                f"spool is full: {st.f_favail} inodes free for {adding} task(s), "
                f"limits.min_free_inodes = {limits.min_free_inodes}; try again later"
            )
    if limits.max_overdue:
        overdue = count_overdue(spool, now, stop_after=limits.max_overdue)
        if overdue + adding > limits.max_overdue:
            count = f"more than {limits.max_overdue}" if overdue > limits.max_overdue else overdue
            raise TempFail(
                f"spool is over its backlog limit: {count} tasks overdue, "
                f"limits.max_overdue = {limits.max_overdue}; try again later"
            )


def count_overdue(spool: Spool, now: int, stop_after: int | None = None) -> int:
    """Count pending tasks already due, reading only buckets up to now."""
    current = bucket_of(now)
    count = 0
    for bucket in fsutil.listdir(spool.pending):
        if bucket > current:
            break
        if not valid_bucket(bucket):
            continue
        for entry in fsutil.listdir(spool.bucket_dir(bucket)):
            try:
                due = TaskName.parse(entry).run_at <= now
            except ValueError:
                continue
            count += due
        if stop_after is not None and count > stop_after:
            break
    return count
