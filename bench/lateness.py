"""Measure taskq's lateness for isolated tasks: recorded and as the task sees it.

Usage: python bench/lateness.py [N]   (default 50 tasks, 0.1 s apart)

Starts a real daemon on a temporary spool, files N tasks due at distinct
instants in one `submit --batch` (so that every task is durable before the
first is due, and no submission's own time counts as lateness), each task
being `date +%s.%N`, whose output is its own stamp of its start. Prints
p50/p99/max of (a) the lateness the daemon records (spawn - run_at: the
keeper's clock just before its posix_spawn, or the daemon's before an sh
supervisor's), (b) the lateness the command itself observes (its stamp -
run_at, read back from its output file in the spool, as `taskq logs` would)
and, for reference in the same run, (c) what the same command
observes when Python's subprocess starts it directly (its stamp - the
instant before the call): the floor of any scheduler that starts it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from taskq.spool import journal
from taskq.spool.layout import Spool, out_path

TASKQ = [sys.executable, "-m", "taskq"]
STAMP = ["date", "+%s.%N"]


def quantiles(xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    p50 = statistics.median(xs)
    return f"p50 {p50 * 1e3:7.2f} ms  p99 {p99 * 1e3:7.2f} ms  max {xs[-1] * 1e3:7.2f} ms"


def submit_all(env: dict[str, str], run_ats: list[float]) -> list[str]:
    """File every task in one batch; its ids, in order."""
    lines = b"".join(
        json.dumps({"command": STAMP, "run_at": run_at}).encode() + b"\n" for run_at in run_ats
    )
    out = subprocess.run(
        [*TASKQ, "submit", "--batch", "-"], env=env, input=lines, capture_output=True, check=True
    )
    ids = out.stdout.decode().split()
    assert len(ids) == len(run_ats), out.stdout
    assert time.time() < run_ats[0], "the batch was filed after the first task was due"
    return ids


def taskq_lateness(n: int, spool: Path) -> tuple[list[float], list[float]]:
    """(observed, recorded) lateness of n isolated tasks run by a real daemon."""
    env = {**os.environ, "TASKQ_SPOOL": str(spool)}
    daemon = subprocess.Popen([*TASKQ, "daemon"], env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        base = time.time() + 1.5
        run_ats = [base + 0.1 * i for i in range(n)]
        ids = submit_all(env, run_ats)
        subprocess.run(
            [*TASKQ, "wait", "--timeout", "600s", *ids], env=env, check=True, capture_output=True
        )
    finally:
        daemon.terminate()
        daemon.wait()
    observed, recorded = [], []
    logs = Spool(str(spool))
    for task_id, run_at in zip(ids, run_ats, strict=True):
        log_dir = logs.log_dir(task_id)
        out = Path(out_path(log_dir, 1)).read_bytes()
        observed.append(float(out.split()[-1]) - run_at)
        records = journal.read(log_dir)
        recorded += [r["lateness"] for r in records if r["event"] == "start"]
    return observed, recorded


def popen_floor(n: int) -> list[float]:
    """What the stamp command observes when Python starts it directly."""
    xs = []
    for _ in range(n):
        before = time.time()
        out = subprocess.run(STAMP, capture_output=True, check=True).stdout
        xs.append(float(out) - before)
        time.sleep(0.02)
    return xs


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        observed, recorded = taskq_lateness(n, Path(tmp) / "spool")
    floor = popen_floor(n)
    print(f"isolated tasks: {n}, started early: {sum(x < 0 for x in observed)}")
    print(f"recorded lateness (spawn - run_at):       {quantiles(recorded)}")
    print(f"observed lateness (the command's stamp):  {quantiles(observed)}")
    print(f"floor: subprocess.run of the same command {quantiles(floor)}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
