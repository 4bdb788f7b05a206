"""What `taskq top` draws: one picture of the spool, gathered as the other commands read it.

The counts per queue and the overdue backlog are `taskq stats`'s own
(stats.counted: names only, unchanged directories from the dircounts
cache), except that a view redrawn again and again passes its LiveCounts,
which re-checks the buckets after now's minute in turns and says how old
their counts are (counts_age): a million stored tasks then cost a listing
of pending/ and a slice of stat()s per redraw.
What else the view shows is bounded however large the spool is: the tasks
in claimed/ (as many as the daemons run), the next ROWS pending tasks
after now (the first buckets from now's minute on, in name order, which
is run_at order), the journals of the last RECENT finished tasks (as
stats reads them) and the last ROWS names of failed/ by run_at. Only the
shown tasks' bodies are opened, through listing.command_of, which never
trusts what it reads; a name that does not parse is skipped, a journal
record that says nothing usable is left out, a daemon's record is shown
field by field as text.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from taskq.errors import TaskqError
from taskq.observe import stats
from taskq.observe.livecounts import LiveCounts
from taskq.spool import fsutil, journal, pause, walk
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.listing import command_of
from taskq.spool.states import PHASE_OF, STATE_OF, Phase, State
from taskq.spool.task import ClaimName, TaskName, bucket_of
from taskq.times.timespec import SECOND, format_compact
from taskq.times.when import parse_when

ROWS = 10  # due tasks shown (running: all, up to MAX_RUNNING)
FAILURES = 5
MAX_RUNNING = 200
RECENT = 200  # done tasks whose starts make the lateness histogram
# Upper bounds (s) of the histogram's bars; the last bar is everything later.
LATENESS_BARS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0)


@dataclass(frozen=True)
class Task:
    """One task row: running, due next or failed."""

    id: str
    state: str
    queue: str
    run_at: int  # µs
    attempt: int
    command: list[str] | None  # None: the body could not be read as a task's
    host: str = ""  # running: the claiming daemon's host
    started: int | None = None  # running: when its attempt started (µs), if journalled
    exit_status: int | None = None  # failed: its last exit status


@dataclass(frozen=True)
class Queue:
    """One queue's line: how many wait, how many are overdue, since when, how many run."""

    name: str
    pending: int
    overdue: int
    oldest_overdue: float | None  # seconds past the oldest overdue task's run_at
    running: int


@dataclass(frozen=True)
class Picture:
    """Everything one frame of `taskq top` shows."""

    now: int
    queues: list[Queue]
    running: list[Task]
    running_total: int
    due: list[Task]
    overdue_total: int
    failures: list[Task]
    lateness: list[int]  # starts per bar of LATENESS_BARS (one more: the rest)
    lateness_tasks: int  # the done tasks whose starts those are (the last RECENT)
    daemons: list[dict[str, Any]]
    paused: list[dict[str, Any]] = field(default_factory=list)
    counts_age: float = 0.0  # s since the oldest check the pending counts rest on (livecounts)


def gather(
    spool: Spool,
    now: int,
    local_host: str,
    queues: frozenset[str],
    live: LiveCounts | None = None,
) -> Picture:
    """The picture as of now; queues (if any) keeps only those queues' tasks.

    With live (a view redrawn again and again), the counts of future buckets
    may rest on earlier checks: the picture's counts_age says how old.
    """
    buckets = walk.buckets(spool)
    report = stats.counted(spool, now, live, buckets)
    done = stats.recent_done(spool, RECENT)
    running = list(_running(spool, queues))
    return Picture(
        now=now,
        queues=_queues(report, queues),
        running=running[:MAX_RUNNING],
        running_total=len(running),
        due=list(_due(spool, buckets, now, queues, ROWS)),
        overdue_total=sum(
            v["count"] for q, v in report["overdue"].items() if not queues or q in queues
        ),
        failures=_failures(spool, queues, FAILURES),
        lateness=histogram(stats.lateness_of(spool, done)),
        lateness_tasks=len(done),
        daemons=stats.daemons(spool, now, local_host),
        paused=[p.to_doc() for p in _paused(spool, now)],
        counts_age=live.age if live is not None else 0.0,
    )


def _paused(spool: Spool, now: int) -> list[Any]:
    return pause.active(spool, now)


def _queues(report: dict[str, Any], only: frozenset[str]) -> list[Queue]:
    counts: dict[str, dict[str, int]] = report["counts"]
    names = sorted({q for per in counts.values() for q in per} | set(report["overdue"]))
    out = []
    for name in names:
        if only and name not in only:
            continue
        late = report["overdue"].get(name, {})
        running = sum(counts.get(s, {}).get(name, 0) for s in PHASE_OF)
        out.append(
            Queue(
                name=name,
                pending=counts.get(State.PENDING, {}).get(name, 0),
                overdue=late.get("count", 0),
                oldest_overdue=late.get("oldest_age"),
                running=running,
            )
        )
    return out


def _running(spool: Spool, queues: frozenset[str]) -> Iterator[Task]:
    """The tasks in claimed/, by run_at, with their commands and attempt start times."""
    claims = []
    for entry in fsutil.listdir(spool.claimed):
        try:
            claim = ClaimName.parse(entry)
        except ValueError:
            continue
        if not queues or claim.task.queue in queues:
            claims.append((entry, claim))
    claims.sort(key=lambda c: (c[1].task.run_at, c[1].task.id))
    for n, (entry, claim) in enumerate(claims):
        name = claim.task
        shown = n < MAX_RUNNING  # past what is shown, only counted: no reads
        yield Task(
            id=name.id,
            state=STATE_OF[claim.phase],
            queue=name.queue,
            run_at=name.run_at,
            attempt=name.attempt,
            command=_command(f"{spool.claimed}/{entry}") if shown else None,
            host=claim.host,
            started=_started(spool, name) if shown and claim.phase != Phase.CLAIMED else None,
        )


def _command(path: str) -> list[str] | None:
    return command_of(path, None)[0]


def _started(spool: Spool, name: TaskName) -> int | None:
    """When the task's current attempt started, by its journal (None if it does not say)."""
    for record in reversed(journal.read(spool.log_dir(name.id))):
        if record["event"] == Event.START and record.get("attempt") == name.attempt:
            try:
                return parse_when(str(record.get("time")), 0)
            except (ValueError, TaskqError):
                return None
    return None


def _due(
    spool: Spool, buckets: list[str], now: int, queues: frozenset[str], rows: int
) -> Iterator[Task]:
    """The next pending tasks due after now, in run_at order: the first buckets from now on."""
    now_compact, current = format_compact(now), bucket_of(now)
    left = rows
    for bucket in buckets[bisect.bisect_left(buckets, current) :]:
        directory = spool.bucket_dir(bucket)
        for entry in sorted(spool.readable_entries(directory)):
            if entry[:23] <= now_compact:
                continue  # overdue: counted in the backlog, not "due next"
            try:
                name = TaskName.parse(entry)
            except ValueError:
                continue
            if queues and name.queue not in queues:
                continue
            yield _pending(name, State.PENDING, f"{directory}/{entry}")
            left -= 1
            if left == 0:
                return


def _pending(name: TaskName, state: str, path: str, status: int | None = None) -> Task:
    return Task(
        id=name.id,
        state=state,
        queue=name.queue,
        run_at=name.run_at,
        attempt=name.attempt,
        command=_command(path),
        exit_status=status,
    )


def _failures(spool: Spool, queues: frozenset[str], rows: int) -> list[Task]:
    """The last failed tasks by run_at, latest first, with their last exit status."""
    names = []
    for entry in fsutil.listdir(spool.failed):
        try:
            name = TaskName.parse(entry)
        except ValueError:
            continue
        if not queues or name.queue in queues:
            names.append((entry, name))
    names.sort(key=lambda n: n[0], reverse=True)
    out = []
    for entry, name in names[:rows]:
        status = journal.exit_status(journal.read(spool.log_dir(name.id)))
        out.append(_pending(name, State.FAILED, os.path.join(spool.failed, entry), status))
    return out


def histogram(values: list[float]) -> list[int]:
    """How many lateness values fall in each bar of LATENESS_BARS, and past the last."""
    bars = [0] * (len(LATENESS_BARS) + 1)
    for v in values:
        if not math.isfinite(v):
            continue
        i = next((i for i, bound in enumerate(LATENESS_BARS) if v < bound), len(LATENESS_BARS))
        bars[i] += 1
    return bars


def running_for(task: Task, now: int) -> float | None:
    """How long the task's attempt has run, in seconds (None if not known)."""
    return None if task.started is None else max(0, now - task.started) / SECOND
