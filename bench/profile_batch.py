"""Profile `taskq submit --batch`: the CPU one line costs, and where it goes.

Runs `taskq submit --batch` of N lines (tasks spread over the next day,
about seven to a minute bucket, as bench/run.py's) as a process of its own,
and the raw group commit (write N files, syncfs, rename the N, syncfs) as
another, alternating, --rounds times; prints each one's wall time and its
CPU per line in user space and in the kernel (from wait4), medians over the
rounds. Then the parse alone (NDJSON to checked bodies, in this process),
and a cProfile of one whole submission in this process: the functions that
took the most time of their own.

    python bench/profile_batch.py [-n 10000] [--rounds 3] [--top 25] [--check]
                                  [--before PYTHON]

With --before, another install's interpreter (main's, in a venv of its
own) runs its `taskq submit --batch` too, in turn with this one's and the
raw group commit, so that before and after are measured in the same run;
its figures are printed first, and --check judges this install's alone.

With --check it exits 1 unless the batch meets issue 30's bar, medians of
the rounds: its rate at least MIN_RATIO of the raw group commit's, and its
CPU a line (user + kernel) at most MAX_CPU_RATIO times the raw group
commit's, which is half of what it cost before the batch path was cut
down (5.3 times, 180 us against 34 us on tmpfs, 10,000 lines). Run it with
TMPDIR on the disk to judge (tmpfs, /dev/shm, is the fast disk).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAW = """
import os, sys
from taskq.spool.fsutil import syncfs
root, n = sys.argv[1], int(sys.argv[2])
os.makedirs(root + "/tmp"); os.makedirs(root + "/new")
body = b'{"argv": ["true"]}\\n' * 10
for i in range(n):
    fd = os.open(f"{root}/tmp/{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, body)
    os.close(fd)
syncfs(root)
for i in range(n):
    os.rename(f"{root}/tmp/{i}", f"{root}/new/{i}")
syncfs(root)
"""


MIN_RATIO = 0.8  # a batch's rate against the raw group commit's
MAX_CPU_RATIO = 2.65  # a batch line's CPU against the raw group commit's: half of 5.3


def batch_file(path: Path, n: int) -> None:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"command": ["true"], "in": 3600 + i * 8.64}) + "\n")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall, user and system seconds of one process run to its end."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{argv[:4]} exited with {proc.returncode}")
    return time.perf_counter() - t0, usage.ru_utime, usage.ru_stime


def report(what: str, runs: list[tuple[float, float, float]], n: int) -> float:
    """Print one side's medians; return its CPU seconds (user + kernel), median of the rounds."""
    wall, user, system = (statistics.median(r[i] for r in runs) for i in range(3))
    spread = f"{min(r[0] for r in runs):.2f}-{max(r[0] for r in runs):.2f}"
    cpu = [r[1] + r[2] for r in runs]
    print(
        f"  {what}: {n / wall:,.0f}/s (wall {wall:.2f} s, {spread}); per line "
        f"{user / n * 1e6:.0f} us user + {system / n * 1e6:.0f} us kernel "
        f"(user + kernel {min(cpu) / n * 1e6:.0f}-{max(cpu) / n * 1e6:.0f} us)"
    )
    return statistics.median(cpu)


def parse_only(data: bytes) -> float:
    """CPU seconds of turning the batch into checked bodies, in this process."""
    from taskq.client import batch
    from taskq.client.request import environment
    from taskq.spool.task import Request

    now = time.time_ns() // 1000
    defaults = Request(run_at=now, cwd="/", env=environment(()))
    t0 = time.process_time()
    bodies = batch.parse(data, defaults, now)
    for body in bodies:
        body.to_json()
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--check", action="store_true", help="exit 1 below issue 30's bar")
    parser.add_argument("--before", metavar="PYTHON", help="also run this install's taskq")
    args = parser.parse_args()
    n = args.n
    failed = False
    with tempfile.TemporaryDirectory(prefix="taskq-profile-batch-") as tmp:
        lines = Path(tmp) / "batch.ndjson"
        batch_file(lines, n)
        ours, raw, before = [], [], []
        for r in range(args.rounds):
            env = {**os.environ, "TASKQ_SPOOL": f"{tmp}/spool{r}"}
            if args.before:
                argv = [args.before, "-m", "taskq", "submit", "--batch", str(lines)]
                before.append(timed(argv, {**env, "TASKQ_SPOOL": f"{tmp}/before{r}"}))
            ours.append(
                timed([sys.executable, "-m", "taskq", "submit", "--batch", str(lines)], env)
            )
            raw.append(timed([sys.executable, "-c", RAW, f"{tmp}/raw{r}", str(n)], env))
        print(f"{n:,} lines, {args.rounds} rounds, alternating (medians):")
        was = report(f"before ({args.before})", before, n) if before else None
        mine = report("taskq submit --batch", ours, n)
        base = report("raw group commit", raw, n)
        cpu = mine / base
        if was is not None:
            print(f"  before: CPU a line {was / base:.2f}x the raw group commit's")
        rates = sorted(b[0] / a[0] for a, b in zip(ours, raw, strict=True))
        ratio = statistics.median(rates)
        print(
            f"  ratio of rates: {ratio:.2f}x the raw group commit ({rates[0]:.2f}-{rates[-1]:.2f});"
            f" CPU a line {cpu:.2f}x the raw group commit's"
        )
        if args.check:
            met = ratio >= MIN_RATIO and cpu <= MAX_CPU_RATIO
            print(
                f"  check: rate >= {MIN_RATIO}x and CPU <= {MAX_CPU_RATIO}x: "
                + ("met" if met else "NOT met")
            )
            if not met:
                failed = True
        parsed = parse_only(lines.read_bytes()) / n
        print(f"  parse and encode alone: {parsed * 1e6:.0f} us CPU a line")
        os.environ["TASKQ_SPOOL"] = f"{tmp}/profiled"
        from taskq.cli.main import cli

        profile = cProfile.Profile()
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the ids, not wanted here
        try:
            profile.runcall(cli.main, ["submit", "--batch", str(lines)], standalone_mode=False)
        finally:
            sys.stdout = sys.__stdout__
        print(f"cProfile of one submission, by own time (top {args.top}):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
