"""Two installs of taskq side by side: run.py's sections by each in turn, one run.

    python bench/versus.py BEFORE_PYTHON AFTER_PYTHON [--rounds N] [--only submit burst] [--quick]

Each python is the interpreter of a non-editable install (an editable one
adds an import hook to every start). Each round runs `run.py --rounds 1`
once under each, the order swapped every round (A B, B A, ...), so a load
that changes during the run falls on both. For every figure run.py prints,
the table shows each install's median over the rounds and their spread,
and after/before as the median of the per-round ratios with its spread.
The load average is taken before every run and printed with the figures.
Each run also measures CPU (user + system, from wait4) of a `taskq submit`
process, of a `--batch` line and of a burst's task in the daemon (its
supervisors and commands included): figures the load moves less than wall
time.
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

HERE = Path(__file__).resolve().parent
FIGURE = re.compile(r"^  (?P<what>[^:]+): (?P<ours>[0-9][0-9,.]*) ?(?P<unit>ms|s|/s)?")
REFERENCE = re.compile(
    r" vs (?P<ref>[0-9][0-9,.]*) ?(?P<unit>ms|s|/s)?(?: \([^)]*\))? (?P<name>[^(]*)"
)


def figures(output: str) -> dict[str, tuple[float, str]]:
    """The first number of each live line run.py printed, and of its reference, by name."""
    found: dict[str, tuple[float, str]] = {}
    for line in output.splitlines():
        m = FIGURE.match(line)
        if m is None:
            continue
        found.setdefault(m["what"], (float(m["ours"].replace(",", "")), m["unit"] or ""))
        ref = REFERENCE.search(line)
        if ref:
            name = f"(reference) {ref['name'].strip()}"
            found.setdefault(name, (float(ref["ref"].replace(",", "")), ref["unit"] or ""))
    return found


def one_run(
    python: str, only: list[str], quick: bool
) -> tuple[dict[str, tuple[float, str]], float]:
    load = os.getloadavg()[0]
    found = {}
    if only:
        out = subprocess.run(
            [python, str(HERE / "run.py"), "--rounds", "1", "--only", *only]
            + (["--quick"] if quick else []),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        found = figures(out)
    with tempfile.TemporaryDirectory(prefix="taskq-versus-") as tmp:
        found.update(cpu_figures(python, Path(tmp), quick))
    return found, load


def _cpu(python: str, spool: Path, *args: str, data: bytes | None = None) -> float:
    """CPU seconds (user + system) of one taskq process and the children it reaped."""
    env = {**os.environ, "TASKQ_SPOOL": str(spool)}
    proc = subprocess.Popen(
        [python, "-m", "taskq", *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None
    if data is not None:
        proc.stdin.write(data)
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"taskq {args[0]} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def cpu_figures(python: str, tmp: Path, quick: bool) -> dict[str, tuple[float, str]]:
    """CPU, not wall, of a submit, a batch line and a burst task: less moved by the load."""
    singles = [
        _cpu(python, tmp / "s", "submit", "--in", f"{3600 + i}s", "--", "true")
        for i in range(10 if quick else 30)
    ]
    n = 2000 if quick else 10_000
    lines = b"".join(
        json.dumps({"command": ["true"], "in": 3600 + i * 8.64}).encode() + b"\n" for i in range(n)
    )
    batch = _cpu(python, tmp / "b", "submit", "--batch", "-", data=lines)
    burst = _burst_cpu(python, tmp / "burst", n)
    return {
        "(CPU) one `taskq submit` process, median": (statistics.median(singles) * 1e3, "ms"),
        "(CPU) `taskq submit --batch`, per line": (batch / n * 1e6, "us"),
        "(CPU) burst: the daemon and its reaped children, per task": (burst / n * 1e6, "us"),
    }


def _burst_cpu(python: str, spool: Path, n: int) -> float:
    """The daemon's CPU (its attempts' supervisors and commands included) for n due tasks."""
    due = time.time() + 2
    line = json.dumps({"command": ["true"], "run_at": due}).encode() + b"\n"
    _cpu(python, spool, "submit", "--batch", "-", data=line * n)
    env = {**os.environ, "TASKQ_SPOOL": str(spool)}
    proc = subprocess.Popen(
        [python, "-m", "taskq", "daemon", "--workers", "16"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 900
    while _done(spool) < n:
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the burst did not finish")
        time.sleep(0.1)
    proc.terminate()
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime


def _done(spool: Path) -> int:
    done = spool / "done"
    return sum(len(os.listdir(d)) for d in done.iterdir()) if done.exists() else 0


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.2f} ({min(xs):,.2f}-{max(xs):,.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--only", nargs="*", default=["submit", "burst"], help="run.py's sections (none: CPU only)"
    )
    parser.add_argument("--quick", action="store_true", help="run.py's smaller sizes")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, tuple[float, str]]]] = {"before": [], "after": []}
    loads: list[float] = []
    for n in range(args.rounds):
        order = ["before", "after"] if n % 2 == 0 else ["after", "before"]
        for name in order:
            got, load = one_run(getattr(args, name), args.only, args.quick)
            runs[name].append(got)
            loads.append(load)
            print(f"round {n + 1} {name} (load {load:.1f}): {got}", file=sys.stderr, flush=True)
    print(f"{args.rounds} rounds, load average {min(loads):.1f}-{max(loads):.1f}")
    print("measure | before | after | after/before")
    for what, (_, unit) in runs["before"][0].items():
        b = [r[what][0] for r in runs["before"]]
        a = [r[what][0] for r in runs["after"]]
        ratio = [x / y for x, y in zip(a, b, strict=True) if y]
        print(f"{what} ({unit}) | {spread(b)} | {spread(a)} | {spread(ratio) if ratio else '-'}")


if __name__ == "__main__":
    main()
