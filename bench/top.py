"""How long one redraw of `taskq top` takes on a large spool.

Usage: python bench/top.py [PENDING] [RUNNING]   (default 100,000 pending, 16 running)

Fills a temporary spool with PENDING tasks, a twentieth of them overdue
(the rest over the next days, in four queues), with RUNNING tasks that
run until the end (a day overdue, so that they start first), starts a
real daemon with RUNNING workers, then gathers and lays out `taskq top`'s
picture (observe.top.gather with the view's LiveCounts, and cli.top.lines:
what every redraw does) 20 times, 2 s apart as top's default --interval.
Prints the first (cold: top's first count of everything) and the warm
median and max, in wall and in CPU time, and the largest age of the future
buckets' counts shown; fails (exit 1) if the warm wall max is 0.5 s or
more: the bound issue 28 sets for a redraw. On a machine others load, the
CPU time says what a redraw costs and the wall time what it took.
TASKQ_BENCH_SPOOL=DIR fills DIR/spool once and keeps it for the next run
(a million tasks take many minutes to submit); its tasks come due as time
goes by.
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
from taskq.observe.livecounts import LiveCounts
from taskq.observe.top import Picture, gather
from taskq.spool.layout import Spool
from taskq.times.clock import wall_us

TASKQ = [sys.executable, "-m", "taskq"]
BOUND = 0.5
INTERVAL = 2.0  # s between redraws, as top's default --interval


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


def measure(spool: Spool) -> tuple[list[float], list[float], list[float], Picture]:
    """Wall and CPU seconds of 20 redraws, the ages of their counts, and the last picture."""
    live = LiveCounts(spool)
    times, cpu, ages = [], [], []
    for n in range(20):
        time.sleep(INTERVAL if n else 0)
        began, used = time.monotonic(), time.process_time()
        picture = gather(spool, wall_us(), "bench", frozenset(), live)
        lines(picture)
        times.append(time.monotonic() - began)
        cpu.append(time.process_time() - used)
        ages.append(picture.counts_age)
    return times, cpu, ages, picture


def main() -> None:
    pending = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    running = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    with tempfile.TemporaryDirectory() as tmp:
        # TASKQ_BENCH_SPOOL: a directory whose spool is filled once and kept (filling a
        # million tasks takes many minutes); its tasks come due as time goes by.
        home = Path(os.environ.get("TASKQ_BENCH_SPOOL") or tmp)
        root, gate = home / "spool", Path(tmp) / "gate"
        env = {**os.environ, "TASKQ_SPOOL": str(root)}
        wait = f"while [ ! -e {gate} ]; do sleep 0.1; done"
        for _ in range(running):  # a day overdue: the first the daemon starts
            subprocess.run(
                [*TASKQ, "submit", "--at", f"@{time.time() - 86400:.3f}", "--", "sh", "-c", wait],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        if not (home / f"filled-{pending}").exists():
            fill(env, pending, home)
            (home / f"filled-{pending}").touch()
        daemon = subprocess.Popen(
            [*TASKQ, "daemon", "--workers", str(running)], env=env, stderr=subprocess.DEVNULL
        )
        try:
            spool = Spool(str(root))
            while len(gather(spool, wall_us(), "bench", frozenset()).running) < running:
                time.sleep(0.2)
            times, cpu, ages, picture = measure(spool)
        finally:
            gate.touch()
            daemon.terminate()
            daemon.wait(60)
    warm, warm_cpu = times[1:], cpu[1:]
    shown = sum(q.pending for q in picture.queues)
    print(
        f"taskq top redraw, {pending:,} pending and {running} running: first {times[0]:.3f} s "
        f"(CPU {cpu[0]:.3f} s), warm median {statistics.median(warm):.3f} s, "
        f"max {max(warm):.3f} s (CPU median {statistics.median(warm_cpu):.3f} s, "
        f"max {max(warm_cpu):.3f} s); counts up to {max(ages):.1f} s old "
        f"(pending shown {shown:,}, overdue {picture.overdue_total:,}, "
        f"running {len(picture.running)}; load {os.getloadavg()[0]:.1f})"
    )
    if max(warm) >= BOUND:
        print(f"FAIL: a warm redraw took {max(warm):.3f} s, not under {BOUND} s")
        sys.exit(1)


if __name__ == "__main__":
    main()
