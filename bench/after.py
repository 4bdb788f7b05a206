"""`taskq submit --after` and `taskq show` of a dependent on a large spool, against a plain submit.

    python bench/after.py [--pending N] [--runs K]

Fills a temporary spool with N tasks pending in future buckets (default
200,000, spread over 30 days, by --batch), then times, alternating, K
plain `taskq submit`s and K `taskq submit --after ID`s whose dependency is
one of those pending tasks, and K `taskq show`s of a dependent. A lookup by
id (spool/byid.py) costs a few probes whatever the spool holds, so
`--after` must stay within 2x a plain submit: the script exits 1 if the
median ratio is above that.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKQ = [sys.executable, "-m", "taskq"]
LIMIT = 2.0  # --after's median over a plain submit's


def run(env: dict[str, str], *args: str, data: bytes | None = None) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    out = subprocess.run([*TASKQ, *args], env=env, input=data, check=True, capture_output=True)
    return time.perf_counter() - t0, out.stdout


def fill(env: dict[str, str], n: int) -> list[str]:
    """n tasks pending over the 30 days from tomorrow; their ids."""
    start, ids = time.time() + 86400, []
    for lo in range(0, n, 50_000):
        data = b"".join(
            json.dumps({"command": ["true"], "run_at": start + i * 30 * 86400 / n}).encode() + b"\n"
            for i in range(lo, min(n, lo + 50_000))
        )
        ids += run(env, "submit", "--batch", "-", data=data)[1].decode().split()
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskq-after-") as tmp:
        env = {**os.environ, "TASKQ_SPOOL": str(Path(tmp) / "spool")}
        t0 = time.perf_counter()
        ids = fill(env, args.pending)
        print(f"filled {len(ids):,} pending tasks in {time.perf_counter() - t0:.1f} s")
        plain, after, show = [], [], []
        for i in range(args.runs):
            plain.append(run(env, "submit", "--in", "1h", "--", "true")[0])
            took, out = run(env, "submit", "--after", ids[i * 997 % len(ids)], "--", "true")
            after.append(took)
            show.append(run(env, "show", out.decode().strip())[0])
    p, a, s = (statistics.median(x) for x in (plain, after, show))
    print(f"taskq submit (plain):        {p * 1e3:7.1f} ms (median of {args.runs})")
    print(f"taskq submit --after ID:     {a * 1e3:7.1f} ms, {a / p:.2f}x")
    print(f"taskq show of a dependent:   {s * 1e3:7.1f} ms, {s / p:.2f}x")
    if a / p > LIMIT:
        print(f"--after is over {LIMIT}x a plain submit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
