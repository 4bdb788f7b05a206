"""How long one redraw of `taskq top` takes on a large spool.

Usage: python bench/top.py [PENDING] [RUNNING]   (default 100,000 pending, 16 running)

Fills a temporary spool with PENDING tasks, a twentieth of them overdue
(the rest over the next days, in four queues), starts a real daemon with
RUNNING workers and RUNNING tasks that run until the end, then gathers
and lays out `taskq top`'s picture (observe.top.gather and cli.top.lines,
what every redraw does) 20 times. Prints the first (cold dircounts cache)
and the warm median and max, and fails (exit 1) if the warm max is 0.5 s
or more: the bound issue 28 sets for a redraw.
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

from taskq.cli.top import lines
from taskq.observe.top import gather
from taskq.spool.layout import Spool
from taskq.times.clock import wall_us

TASKQ = [sys.executable, "-m", "taskq"]
BOUND = 0.5


def fill(env: dict[str, str], pending: int, directory: Path) -> None:
    now = time.time()
    late = pending // 20
    rows = [{"command": ["true"], "run_at": f"@{now - 3600 + i * 0.1:.3f}"} for i in range(late)]
    rows += [
        {"command": ["true"], "queue": f"q{i % 4}", "run_at": f"@{now + 600 + i * 3}"}
        for i in range(pending - late)
    ]
    for start in range(0, len(rows), 10_000):
        batch = directory / "batch"
        batch.write_text("".join(json.dumps(r) + "\n" for r in rows[start : start + 10_000]))
        subprocess.run(
            [*TASKQ, "submit", "--batch", str(batch)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )


def main() -> None:
    pending = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    running = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    with tempfile.TemporaryDirectory() as tmp:
        root, gate = Path(tmp) / "spool", Path(tmp) / "gate"
        env = {**os.environ, "TASKQ_SPOOL": str(root)}
        daemon = subprocess.Popen(
            [*TASKQ, "daemon", "--workers", str(running)], env=env, stderr=subprocess.DEVNULL
        )
        try:
            wait = f"while [ ! -e {gate} ]; do sleep 0.1; done"
            for _ in range(running):
                subprocess.run(
                    [*TASKQ, "submit", "--", "sh", "-c", wait],
                    env=env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            fill(env, pending, Path(tmp))
            spool = Spool(str(root))
            while len(gather(spool, wall_us(), "bench", frozenset()).running) < running:
                time.sleep(0.2)
            times = []
            for _ in range(20):
                began = time.monotonic()
                picture = gather(spool, wall_us(), "bench", frozenset())
                lines(picture)
                times.append(time.monotonic() - began)
        finally:
            gate.touch()
            daemon.terminate()
            daemon.wait(60)
    warm = times[1:]
    print(
        f"taskq top redraw, {pending:,} pending and {running} running: first {times[0]:.3f} s, "
        f"warm median {statistics.median(warm):.3f} s, max {max(warm):.3f} s "
        f"(overdue shown {picture.overdue_total:,}, running shown {len(picture.running)})"
    )
    if max(warm) >= BOUND:
        print(f"FAIL: a warm redraw took {max(warm):.3f} s, not under {BOUND} s")
        sys.exit(1)


if __name__ == "__main__":
    main()
