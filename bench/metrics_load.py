"""Does exporting metrics cost the loop anything on a large spool?

Usage: python bench/metrics_load.py [STORED] [N]   (default 100,000 stored tasks, 100 due)

Fills a temporary spool with STORED tasks due in the next 1,000 minutes
(from an hour ahead), then twice starts a real daemon on it, once without
and once with --metrics-file, and submits N tasks due 0.1 s apart. Prints,
for each run, the lateness the daemon recorded for those tasks, and, with
metrics, how long the exporter's count of the spool took (every 5 s, with
`taskq stats`'s code, in a child process at nice 10). With metrics, the
tasks are submitted after the first count, so that they run beside later ones.
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
    return f"p50 {statistics.median(xs) * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms"


def fill(env: dict[str, str], stored: int) -> None:
    base = time.time() + 3600
    lines = "".join(
        json.dumps({"command": ["true"], "run_at": f"@{base + (i % 1000) * 60:.6f}"}) + "\n"
        for i in range(stored)
    )
    subprocess.run(
        [*TASKQ, "submit", "--batch", "-"],
        input=lines.encode(),
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def lateness(spool: Path, ids: list[str]) -> list[float]:
    out = []
    for task_id in ids:
        for line in (spool / "logs" / task_id / "journal").read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "start":
                out.append(float(record["lateness"]))
    return out


def count_seconds(prom: Path | None) -> float | None:
    """How long the exporter's last count took, once there was one."""
    if prom is None or not prom.exists():
        return None
    for line in prom.read_text().splitlines():
        if line.startswith("taskq_spool_count_duration_seconds"):
            return float(line.split()[-1])
    return None


def run(env: dict[str, str], spool: Path, n: int, prom: Path | None) -> list[float]:
    extra = [] if prom is None else ["--metrics-file", str(prom)]
    daemon = subprocess.Popen([*TASKQ, "daemon", *extra], env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(6)
        deadline = time.monotonic() + 600
        while prom is not None and count_seconds(prom) is None and time.monotonic() < deadline:
            time.sleep(0.5)  # past the first count, so that the tasks run beside later ones
        base = time.time() + 1.0
        lines = "".join(
            json.dumps({"command": ["true"], "run_at": f"@{base + i * 0.1:.6f}"}) + "\n"
            for i in range(n)
        )
        done = subprocess.run(
            [*TASKQ, "submit", "--batch", "-"],
            input=lines.encode(),
            env=env,
            check=True,
            capture_output=True,
        )
        ids = done.stdout.decode().split()
        time.sleep(n * 0.1 + 3)
        return lateness(spool, ids)
    finally:
        daemon.terminate()
        daemon.wait()


def main() -> None:
    stored = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp) / "spool"
        env = {**os.environ, "TASKQ_SPOOL": str(spool)}
        began = time.monotonic()
        fill(env, stored)
        print(f"filled {stored} tasks in {time.monotonic() - began:.1f} s", flush=True)
        plain = run(env, spool, n, None)
        print(f"without metrics: lateness {quantiles(plain)} ({len(plain)} tasks)", flush=True)
        prom = Path(tmp) / "taskq.prom"
        with_metrics = run(env, spool, n, prom)
        print(f"with metrics:    lateness {quantiles(with_metrics)} ({len(with_metrics)} tasks)")
        print(f"the exporter's last count took {count_seconds(prom)} s", flush=True)


if __name__ == "__main__":
    main()
