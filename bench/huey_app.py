"""The huey side of the benchmark: a SqliteHuey app whose task stamps its start.

Run by bench/run.py, both in-process (to time schedule()) and under
huey_consumer with its default settings (to time lateness).
"""

from __future__ import annotations

import os
import time

from huey import SqliteHuey

huey = SqliteHuey(filename=os.environ.get("BENCH_HUEY_DB", "/tmp/bench-huey.db"))


@huey.task()
def stamp(path: str, due: float) -> None:
    started = time.time()
    with open(path, "a") as f:
        f.write(f"{due:.6f} {started:.6f}\n")
