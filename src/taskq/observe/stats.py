"""What `taskq stats` reports: counts, the overdue backlog, lateness, daemons.

Counts come from file names alone (state from the directory, queue from the
name's last field), so they cost a listing of the spool, not a read of every
task, and no name is parsed but those in due buckets and claimed/. A
directory unchanged since the last stats is not even listed (dircounts.py). The
lateness percentiles read the journals of the most recently finished tasks.
"""

from __future__ import annotations

import bisect
import collections
import os
from typing import Any

from taskq.observe import dircounts
from taskq.observe.dircounts import DirCounts, queue_of, task_names
from taskq.observe.livecounts import LiveCounts
from taskq.spool import fsutil, journal, pause, walk
from taskq.spool import rundir as status
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.states import PHASE_OF, STATES, State
from taskq.spool.task import TaskName, bucket_of
from taskq.times.timespec import SECOND, format_compact, format_iso, parse_compact

RECENT = 500  # finished tasks whose attempts feed the lateness percentiles


def collect(spool: Spool, now: int, local_host: str) -> dict[str, Any]:
    """Gather the whole report as one JSON-able object."""
    return {
        **counted(spool, now),
        "lateness": percentiles(recent_lateness(spool)),
        "daemons": daemons(spool, now, local_host),
        "paused": [p.to_doc() for p in pause.active(spool, now)],
    }


def counted(
    spool: Spool, now: int, live: LiveCounts | None = None, buckets: list[str] | None = None
) -> dict[str, Any]:
    """The counts per state and queue, and the overdue backlog, as the report has them.

    With live (a reader that counts again and again), its cache is used and
    kept, and the future buckets are re-checked as it chooses (its age).
    buckets: pending/'s, as walk.buckets() listed them just now, if at hand.
    """
    counts: dict[str, collections.Counter[str]] = {s: collections.Counter() for s in STATES}
    overdue: collections.Counter[str] = collections.Counter()
    oldest: dict[str, int] = {}
    cache = live.cache if live is not None else DirCounts(spool.root, spool.run)
    if buckets is None:
        buckets = walk.buckets(spool)
    future = _count_pending(spool, buckets, now, cache, counts[State.PENDING], overdue, oldest)
    texts: collections.Counter[str] = collections.Counter()  # most buckets share one text
    if live is not None:
        live.future(future, texts)
    else:
        texts.update(cache.count_text(State.PENDING, b) for b in future)
    dircounts.sum_texts(texts, counts[State.PENDING])
    for found in walk.tasks(spool, PHASE_OF):
        counts[found.state][found.name.queue] += 1
    for place in walk.places(spool, (State.DONE,)):
        counts[State.DONE].update(cache.count(State.DONE, os.path.basename(place.directory)))
    counts[State.FAILED].update(cache.count(State.FAILED, ""))
    counts[State.CANCELLED].update(cache.count(State.CANCELLED, ""))
    if live is None:
        cache.save()
    else:
        live.carry()
    return {
        "time": format_iso(now),
        "counts": {s: dict(sorted(c.items())) for s, c in counts.items()},
        "overdue": {
            q: {
                "count": n,
                "oldest_run_at": format_iso(oldest[q]),
                "oldest_age": (now - oldest[q]) / SECOND,
            }
            for q, n in sorted(overdue.items())
        },
        "overdue_total": sum(overdue.values()),
        "oldest_overdue_age": (now - min(oldest.values())) / SECOND if oldest else None,
    }


def daemons(spool: Spool, now: int, local_host: str) -> list[dict[str, Any]]:
    """Every daemon's health record, with whether it still runs ("alive")."""
    return status.daemons(spool.run, local_host, now)


def _count_pending(
    spool: Spool,
    buckets: list[str],
    now: int,
    cache: DirCounts,
    into: collections.Counter[str],
    overdue: collections.Counter[str],
    oldest: dict[str, int],
) -> list[str]:
    """Count due pending tasks by queue; the future buckets, for the caller to count.

    Names sort by run_at and a bucket holds one minute's, so every task in a
    bucket before now's minute is overdue and none after it is: those are
    counted from the cache when unchanged (a task filed in an earlier bucket
    than its run_at's counts as overdue there until the daemon quarantines
    it). Only now's bucket is compared with now name by name, and a past
    bucket that holds a queue no earlier one held is listed, for that
    queue's oldest overdue task.
    """
    current, now_compact = bucket_of(now), format_compact(now)
    due = bisect.bisect_right(buckets, current)
    for bucket in buckets[:due]:
        if bucket < current:
            counts = cache.count(State.PENDING, bucket)
            if oldest.keys() >= counts.keys():
                into.update(counts)
                overdue.update(counts)
                continue
        for entry in sorted(task_names(spool.bucket_dir(bucket))):
            queue = queue_of(entry)
            into[queue] += 1
            if entry[:23] <= now_compact:
                overdue[queue] += 1
                if queue not in oldest:
                    oldest[queue] = parse_compact(entry[:23])
    return buckets[due:]


def recent_lateness(spool: Spool, recent: int = RECENT) -> list[float]:
    """The recorded lateness (s) of the attempts of the most recently finished tasks, sorted."""
    return lateness_of(spool, recent_done(spool, recent))


def recent_done(spool: Spool, recent: int = RECENT) -> list[str]:
    """The ids of the (at most) recent tasks last to reach done/, latest first."""
    ids: list[str] = []
    for place in reversed(list(walk.places(spool, (State.DONE,)))):
        for entry in reversed(fsutil.listdir(place.directory)):
            try:
                ids.append(TaskName.parse(entry).id)
            except ValueError:
                continue
        if len(ids) >= recent:
            break
    return ids[:recent]


def lateness_of(spool: Spool, ids: list[str]) -> list[float]:
    """The recorded lateness (s) of every start in these tasks' journals, sorted."""
    return sorted(
        float(r["lateness"])
        for task_id in ids
        for r in journal.read(spool.log_dir(task_id))
        if r["event"] == Event.START and isinstance(r.get("lateness"), int | float)
    )


def percentiles(values: list[float]) -> dict[str, Any]:
    """p50, p90, p99 and max of sorted lateness values, in seconds; the report's form."""
    if not values:
        return {"attempts": 0}

    def pct(p: float) -> float:
        return values[min(len(values) - 1, round(p * (len(values) - 1)))]

    return {
        "attempts": len(values),
        "p50": pct(0.5),
        "p90": pct(0.9),
        "p99": pct(0.99),
        "max": values[-1],
    }
