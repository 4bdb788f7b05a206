"""Measure taskq's lateness for isolated tasks: recorded and as the task sees it.

Usage: python bench/lateness.py [N]   (default 50 tasks, 0.1 s apart)

Starts a real daemon on a temporary spool, submits N tasks due at distinct
instants, each of which stamps its own start with `date +%s.%N`, and prints
p50/p99/max of (a) the lateness the daemon records (spawn - run_at) and
(b) the lateness the command itself observes (its first line - run_at).
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

TASKQ = [sys.executable, "-m", "taskq"]


def quantiles(xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    p50 = statistics.median(xs)
    return f"p50 {p50 * 1e3:7.2f} ms  p99 {p99 * 1e3:7.2f} ms  max {xs[-1] * 1e3:7.2f} ms"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TASKQ_SPOOL": str(Path(tmp) / "spool")}
        stamps = Path(tmp) / "stamps"
        daemon = subprocess.Popen([*TASKQ, "daemon"], env=env, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        base = time.time() + 1.5
        runs: dict[str, float] = {}
        for i in range(n):
            run_at = base + 0.1 * i
            cmd = ["sh", "-c", f'echo "$TASKQ_ID $(date +%s.%N)" >> {stamps}']
            out = subprocess.run(
                [*TASKQ, "submit", "--at", f"@{run_at:.6f}", "--", *cmd],
                env=env,
                capture_output=True,
                check=True,
            )
            runs[out.stdout.decode().strip()] = run_at
        while len(stamps.read_text().splitlines() if stamps.exists() else []) < n:
            time.sleep(0.1)
        daemon.terminate()
        daemon.wait()
        observed, recorded, early = [], [], 0
        for line in stamps.read_text().splitlines():
            task_id, when = line.split()
            observed.append(float(when) - runs[task_id])
            early += float(when) < runs[task_id]
            doc = json.loads(
                subprocess.run(
                    [*TASKQ, "show", "--json", task_id], env=env, capture_output=True, check=True
                ).stdout
            )
            recorded += [r["lateness"] for r in doc["attempts"] if r["event"] == "start"]
    print(f"isolated tasks: {n}, started early: {early}")
    print(f"recorded lateness (spawn - run_at):        {quantiles(recorded)}")
    print(f"observed lateness (command's first line):  {quantiles(observed)}")


if __name__ == "__main__":
    main()
