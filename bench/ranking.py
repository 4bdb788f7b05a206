"""What --priority costs the due index: ranking N due tasks, with and without priorities.

Submits N due `true` tasks in one batch (with priorities 0..6, or none),
then, in this process, rebuilds a DueIndex from the spool and pops every
due task, as the dispatcher would; prints the rescan's and the pops' time
and the cost per task. With priorities the pops include one read of each
due task's file (the ranking); without, the spool has no `priorities`
file and nothing is read.

    python bench/ranking.py [-n 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from taskq.daemon.dueindex import DueIndex
from taskq.spool.layout import Spool
from taskq.times.clock import wall_us


def one(n: int, ranked: bool) -> str:
    spool = Spool(os.path.join(tempfile.mkdtemp(prefix="taskq-ranking-"), "spool"))
    lines = [json.dumps({"command": ["true"], **({"priority": i % 7} if ranked else {})})
             for i in range(n)]  # fmt: skip
    taskq = os.path.join(os.path.dirname(sys.executable), "taskq")
    env = {**os.environ, "TASKQ_SPOOL": spool.root}
    data = "\n".join(lines).encode()
    subprocess.run([taskq, "submit", "--no-env", "--batch", "-"], input=data, env=env, check=True,
                   capture_output=True)  # fmt: skip
    index, now = DueIndex(spool), wall_us() + 1_000_000
    t0 = time.perf_counter()
    index.rescan(now)
    t1 = time.perf_counter()
    popped = 0
    while index.pop_due(lambda run_at: run_at <= now, lambda queue: True) is not None:
        popped += 1
    t2 = time.perf_counter()
    label = "with priorities" if ranked else "without"
    return (f"{label:16} n={popped} rescan {1e3 * (t1 - t0):.0f} ms, pops {1e3 * (t2 - t1):.0f} ms,"
            f" {1e6 * (t2 - t1) / max(popped, 1):.1f} us a task")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=10_000)
    n = parser.parse_args().n
    for ranked in (False, True):
        print(one(n, ranked))


if __name__ == "__main__":
    main()
