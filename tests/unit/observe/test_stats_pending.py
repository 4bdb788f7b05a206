"""stats.counted on pending/: what is overdue, by whose listing, and what comes from the cache.

Every task in a bucket before now's minute is overdue and none after it
is, so only now's bucket is compared name by name; a past bucket is listed
only when it holds a queue no earlier bucket held (for that queue's oldest
overdue task), otherwise its count is the dircounts cache's.
"""

from __future__ import annotations

import os
from pathlib import Path

from taskq.observe import stats
from taskq.spool.layout import COUNTS_CACHE, Spool
from taskq.spool.task import TaskName, bucket_of
from taskq.times.timespec import SECOND, format_iso

MINUTE = 60 * SECOND
NOW = 1_800_000_000 * SECOND + 30 * SECOND  # half a minute into its bucket


def _put(spool: Spool, run_at: int, n: int, queue: str) -> str:
    bucket = bucket_of(run_at)
    os.makedirs(spool.bucket_dir(bucket), exist_ok=True)
    name = TaskName(run_at, f"01M8RM0TDQZDF7PK8251KRPM{n:02d}", 1, queue)
    Path(spool.bucket_dir(bucket), str(name)).write_text("{}")
    return bucket


def _spool(tmp_path: Path) -> tuple[Spool, list[str]]:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    buckets = [
        _put(spool, NOW - 3 * MINUTE, 1, "a"),
        _put(spool, NOW - 2 * MINUTE, 2, "a"),
        _put(spool, NOW - 2 * MINUTE + SECOND, 3, "b"),
        _put(spool, NOW - MINUTE, 4, "a"),
        _put(spool, NOW - 10 * SECOND, 5, "a"),  # now's bucket, overdue
        _put(spool, NOW + 10 * SECOND, 6, "a"),  # now's bucket, not yet
        _put(spool, NOW + 5 * MINUTE, 7, "c"),
    ]
    return spool, sorted(set(buckets))


def test_overdue_by_bucket_and_name(tmp_path: Path) -> None:
    spool, _ = _spool(tmp_path)
    report = stats.counted(spool, NOW)
    assert report["counts"]["pending"] == {"a": 5, "b": 1, "c": 1}
    assert report["overdue"] == {
        "a": {"count": 4, "oldest_run_at": format_iso(NOW - 3 * MINUTE), "oldest_age": 180.0},
        "b": {"count": 1, "oldest_run_at": format_iso(NOW - 119 * SECOND), "oldest_age": 119.0},
    }
    assert report["overdue_total"] == 5


def test_a_past_bucket_of_known_queues_is_counted_from_the_cache(tmp_path: Path) -> None:
    spool, buckets = _spool(tmp_path)
    lines = []
    for bucket, claimed in zip(buckets, ("a:1", "a:9,b:9", "a:5", "a:9", "c:9"), strict=True):
        st = os.stat(spool.bucket_dir(bucket))
        stamp = f"{st.st_ino}\t{st.st_mtime_ns}\t{st.st_ctime_ns}\t{st.st_size}"
        lines.append(f"pending/{bucket}\t{stamp}\t{claimed}\n")
    Path(spool.run, COUNTS_CACHE).write_text("".join(lines))
    report = stats.counted(spool, NOW)
    # Listed: the second bucket (b's first), now's bucket; the rest as the cache says.
    assert report["counts"]["pending"] == {"a": 9, "b": 1, "c": 9}
    assert report["overdue"]["a"]["count"] == 8
    assert report["overdue"]["a"]["oldest_age"] == 180.0
    assert report["overdue"]["b"] == {
        "count": 1,
        "oldest_run_at": format_iso(NOW - 119 * SECOND),
        "oldest_age": 119.0,
    }
