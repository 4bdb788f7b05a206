"""Measure taskq's lateness for isolated tasks: recorded and as the task sees it.

Usage: python bench/lateness.py [N] [--trace [MS]]   (default 50 tasks, 0.1 s apart)

Starts a real daemon on a temporary spool, files N tasks due at distinct
instants in one `submit --batch` (so that every task is durable before the
first is due, and no submission's own time counts as lateness), each task
being `date +%s.%N`, whose output is its own stamp of its start. Prints
p50/p99/max of (a) the lateness the daemon records (spawn - run_at: the
keeper's clock just before its posix_spawn, or the daemon's before an sh
supervisor's), (b) the lateness the command itself observes (its stamp -
run_at, read back from its output file in the spool, as `taskq logs` would)
and, for reference in the same run, (c) what the same command
observes when Python's subprocess starts it directly (its stamp - the
instant before the call): the floor of any scheduler that starts it.

It also prints (d) the time from the spawn to the stamp: (b) - (a).

With --trace the daemon, its keeper and their children run under `perf
trace` (a few system calls: the waits, the file work and the messages),
and for each task whose stamp is more than MS (default 5) late it prints
one line: when the daemon woke for it, sent it to the keeper, the keeper
received it, wrote its "S", the command exec'd and stamped, each in ms
from run_at; then every call of the daemon's or keeper's from 50 ms
before run_at that took over SLOW ms (an fsync stalled behind someone
else's writes, say). perf's own cost makes every task later, most of all
the command's own start; what it shows is what a late task waited behind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from taskq.spool import journal
from taskq.spool.layout import Spool, out_path

TASKQ = [sys.executable, "-m", "taskq"]
STAMP = ["date", "+%s.%N"]
# What a due task can wait behind, and the milestones of its start.
TRACED = (
    "fsync,fdatasync,syncfs,renameat2,rename,mkdir,openat,flock,"
    "write,pwrite64,sendmsg,recvmsg,execve,clock_nanosleep,epoll_wait"
)


def quantiles(xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    p50 = statistics.median(xs)
    return f"p50 {p50 * 1e3:7.2f} ms  p99 {p99 * 1e3:7.2f} ms  max {xs[-1] * 1e3:7.2f} ms"


def submit_all(env: dict[str, str], run_ats: list[float]) -> list[str]:
    """File every task in one batch; its ids, in order."""
    lines = b"".join(
        json.dumps({"command": STAMP, "run_at": run_at}).encode() + b"\n" for run_at in run_ats
    )
    out = subprocess.run(
        [*TASKQ, "submit", "--batch", "-"], env=env, input=lines, capture_output=True, check=True
    )
    ids = out.stdout.decode().split()
    assert len(ids) == len(run_ats), out.stdout
    assert time.time() < run_ats[0], "the batch was filed after the first task was due"
    return ids


def taskq_lateness(
    n: int, spool: Path, trace: Path | None = None
) -> tuple[list[float], list[float], list[float]]:
    """(observed, recorded) lateness of n isolated tasks run by a real daemon, and run_ats."""
    env = {**os.environ, "TASKQ_SPOOL": str(spool)}
    perf = ["perf", "trace", "-T", "-e", TRACED, "-o", str(trace), "--"] if trace else []
    daemon = subprocess.Popen([*perf, *TASKQ, "daemon"], env=env, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        base = time.time() + 3.0
        run_ats = [base + 0.1 * i for i in range(n)]
        ids = submit_all(env, run_ats)
        subprocess.run(
            [*TASKQ, "wait", "--timeout", "600s", *ids], env=env, check=True, capture_output=True
        )
    finally:
        stop(daemon, traced=bool(perf))
    observed, recorded = [], []
    logs = Spool(str(spool))
    for task_id, run_at in zip(ids, run_ats, strict=True):
        log_dir = logs.log_dir(task_id)
        out = Path(out_path(log_dir, 1)).read_bytes()
        observed.append(float(out.split()[-1]) - run_at)
        records = journal.read(log_dir)
        recorded += [r["lateness"] for r in records if r["event"] == "start"]
    return observed, recorded, run_ats


def stop(daemon: subprocess.Popen[bytes], traced: bool) -> None:
    """End the daemon (under perf: perf's child, which perf then outlives to write its trace)."""
    if traced:
        for child in Path(f"/proc/{daemon.pid}/task/{daemon.pid}/children").read_text().split():
            os.kill(int(child), 15)
    else:
        daemon.terminate()
    daemon.wait()


LINE = re.compile(
    r"\s*(\d+\.\d+) \(\s*(\d+\.\d+) ms\): (\S+)/(\d+) (?:\.\.\. \[continued\]: )?(\w+)\("
)
WAITS = {"epoll_wait", "clock_nanosleep"}
SLOW = 0.5  # ms: a call of the daemon's or the keeper's this long is listed


def explain(trace: Path, late: list[tuple[float, float, float]], mono_minus_wall: float) -> None:
    """For each (run_at, observed, recorded lateness) a line: when each step of its start happened.

    Each step in ms from run_at: the daemon's wake-up before its request,
    the request sent, the keeper's receipt of it, its "S" written, the
    command's exec and its stamp written; then every other call of the
    daemon's or keeper's from 30 ms before run_at that took over SLOW ms.
    """
    calls = []  # (began s, took ms, name, pid, call), monotonic
    for line in trace.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            calls.append((float(m[1]) / 1e3, float(m[2]), m[3], int(m[4]), m[5]))
    daemon = next((c[3] for c in calls if c[4] == "renameat2"), None)
    keeper = next((c[3] for c in calls if c[4] == "recvmsg" and c[3] != daemon), None)
    rows = []
    for run_at, lateness, spawned in late:
        at, stamp = run_at + mono_minus_wall, run_at + mono_minus_wall + lateness
        window = [c for c in calls if at - 0.05 <= c[0] + c[1] / 1e3 and c[0] <= stamp + 0.01]
        rows.append((at, lateness, spawned, window, _steps(window, daemon, keeper, stamp + 0.01)))
    # perf stamps by its own clock, which drifts from CLOCK_MONOTONIC: align it on the
    # commands' stamps, each written a few µs after the command read its clock.
    skew = statistics.median(
        [steps[-1] - at - lateness for at, lateness, _, _, steps in rows if steps[-1]] or [0.0]
    )
    print(
        "\nlate by stamp/spawn; ms from run_at: wake send recv S exec stamp | slow calls (at/took)"
    )
    for at, lateness, spawned, window, steps in rows:
        shown = " ".join("-" if t is None else f"{(t - at - skew) * 1e3:+.2f}" for t in steps)
        slow = [
            f"{c[2]}.{c[4]} {(c[0] - at - skew) * 1e3:+.1f}/{c[1]:.1f}"
            for c in window
            if c[3] in (daemon, keeper) and c[1] >= SLOW and c[4] not in WAITS
        ]
        late_by = f"{lateness * 1e3:6.2f}/{spawned * 1e3:.2f} ms"
        print(f"{late_by}: {shown} | {', '.join(slow)}")


def _steps(
    window: list[tuple[float, float, str, int, str]],
    daemon: int | None,
    keeper: int | None,
    stamp: float,
) -> list[float | None]:
    """The instants of wake, send, recv, S, exec, stamp in one task's window."""

    def first(pid: int | None, call: str, after: float | None, other: bool = False) -> float | None:
        for began, _, _, p, c in window:
            mine = p not in (daemon, keeper) if other else p == pid
            if c == call and mine and (after is None or began >= after):
                return began
        return None

    sends = [c[0] for c in window if c[3] == daemon and c[4] == "sendmsg" and c[0] <= stamp]
    send = sends[-1] if sends else None
    wakes = [
        c[0] + c[1] / 1e3
        for c in window
        if c[3] == daemon and c[4] == "epoll_wait" and send and c[0] + c[1] / 1e3 <= send
    ]
    wake = wakes[-1] if wakes else None
    recv = first(keeper, "recvmsg", send)
    s_at = first(keeper, "write", recv)
    exec_at = first(None, "execve", s_at, other=True)
    stamped = [c[0] for c in window if c[3] not in (daemon, keeper) and c[4] == "write"]
    return [wake, send, recv, s_at, exec_at, stamped[-1] if stamped else None]


def popen_floor(n: int) -> list[float]:
    """What the stamp command observes when Python starts it directly."""
    xs = []
    for _ in range(n):
        before = time.time()
        out = subprocess.run(STAMP, capture_output=True, check=True).stdout
        xs.append(float(out) - before)
        time.sleep(0.02)
    return xs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=50, help="tasks (50)")
    parser.add_argument("--trace", type=float, nargs="?", const=5.0, metavar="MS")
    args = parser.parse_args()
    n = args.n
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace" if args.trace is not None else None
        mono_minus_wall = time.monotonic() - time.time()
        observed, recorded, run_ats = taskq_lateness(n, Path(tmp) / "spool", trace)
        if trace is not None:
            late = [
                (r, x, y)
                for r, x, y in zip(run_ats, observed, recorded, strict=True)
                if x * 1e3 > args.trace
            ]
            explain(trace, late, mono_minus_wall)
    floor = popen_floor(n)
    print(f"isolated tasks: {n}, started early: {sum(x < 0 for x in observed)}")
    print(f"recorded lateness (spawn - run_at):       {quantiles(recorded)}")
    print(f"observed lateness (the command's stamp):  {quantiles(observed)}")
    between = [x - r for x, r in zip(observed, recorded, strict=True)]
    print(f"from the spawn to the command's stamp:    {quantiles(between)}")
    print(f"floor: subprocess.run of the same command {quantiles(floor)}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
