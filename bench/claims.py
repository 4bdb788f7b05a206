"""Many daemons, one spool, a burst due at once: drain time, lost claims, renames per task.

Starts K daemons (--workers 8 each, distinct host ids) over one spool,
submits N tasks due at one instant in one batch, split evenly between two
queues, and waits until every task is in done/. Each task stamps the real
clock when it starts. It reports, per run:

* drain: from the run time to the last task's end (done/ complete);
* lateness: each start minus the run time (p50, p99, max), and "early",
  which must be 0;
* fairness: the two queues' median start times, apart, as a share of the
  drain (0 is perfectly fair; round robin keeps it near 0);
* claims won and lost, as the daemons count them (their last log line);
* with --strace, every daemon runs under `strace -f -e trace=rename,renameat2`:
  claim renames that failed with ENOENT (lost) per task, every rename that
  failed with ENOENT (a lost race, as issue 26 counted them) per task, those
  refused with EINVAL (RENAME_NOREPLACE on a filesystem without it, each
  followed by a plain rename) per task, and all renames per task;
* the machine's 1-minute load average as the run began and as it ended;
* on GlusterFS (--fs gluster; needs root, /dev/fuse and glusterfs-server),
  the brick's file operations per task from `gluster volume profile`.

A run that has not drained after --limit seconds is stopped and its row
says how many tasks were done by then.

    python bench/claims.py [-k 1 2 4 8] [-n 2000] [--fs local|gluster] [--strace] [--limit S]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from substrates import GlusterBed

TASKQ = [str(Path(sys.executable).parent / "taskq")]
LEAD = 2.0  # seconds from submission to the burst's run time
PEERS_SETTLE = 3.0  # after every daemon is up: each has read the others' health records
STOP_LINE = re.compile(r"claims (\d+) won, (\d+) lost")


@dataclass
class Result:
    daemons: int
    tasks: int
    drain: float
    late: list[float]
    fairness: float
    won: int
    lost: int
    renames: int | None
    lost_renames: int | None
    failed_renames: int | None
    refused_renames: int | None
    fops: int | None
    cpu: float = 0.0  # CPU seconds of the daemons and their attempts, per task
    finished: int = 0  # tasks in done/ when the run stopped: fewer than tasks if it timed out
    load: tuple[float, float] = (0.0, 0.0)  # the 1-minute load average as it began and ended


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]


def run_once(
    roots: list[Path], k: int, n: int, tmp: Path, use_strace: bool, limit: float
) -> Result:
    stamps = tmp / f"stamps-{k}"
    cpu0, load0 = _children_cpu(), os.getloadavg()[0]
    procs, logs, traces = [], [], []
    for i in range(k):
        log, trace = tmp / f"d{k}-{i}.log", tmp / f"d{k}-{i}.strace"
        argv = [*TASKQ, "daemon", "--host-id", f"host{i}", "--workers", "8", "--lease", "30s"]
        if use_strace:
            strace = ["strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=rename,renameat2"]
            argv = [*strace, "-o", str(trace), *argv]  # seccomp-bpf: untraced calls run free
        env = {**os.environ, "TASKQ_SPOOL": str(roots[i % len(roots)])}
        with open(log, "wb") as f:
            procs.append(subprocess.Popen(argv, env=env, stderr=f))
        logs.append(log)
        traces.append(trace)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not all(b"started on" in f.read_bytes() for f in logs):
            time.sleep(0.05)
        time.sleep(PEERS_SETTLE)
        due = time.time() + LEAD
        cmd = ["sh", "-c", f'echo "$TASKQ_ID $(date +%s.%N)" >> {stamps}']
        lines = [
            json.dumps({"command": cmd, "run_at": f"@{due:.6f}", "queue": f"q{i % 2}"})
            for i in range(n)
        ]
        env = {**os.environ, "TASKQ_SPOOL": str(roots[-1])}
        out = subprocess.run(
            [*TASKQ, "submit", "--batch", "-"],
            input="\n".join(lines).encode(),
            env=env,
            capture_output=True,
            check=True,
        ).stdout.split()
        queue_of = {i.decode(): f"q{j % 2}" for j, i in enumerate(out)}
        done = roots[-1] / "done"
        deadline = time.time() + limit
        while (finished := _count(done)) < n and time.time() < deadline:
            time.sleep(0.05)
        drain = time.time() - due
    finally:
        for p in procs:
            for pid in _daemon_pids(p.pid, use_strace):
                os.kill(pid, signal.SIGTERM)  # strace -o FILE PROG blocks fatal signals
        for p in procs:
            p.wait(120)
    cpu = (_children_cpu() - cpu0) / n
    starts = {}
    for line in stamps.read_text().splitlines():
        task_id, when = line.split()
        starts[task_id] = float(when)
    late = [starts[t] - due for t in starts]
    medians = [
        pct([starts[t] for t in starts if queue_of.get(t) == q], 0.5) - due for q in ("q0", "q1")
    ]
    won = lost = 0
    for log in logs:
        m = STOP_LINE.search(log.read_text())
        if m:
            won, lost = won + int(m.group(1)), lost + int(m.group(2))
    renames = lost_renames = failed = refused = None
    if use_strace:
        renames = lost_renames = failed = refused = 0
        for trace in traces:
            for line in trace.read_text().splitlines():
                if "rename" not in line:
                    continue
                renames += 1
                lost_renames += "_claimed_" in line and "ENOENT" in line
                failed += " = -1 ENOENT" in line  # a lost race, whichever rename
                refused += " = -1 EINVAL" in line  # RENAME_NOREPLACE refused: a plain one follows
    fairness = abs(medians[0] - medians[1]) / drain
    result = Result(
        k, n, drain, late, fairness, won, lost, renames, lost_renames, failed, refused, None, cpu
    )
    result.finished = finished
    result.load = (load0, os.getloadavg()[0])
    return result


def _children_cpu() -> float:
    """CPU seconds of the processes waited for: the daemons, with the attempts they reaped."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _daemon_pids(pid: int, traced: bool) -> list[int]:
    """The daemon's pid: the one started, or the child of the strace started."""
    if not traced:
        return [pid]
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def _count(done: Path) -> int:
    try:
        return sum(len(os.listdir(done / d)) for d in os.listdir(done))
    except FileNotFoundError:
        return 0


def report(r: Result, fs: str) -> str:
    runs = len(r.late)
    drain = f"{r.drain:.1f} s"
    if r.finished < r.tasks:
        drain = f"> {r.drain:.0f} s ({r.finished} done)"
    row = (
        f"| {fs} | {r.daemons} | {r.tasks} | {drain} | "
        f"{pct(r.late, 0.5) * 1e3:.0f} / {pct(r.late, 0.99) * 1e3:.0f} / "
        f"{max(r.late) * 1e3:.0f} ms | {sum(x < 0 for x in r.late)} | {r.fairness:.3f} | "
        f"{r.cpu * 1e3:.1f} ms | {r.lost / max(runs, 1):.3f} |"
    )
    counted = (r.renames, r.lost_renames, r.failed_renames, r.refused_renames)
    if all(c is not None for c in counted):
        row += "".join(f" {c / runs:.3f} |" for c in counted[1:])  # type: ignore[operator]
        row += f" {r.renames / runs:.2f} |"  # type: ignore[operator]
    else:
        row += " - | - | - | - |"
    row += f" {r.fops / runs:.1f} |" if r.fops is not None else " - |"
    row += f" {r.load[0]:.0f}-{r.load[1]:.0f} |"
    return row


HEADER = (
    "| fs | daemons | tasks | drain | lateness p50/p99/max | early | fairness | CPU/task "
    "| claims lost/task (counters) | lost claims/task (strace) | ENOENT renames/task "
    "| EINVAL renames/task | renames/task | brick fops/task | load |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def gluster_fops(bed: GlusterBed, action: str) -> int:
    """Start, or read and stop, the volume's profile; the brick's file operations meanwhile."""
    from substrates import GLUSTER_VOLUME

    assert bed.cli is not None
    if action == "start":
        bed.cli("volume", "profile", GLUSTER_VOLUME, "start")
        bed.cli("volume", "profile", GLUSTER_VOLUME, "info", "clear")
        return 0
    out = bed.cli("volume", "profile", GLUSTER_VOLUME, "info", "cumulative").stdout
    bed.cli("volume", "profile", GLUSTER_VOLUME, "stop")
    calls = collections.Counter[str]()
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+(?:\s+[\d.]+ [nu]s){3}\s+(\d+)\s+(\w+)", line)
        if m:
            calls[m.group(2)] += int(m.group(1))
    return sum(calls.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, nargs="+", default=[1, 2, 4, 8], help="daemon counts")
    parser.add_argument("-n", type=int, default=2000, help="tasks in the burst (default 2000)")
    parser.add_argument("--fs", choices=("local", "gluster"), default="local")
    parser.add_argument("--strace", action="store_true", help="count renames with strace")
    parser.add_argument(
        "--limit",
        type=float,
        default=1800.0,
        help="seconds a run may take to drain before its row is reported unfinished (1800)",
    )
    args = parser.parse_args()
    print(HEADER)
    with tempfile.TemporaryDirectory(prefix="taskq-claims-") as tmp_name:
        tmp = Path(tmp_name)
        if args.fs == "gluster":
            from substrates import gluster_bed

            with gluster_bed(tmp / "bed") as bed:
                for k in args.k:
                    roots = [d / "spool" for d in bed.fresh_dir(f"claims{k}")]
                    gluster_fops(bed, "start")
                    r = run_once(roots, k, args.n, tmp, args.strace, args.limit)
                    r.fops = gluster_fops(bed, "read")
                    print(report(r, "GlusterFS"), flush=True)
            return
        for k in args.k:
            root = tmp / f"spool-{k}"
            r = run_once([root], k, args.n, tmp, args.strace, args.limit)
            print(report(r, "local"), flush=True)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
