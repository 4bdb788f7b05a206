"""Limits that hold across daemons: a queue limit, a mutex and a rate, on local, GlusterFS, JuiceFS
and MooseFS.

Three daemons share one spool (on GlusterFS, each through its own FUSE
client, standing for one host). Each task appends its start and its end to
a stamps file with the real clock; the tests count, from those stamps
alone, how many attempts ran at once. One test kills a daemon with SIGKILL
while it holds permits for started attempts: its attempts go on as orphans,
its permits stay held until their leases expire (watched in permits/) and
are taken back then, the limit holds throughout and every task ends done.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, kill_all, wait_for
from substrates import DISTRIBUTED, GlusterBed, JuiceBed, MooseBed

from taskq.spool import journal, permits
from taskq.spool.layout import Spool

pytest_plugins = ["substrates"]
pytestmark = pytest.mark.slow  # real daemons for seconds each, on up to three beds


@dataclass
class Bed:
    hosts: list[Taskq]
    logs: Path


@pytest.fixture(params=["local", *DISTRIBUTED])
def bed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    if request.param == "local":
        roots = [tmp_path / "spool"] * 3
    else:
        shared: GlusterBed | JuiceBed | MooseBed = request.getfixturevalue(request.param)
        roots = [d / "spool" for d in shared.fresh_dir("limits")]
    yield Bed([Taskq(r) for r in roots], tmp_path)


@pytest.fixture
def daemons(bed: Bed) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start(i: int, *args: str) -> Daemon:
        host = f"host{i}-{len(started)}"
        d = Daemon(bed.hosts[i % 3], bed.logs / f"{host}.log", "--host-id", host, *args)
        started.append(d)
        return d

    yield start
    kill_all(started)


def owner_of(d: Daemon) -> str:
    """A daemon as its claims and leases name it, HOST_PID."""
    args = [str(a) for a in d.proc.args]  # type: ignore[union-attr]
    host = args[args.index("--host-id") + 1]
    return f"{host}_{d.proc.pid}"


def stamped(stamps: Path, seconds: float) -> list[str]:
    """A command that records 'ID start EPOCH', works for a while, then 'ID end EPOCH'."""
    line = 'echo "$TASKQ_ID $1 $(date +%s.%N)" >> ' + str(stamps)
    return ["sh", "-c", f"set -- start; {line}; sleep {seconds}; set -- end; {line}", "sh"]


def submit(tq: Taskq, argv: list[str], n: int, due: float, **fields: str) -> list[str]:
    lines = [json.dumps({"command": argv, "run_at": f"@{due:.6f}", **fields})] * n
    out = tq.run("submit", "--batch", "-", input="\n".join(lines).encode()).stdout
    return out.decode().split()


def intervals(stamps: Path) -> dict[str, tuple[float, float]]:
    """Each finished attempt's (start, end), by task id (a task that ran twice: its last)."""
    starts: dict[str, float] = {}
    spans: dict[str, tuple[float, float]] = {}
    if not stamps.exists():
        return spans
    for line in stamps.read_text().splitlines():
        task_id, what, when = line.split()
        if what == "start":
            starts[task_id] = float(when)
        elif task_id in starts:
            spans[task_id] = (starts[task_id], float(when))
    return spans


def intervals_or_starts(stamps: Path) -> set[str]:
    """The ids of the tasks that have started."""
    if not stamps.exists():
        return set()
    return {line.split()[0] for line in stamps.read_text().splitlines()}


def most_at_once(stamps: Path) -> int:
    """The most attempts whose start and end stamps overlap, over every stamp in the file."""
    events = []
    for line in stamps.read_text().splitlines():
        _, what, when = line.split()
        events.append((float(when), 1 if what == "start" else -1))
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
        running += step
        peak = max(peak, running)
    return peak


def start_time(tq: Taskq, task_id: str) -> float:
    """The start the task's journal records (as `taskq show --json` lists it, read here)."""
    from taskq.times.when import parse_when

    records = journal.read(Spool(str(tq.spool)).log_dir(task_id))
    [start] = [r for r in records if r["event"] == "start"]
    return parse_when(start["time"], 0) / 1e6


def config(tq: Taskq, text: str) -> None:
    tq.spool.mkdir(parents=True, exist_ok=True)
    (tq.spool / "config.toml").write_text(text)


def all_done(tq: Taskq, ids: list[str]) -> bool:
    """Whether `taskq ls --json` lists every task done; asked once done/ holds as many:
    a `taskq ls` a poll took CPU from the daemons under test."""
    done = tq.spool / "done"
    days = [d for d in done.iterdir() if d.is_dir()] if done.is_dir() else []
    if sum(len(os.listdir(d)) for d in days) < len(ids):
        return False
    rows = [json.loads(line) for line in tq.run("ls", "--json").stdout.splitlines()]
    states = {r["id"]: r["state"] for r in rows}
    return all(states.get(i) == "done" for i in ids)


def test_a_queue_limit_holds_across_three_daemons_and_a_kill_9(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    client = bed.hosts[2]
    spool = Spool(str(client.spool))
    config(client, "[queues.reports]\nlimit = 2\n")
    common = ("--workers", "4", "--lease", "4s")
    running = [daemons(i, *common) for i in range(3)]
    ids = submit(client, stamped(stamps, 1.0), 16, time.time() + 2, queue="reports")
    # Kill a daemon while it holds a permit for an attempt that has started.
    owners = {owner_of(d): d for d in running}

    def holder() -> tuple[Daemon, list[permits.Holding]] | None:
        started = intervals_or_starts(stamps)
        held = [h for h in permits.holdings(spool) if h.lease.daemon in owners]
        found = next((h for h in held if h.lease.task_id in started), None)
        if found is None:
            return None
        return owners[found.lease.daemon], [h for h in held if h.lease.daemon == found.lease.daemon]

    victim, held = wait_for(holder, 120, "a daemon holding a permit for a started attempt")
    victim.kill()
    running.remove(victim)
    # Its permits stay held until their leases expire, then are taken back (freed,
    # or handed over with the claim of an attempt still running).
    gone = owner_of(victim)
    expiry = max(h.lease.expiry for h in held)

    def released() -> bool:
        nonlocal expiry
        mine = [h for h in permits.holdings(spool) if h.lease.daemon == gone]
        expiry = max([expiry, *(h.lease.expiry for h in mine)])
        return not mine

    wait_for(released, 120, "the killed daemon's permits to be taken back")
    assert time.time() >= expiry / 1e6, "a permit was taken back before its lease expired"
    wait_for(lambda: all_done(client, ids), 300, "every report to be done")
    assert set(intervals(stamps)) == set(ids)  # nothing lost: each ran to its end
    assert most_at_once(stamps) == 2, stamps.read_text()  # the limit, never more
    assert permits.holdings(spool) == []
    for d in running:
        assert d.stop() == 0


def test_a_mutex_never_has_two_and_waiters_go_in_run_time_order(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    client = bed.hosts[2]
    running = [daemons(i, "--workers", "4", "--lease", "10s") for i in range(3)]
    # The first holds the mutex until the test opens its gate; once it runs, the others
    # come due, each a little after the one before, and wait.
    gate = tmp_path / "gate"
    line = 'echo "$TASKQ_ID $1 $(date +%s.%N)" >> ' + str(stamps)
    holds = f"set -- start; {line}; until [ -e {gate} ]; do sleep 0.05; done; set -- end; {line}"
    first = client.run("submit", "--mutex", "db", "--", "sh", "-c", holds, "sh")
    ids = [first.stdout.decode().strip()]
    wait_for(lambda: ids[0] in intervals_or_starts(stamps), 120, "the first to start")
    base = time.time() + 0.5
    other = submit(client, stamped(stamps, 0.3), 4, base)  # no mutex: not held back
    lines = [
        json.dumps({"command": stamped(stamps, 0.3), "run_at": f"@{base + i * 0.1:.6f}"})
        for i in range(6)
    ]
    argv = ["submit", "--mutex", "db", "--batch", "-"]
    ids += client.run(*argv, input="\n".join(lines).encode()).stdout.decode().split()
    # The order is promised to the waiters, the tasks that found the mutex busy (their
    # tickets); tasks due together at a free mutex go in the daemons' claim order.
    spool = Spool(str(client.spool))

    def waiting() -> bool:
        tickets = {t.task.id for t in permits.listing(spool).tickets}
        return tickets == set(ids[1:]) and set(other) <= intervals_or_starts(stamps)

    wait_for(waiting, 120, "every waiter's ticket, and the others to start")
    gate.touch()
    wait_for(lambda: all_done(client, ids + other), 300, "every task to be done")
    spans = intervals(stamps)
    held = sorted(spans[i] for i in ids)
    for (_, end), (start, _) in itertools.pairwise(held):
        assert start >= end, f"two attempts held mutex db at once: {held}"
    order = sorted(ids, key=lambda i: spans[i][0])
    assert order == ids, "the first, then the waiters in run time order"
    assert max(spans[i][0] for i in other) < spans[ids[0]][1], "the others run meanwhile"
    for d in running:
        assert d.stop() == 0


def test_a_rate_holds_across_daemons(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    client = bed.hosts[2]
    config(client, '[queues.api]\nrate = "3/2s"\n')
    running = [daemons(i, "--workers", "4") for i in range(3)]
    ids = submit(client, stamped(stamps, 0.0), 9, time.time() + 2, queue="api")
    wait_for(lambda: all_done(client, ids), 300, "every call to be done")
    # A rate counts starts as the daemons make them: the journals' start records.
    starts = sorted(start_time(client, i) for i in ids)
    for i, t in enumerate(starts):
        within = [u for u in starts[i:] if u < t + 2.0]
        assert len(within) <= 3, f"more than 3 starts in 2 s: {starts}"
    assert starts[-1] - starts[0] >= 4.0  # nine starts at three per two seconds
    for d in running:
        assert d.stop() == 0
