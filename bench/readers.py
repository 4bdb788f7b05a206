"""What the daemon's per-attempt reading and guarding costs: CPU time of one body read and
of one poison-guard handling (its marker written and cleared).

    python bench/readers.py [--n 20000]

Two bodies: one with a recorded environment (65 variables, 3.6 KB), one
with PATH alone (370 bytes). Run it under two checkouts (PYTHONPATH=...)
to compare them; the figures are CPU time (time.process_time), the best
of nine rounds, so a busy machine moves them less than wall time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import timeit

from taskq.spool.task import TaskBody, new_id

T = 1_800_000_000_000_000


def bodies() -> dict[str, bytes]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/user", "LANG": "C.UTF-8"}
    env.update({f"VAR_{i}": "x" * 40 for i in range(62)})
    recorded = TaskBody(
        id=new_id(T), argv=["sh", "-c", "echo hello; sleep 1"], run_at=T, submitted_at=T,
        cwd="/home/user/work", env=env, umask=0o022, env_recorded=True, timeout=30_000_000,
    )  # fmt: skip
    small = TaskBody(
        id=new_id(T), argv=["true"], run_at=T, submitted_at=T, env={"PATH": "/usr/bin:/bin"}
    )
    return {"recorded env": recorded.to_json(), "PATH only": small.to_json()}


def best(stmt: object, n: int) -> float:
    return min(timeit.repeat(stmt, number=n, repeat=9, timer=time.process_time)) / n  # type: ignore[arg-type]


def guard_cost(n: int) -> float | None:
    try:
        from taskq.daemon.poison import PoisonGuard
    except ImportError:
        return None  # a checkout from before the guard
    from taskq.spool.layout import Spool

    spool = Spool(tempfile.mkdtemp(prefix="taskq-bench-readers-"))
    spool.init()
    guard = PoisonGuard(spool, "bench", os.getpid(), lambda: 0)
    guard.start()
    task_id = new_id(T)

    def handle() -> None:
        with guard.handling("task", task_id, "/nonexistent", "prepare"):
            pass

    try:
        return best(handle, n)
    finally:
        guard.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    n = parser.parse_args().n
    for name, data in bodies().items():
        us = best(lambda data=data: TaskBody.from_json(data), n) * 1e6
        print(f"TaskBody.from_json, {name} ({len(data)} bytes): {us:.1f} µs CPU")
    cost = guard_cost(n)
    if cost is not None:
        print(f"one poison-guard handling (marker set and cleared): {cost * 1e6:.1f} µs CPU")


if __name__ == "__main__":
    main()
