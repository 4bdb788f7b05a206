"""Cross-host lateness on GlusterFS: submit through one mount, run on daemons of two others.

Brings up the test suite's GlusterFS bed (tests/substrates.py: a volume in a
network namespace, three FUSE clients, each standing for one host), starts
two daemons on mounts 0 and 1, and submits N tasks one by one through mount
2, each due 1 s after its submission. inotify does not see other clients'
changes, so only the doorbell poll (--doorbell-poll) or the safety-net
rescan can find them; the rescan is set to 10 minutes here so that only the
poll counts. Each task stamps the real clock when it starts; lateness is
that stamp minus its run_at. Needs root, /dev/fuse and the Debian packages
glusterfs-server, glusterfs-client.

    python bench/crosshost.py [-n 100] [--poll 250ms]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from substrates import gluster_bed

TASKQ = [str(Path(sys.executable).parent / "taskq")]


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="tasks (default 100)")
    parser.add_argument("--poll", default="250ms", help="the daemons' --doorbell-poll")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="taskq-crosshost-") as tmp,
        gluster_bed(Path(tmp) / "bed") as bed,
    ):
        roots = [d / "spool" for d in bed.fresh_dir("crosshost")]
        stamps = Path(tmp) / "stamps"
        daemons = [start(roots[i], f"host{i}", args.poll, Path(tmp) / f"d{i}.log") for i in (0, 1)]
        try:
            run_at = submit_all(roots[2], stamps, args.n)
            deadline = time.time() + 120
            while len(read(stamps)) < args.n and time.time() < deadline:
                time.sleep(0.1)
        finally:
            for d in daemons:
                d.terminate()
                d.wait(60)
        started = read(stamps)
        late = [started[t] - run_at[t] for t in started]
        print(f"GlusterFS, {bed.setup_seconds:.1f} s to set up; {args.n} tasks submitted through")
        print(f"mount 2, due 1 s later, daemons on mounts 0 and 1, --doorbell-poll {args.poll}:")
        print(f"  started {len(started)} of {args.n}; early {sum(x < 0 for x in late)}")
        if late:
            print(
                f"  lateness p50 {pct(late, 0.5) * 1e3:.0f} ms, p99 {pct(late, 0.99) * 1e3:.0f} ms,"
                f" max {max(late) * 1e3:.0f} ms"
            )


def start(root: Path, host: str, poll: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TASKQ_SPOOL": str(root)}
    argv = [*TASKQ, "daemon", "--host-id", host, "--rescan", "10m", "--doorbell-poll", poll]
    with open(log, "wb") as f:
        return subprocess.Popen(argv, env=env, stderr=f)


def submit_all(root: Path, stamps: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "TASKQ_SPOOL": str(root)}
    script = f'echo "$TASKQ_ID $(date +%s.%N)" >> {stamps}'
    run_at = {}
    rng = random.Random(3)
    for _ in range(n):
        due = time.time() + 1
        doc = json.dumps({"command": ["sh", "-c", script], "run_at": f"@{due:.6f}"})
        out = subprocess.run(
            [*TASKQ, "submit", "--batch", "-"], input=doc.encode(), env=env, capture_output=True
        )
        run_at[out.stdout.decode().strip()] = due
        time.sleep(rng.uniform(0.05, 0.5))  # submissions at random moments of the poll period
    return run_at


def read(stamps: Path) -> dict[str, float]:
    if not stamps.exists():
        return {}
    rows = (line.split() for line in stamps.read_text().splitlines())
    return {task_id: float(when) for task_id, when in rows}


if __name__ == "__main__":
    main()
