"""Measure recovery times after a daemon is killed with SIGKILL.

    python bench/recovery.py [--trials N] [--lease DURATION]

Needs taskq importable by this Python (pip install .). Two cases, each run
N times (default 5) on a fresh temporary spool, with 4 attempts in flight:

  restart   the daemon is killed while its 4 attempts (`sleep 3`) run, and
            a new daemon with the same --host-id is launched at once: the
            time from that launch to the last `adopted` journal record
  takeover  two daemons with different host ids (two hosts, simulated) and
            --lease DURATION (default 3s); the one running 4 attempts
            (`sleep 2`) is killed at a random moment up to a third of the
            lease (at most 1.2 s) after the other is ready, so that the
            phases of renewal and scan vary: the time from the kill to the
            last `taken-over` record written by the survivor, also as a
            multiple of the lease. The attempts end before their leases
            expire, so the survivor settles them from their status files.

After each case it checks that every task ran exactly once. Journal times
are the daemons' wall clock, the same clock this script reads.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
TASKQ = [sys.executable, "-m", "taskq"]
TASKS = 4


def journal(path: Path) -> list[dict[str, str]]:
    """A task's journal records; a line being appended as we read is skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def records(spool: Path, event: str) -> dict[str, float]:
    """The time of the last `event` record of each task, by task id."""
    found = {}
    for path in spool.glob("logs/*/journal"):
        for r in journal(path):
            if r["event"] == event:
                found[path.parent.name] = _epoch(r["time"])
    return found


def all_have(spool: Path, event: str) -> dict[str, float] | None:
    """The `event` times once every task has one, else None."""
    found = records(spool, event)
    return found if len(found) == TASKS else None


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return value


class Spool:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**os.environ, "TASKQ_SPOOL": str(root)}

    def submit(self, script: str) -> str:
        argv = [*TASKQ, "submit", "--", "sh", "-c", script]
        out = subprocess.run(argv, env=self.env, check=True, capture_output=True).stdout
        return out.decode().strip()

    def daemon(self, host: str, *args: str) -> subprocess.Popen[bytes]:
        argv = [*TASKQ, "daemon", "--host-id", host, "--workers", str(TASKS), *args]
        return subprocess.Popen(argv, env=self.env, stderr=subprocess.DEVNULL)

    def ready(self, proc: subprocess.Popen[bytes], host: str) -> None:
        status = self.root / "run" / f"{host}_{proc.pid}.status"
        wait_for(status.exists, 20, f"daemon {host} to start")

    def finish(self, ids: list[str]) -> None:
        """Wait until every task is done, then check each ran exactly once."""
        wait_for(lambda: len(list(self.root.glob("done/*/*"))) == len(ids), 60, "tasks to end")
        for task_id in ids:
            path = self.root / "logs" / task_id / "journal"
            starts = sum(r["event"] == "start" for r in journal(path))
            assert starts == 1, f"{task_id} started {starts} times"


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(60)


def restart(root: Path) -> float:
    sp = Spool(root)
    victim = sp.daemon("host")
    sp.ready(victim, "host")
    ids = [sp.submit("sleep 3") for _ in range(TASKS)]
    wait_for(lambda: len(records(root, "start")) == TASKS, 20, "the attempts to start")
    kill(victim)
    launched = time.time()
    successor = sp.daemon("host")
    try:
        adopted = wait_for(lambda: all_have(root, "adopted"), 20, "adoption")
        sp.finish(ids)
    finally:
        stop(successor)
    return max(adopted.values()) - launched


def takeover(root: Path, lease: str, pause: float) -> float:
    sp = Spool(root)
    victim = sp.daemon("victim", "--lease", lease)
    sp.ready(victim, "victim")
    ids = [sp.submit("sleep 2") for _ in range(TASKS)]
    wait_for(lambda: len(records(root, "start")) == TASKS, 20, "the attempts to start")
    survivor = sp.daemon("survivor", "--lease", lease)
    try:
        sp.ready(survivor, "survivor")
        time.sleep(pause)
        kill(victim)
        killed = time.time()
        taken = wait_for(lambda: all_have(root, "taken-over"), 60, "takeover")
        sp.finish(ids)
    finally:
        stop(survivor)
    return max(taken.values()) - killed


def summary(xs: list[float], unit: float = 1.0) -> str:
    xs = [x / unit for x in xs]
    return f"min {min(xs):.3f}  median {statistics.median(xs):.3f}  max {max(xs):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--lease", default="3s", help="--lease of both daemons in `takeover`")
    args = parser.parse_args()
    from taskq.times.timespec import SECOND, parse_duration

    lease = parse_duration(args.lease) / SECOND
    rng = random.Random(1)
    adopt, take = [], []
    with tempfile.TemporaryDirectory(prefix="taskq-recovery-") as tmp:
        for i in range(args.trials):
            adopt.append(restart(Path(tmp) / f"restart{i}"))
            pause = rng.uniform(0, min(lease / 3, 1.2))
            take.append(takeover(Path(tmp) / f"takeover{i}", args.lease, pause))
    cores = os.cpu_count()
    print(f"taskq recovery, {args.trials} trials, {TASKS} attempts in flight, {cores} cores")
    print(f"restart: launch -> all adopted (s):        {summary(adopt)}")
    print(f"takeover: kill -> all taken over (s):      {summary(take)}  (--lease {args.lease})")
    print(f"takeover in leases:                        {summary(take, lease)}")
    print("every task ran exactly once")


if __name__ == "__main__":
    main()
