"""The promises on every substrate taskq supports: local, FUSE, GlusterFS, JuiceFS, MooseFS.

Each test runs on five substrates. "local" is tmp_path. "bindfs" is a FUSE
mount that refuses renameat2(RENAME_NOREPLACE) with EINVAL, exactly as the
Linux NFS client does, so every transition takes the plain-rename path.
"gluster" is a real GlusterFS volume mounted by three FUSE clients, each
standing for one host: daemons run on two of them, and submissions and
operator commands come through the third. "juicefs" is the same with a
JuiceFS volume (metadata in SQLite, data in a local directory), which
supports RENAME_NOREPLACE and caches attributes and entries for 1 s; and
"moosefs", whose master stamps whole seconds. Tasks stamp their real start
time; the tests assert every task ends, none starts early, none runs twice
except where the journal records a lost lease, and nothing is quarantined.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import TASKQ, Daemon, Taskq, journal_of, kill_all, read_stamps, wait_for
from substrates import DISTRIBUTED, GlusterBed, JuiceBed, MooseBed

pytest_plugins = ["substrates"]
SUBSTRATES = ["local", "bindfs", *DISTRIBUTED]


@dataclass
class Bed:
    """One spool as three hosts see it: daemons on hosts[0..1], clients on hosts[2]."""

    kind: str
    hosts: list[Taskq]
    logs: Path

    @property
    def client(self) -> Taskq:
        return self.hosts[2]


@pytest.fixture(params=SUBSTRATES)
def bed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    kind = request.param
    if kind == "local":
        roots = [tmp_path / "spool"] * 3
    elif kind == "bindfs":
        mount: Path = request.getfixturevalue("bindfs_dir")
        roots = [mount / "spool"] * 3
    else:
        shared: GlusterBed | JuiceBed | MooseBed = request.getfixturevalue(kind)
        roots = [d / "spool" for d in shared.fresh_dir("taskq")]
    yield Bed(kind, [Taskq(r) for r in roots], tmp_path)


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


def stamping(stamps: Path, tail: str = "") -> list[str]:
    return ["sh", "-c", f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}{tail}']


def submit_batch(tq: Taskq, argv: list[str], run_ats: list[float]) -> list[str]:
    """Submit one task per run_at (epoch seconds) in one batch; return the ids in order."""
    lines = [json.dumps({"command": argv, "run_at": f"@{t:.6f}"}) for t in run_ats]
    out = tq.run("submit", "--batch", "-", input="\n".join(lines).encode()).stdout
    return out.decode().split()


def ended(tq: Taskq, ids: list[str]) -> dict[str, str]:
    """The state of each task, as `taskq ls --json` lists them."""
    rows = [json.loads(line) for line in tq.run("ls", "--json").stdout.splitlines()]
    states = {r["id"]: r["state"] for r in rows}
    return {i: states.get(i, "missing") for i in ids}


def all_in(tq: Taskq, ids: list[str], states: set[str]) -> bool:
    """Whether every task is in one of `states`, as `taskq ls --json` lists them.

    Asked only once done/ and cancelled/ hold as many entries as there are
    tasks: a `taskq ls` a poll, on two loaded cores, took CPU from the
    daemons under test.
    """
    done, cancelled = tq.spool / "done", tq.spool / "cancelled"
    days = [d for d in done.iterdir() if d.is_dir()] if done.is_dir() else []
    here = sum(len(os.listdir(d)) for d in days) + (
        len(os.listdir(cancelled)) if cancelled.is_dir() else 0
    )
    return here >= len(ids) and set(ended(tq, ids).values()) <= states


def assert_clean(bed: Bed, logs: list[Daemon]) -> None:
    corrupt = bed.client.spool / "corrupt"
    found = sorted(p.name for p in corrupt.iterdir()) if corrupt.exists() else []
    assert found == [], "\n".join(d.text() for d in logs)


def never_early(stamps: Path, run_at: dict[str, float]) -> None:
    early = [(t, run_at[t] - s) for t, _, s in read_stamps(stamps) if s < run_at[t]]
    assert early == [], f"started before run_at: {early[:5]}"


@pytest.mark.slow
def test_three_daemons_share_a_burst_exactly_once(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    n = 300
    due = time.time() + 3
    ids = submit_batch(bed.client, stamping(stamps), [due] * n)
    running = [daemons(i, "--workers", "8", "--lease", "10s") for i in range(3)]
    wait_for(lambda: len(read_stamps(stamps)) >= n, 240, f"{n} tasks to run")
    wait_for(lambda: all_in(bed.client, ids, {"done"}), 120, "all to be done")
    runs = collections.Counter(t for t, _, _ in read_stamps(stamps))
    assert set(runs) == set(ids) and set(runs.values()) == {1}
    never_early(stamps, dict.fromkeys(ids, due))
    for d in running:
        assert d.stop() == 0
    assert_clean(bed, running)


@pytest.mark.slow
def test_kill_9_mid_burst_loses_nothing(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    gate = tmp_path / "gate"  # the victim's attempts wait on it: still running when it dies
    n = 200
    due = time.time() + 3
    tail = f"; while [ ! -e {gate} ]; do sleep 0.05; done"
    ids = submit_batch(bed.client, stamping(stamps, tail), [due] * n)
    victim = daemons(0, "--workers", "8", "--lease", "3s")
    wait_for(lambda: len(read_stamps(stamps)) >= 8, 60, "the victim to start attempts")
    victim.kill()  # SIGKILL
    gate.touch()
    survivors = [daemons(1, "--workers", "8", "--lease", "3s") for _ in range(2)]
    wait_for(lambda: all_in(bed.client, ids, {"done"}), 240, "all to be done")
    runs = collections.Counter(t for t, _, _ in read_stamps(stamps))
    assert set(runs) == set(ids), "every task ran"
    twice = {t for t, c in runs.items() if c > 1}
    for task_id in twice:  # only an attempt in flight when its daemon died may run again

        def recorded(t: str = task_id) -> bool:
            return any(r["event"] == "end" and r.get("lost") for r in journal_of(bed.client, t))

        wait_for(recorded, 30, f"{task_id}, run twice, to have its loss recorded")
    never_early(stamps, dict.fromkeys(ids, due))
    for d in survivors:
        assert d.stop() == 0
    assert_clean(bed, survivors)


@pytest.mark.slow
def test_sigstop_past_the_lease_is_taken_over_and_recorded(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    stamps = tmp_path / "stamps"
    script = '; [ "$TASKQ_ATTEMPT" = 1 ] && exec sleep 60; exit 0'
    a = daemons(0, "--lease", "2s")
    [task_id] = submit_batch(bed.client, stamping(stamps, script), [time.time()])
    wait_for(lambda: read_stamps(stamps), 30, "attempt 1 to start")
    # Its start record is written once the daemon hears the keeper's answer, a turn
    # after the spawn: stopped before that, the journal would not show attempt 1 begun.
    wait_for(
        lambda: [r for r in journal_of(bed.client, task_id) if r["event"] == "start"],
        30,
        "attempt 1's start record",
    )
    a.proc.send_signal(signal.SIGSTOP)
    try:
        daemons(1, "--lease", "2s")
        doc = wait_for(lambda: _done(bed.client, task_id), 60, "the takeover to finish it")
    finally:
        a.proc.send_signal(signal.SIGCONT)
    starts = [(r["attempt"], r["host"]) for r in doc["attempts"] if r["event"] == "start"]
    assert [s[0] for s in starts] == [1, 2] and starts[0][1] != starts[1][1]
    taken = [r for r in doc["attempts"] if r["event"] == "taken-over"]
    assert taken and taken[0]["reason"] == "its lease expired"
    lost = [r for r in doc["attempts"] if r["event"] == "end" and r.get("lost")]
    assert lost and "lease expired" in " ".join(lost[0]["notes"])
    wait_for(lambda: "lost the lease" in a.text(), 30, "the paused daemon to notice")
    assert a.stop() == 0


def _done(tq: Taskq, task_id: str, starts: int = 2) -> dict[str, Any] | None:
    """The task once done and its journal shows `starts` starts.

    Another GlusterFS client's appends to the journal may take a second to
    show here (attribute caching), even when the move to done/ already does.
    """
    doc = tq.show(task_id)
    seen = [r for r in doc["attempts"] if r["event"] == "start"]
    return doc if doc["state"] == "done" and len(seen) >= starts else None


def _race(
    bed: Bed, daemons: Callable[..., Daemon], stamps: Path, command: list[str]
) -> tuple[list[str], float, list[Daemon]]:
    """40 tasks due in 4 s, two daemons, and at that instant one operator command per
    task through the client mount, 8 at a time: the commands race the claims."""
    due = time.time() + 4
    ids = submit_batch(bed.client, stamping(stamps), [due] * 40)
    running = [daemons(i, "--workers", "4", "--lease", "10s") for i in range(2)]
    env = {**os.environ, "TASKQ_SPOOL": str(bed.client.spool)}

    def one(task_id: str) -> int:
        argv = [*TASKQ, *command, task_id]
        return subprocess.run(argv, env=env, capture_output=True, timeout=120).returncode

    time.sleep(max(0.0, due - time.time()))  # the race is at the instant the claims happen
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, ids))
    return ids, due, running


@pytest.mark.slow
def test_cancel_racing_claims(bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    ids, due, running = _race(bed, daemons, stamps, ["cancel"])
    wait_for(lambda: all_in(bed.client, ids, {"done", "cancelled"}), 120, "all to end")
    states = ended(bed.client, ids)
    runs = collections.Counter(t for t, _, _ in read_stamps(stamps))
    assert max(runs.values(), default=0) <= 1, "no task ran twice"
    assert all(runs[t] == 1 for t, s in states.items() if s == "done")
    never_early(stamps, dict.fromkeys(ids, due))
    assert_clean(bed, running)


@pytest.mark.slow
def test_reschedule_racing_claims(bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    stamps = tmp_path / "stamps"
    ids, due, running = _race(bed, daemons, stamps, ["reschedule", "--in", "3s"])
    wait_for(lambda: all_in(bed.client, ids, {"done"}), 120, "all to be done")
    runs = collections.Counter(t for t, _, _ in read_stamps(stamps))
    assert set(runs) == set(ids) and set(runs.values()) == {1}
    never_early(stamps, dict.fromkeys(ids, due))
    for task_id, _attempt, started in read_stamps(stamps):
        history = journal_of(bed.client, task_id)
        moved = [r for r in history if r["event"] == "rescheduled"]
        revoked = {r.get("revokes") for r in history if r["event"] == "revoked"}
        kept = [r for r in moved if f"rescheduled@{r['time']}" not in revoked]
        if kept:  # the reschedule won: never before the new time
            assert started >= _epoch(kept[-1]["run_at"]), (task_id, kept[-1])
    assert_clean(bed, running)


def _epoch(iso: str) -> float:
    from taskq.times.when import parse_when

    return parse_when(iso, 0) / 1e6


@pytest.mark.slow
def test_a_submit_on_another_host_is_found_without_the_safety_rescan(
    bed: Bed, daemons: Callable[..., Daemon], tmp_path: Path
) -> None:
    """Other hosts' submits ring a doorbell inotify cannot see: the daemons poll it."""
    stamps = tmp_path / "stamps"
    running = [daemons(i, "--rescan", "10m") for i in range(2)]
    run_at = {}
    for _ in range(5):
        due = time.time() + 1
        [task_id] = submit_batch(bed.client, stamping(stamps), [due])
        run_at[task_id] = due

        def ran(t: str = task_id) -> bool:
            return t in {s[0] for s in read_stamps(stamps)}

        wait_for(ran, 60, "it to run")
    never_early(stamps, run_at)
    late = [s - run_at[t] for t, _, s in read_stamps(stamps)]
    assert max(late) < 30, f"found only by a rescan? lateness {late}"  # the rescan is 10 minutes
    assert_clean(bed, running)
