"""Profile the daemon's burst path with py-spy: where does one attempt's time go?

Submits N `true` tasks due at one instant, runs `taskq daemon --workers 16`
under py-spy (sampling the running daemon by pid, idle time included) until
all are done, and prints the CPU time one attempt cost the daemon, its
keeper and the command (from /proc/PID/stat; the keeper reaps the
commands), and beside it what Python's Popen spends per `true` (in its own
process and in the command), then where the loop's thread spent its wall
time: the share of samples per function, inclusive and own.
Needs py-spy (the bench extra).

    python bench/profile_burst.py [-n 3000] [--raw FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--raw", help="also keep py-spy's collapsed stacks in this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskq-profile-") as tmp:
        raw = Path(args.raw or Path(tmp) / "stacks.txt")
        env = {**os.environ, "TASKQ_SPOOL": f"{tmp}/spool"}
        daemon = subprocess.Popen(
            [BIN / "taskq", "daemon", "--workers", "16"], env=env, stderr=subprocess.DEVNULL
        )
        due = time.time() + 3
        line = json.dumps({"command": ["true"], "run_at": f"@{due:.6f}"}) + "\n"
        subprocess.run(
            [BIN / "taskq", "submit", "--batch", "-"],
            input=(line * args.n).encode(),
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        spy_argv = [BIN / "py-spy", "record", "-r", "250", "--nonblocking", "--idle", "-f", "raw"]
        spy = subprocess.Popen(
            [*spy_argv, "-o", raw, "--pid", str(daemon.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        done = Path(tmp) / "spool" / "done"
        while time.time() < due:
            time.sleep(0.01)
        keeper = _keeper(daemon.pid)
        before = _cpu(daemon.pid), _cpu(keeper)
        while sum(len(os.listdir(d)) for d in done.glob("*")) < args.n:
            time.sleep(0.2)
        after = _cpu(daemon.pid), _cpu(keeper)
        print(f"{args.n} tasks done {time.time() - due:.2f} s after their run_at")
        ours = [(b - a) / args.n * 1000 for a, b in zip(before[0], after[0], strict=True)]
        kept = [(b - a) / args.n * 1000 for a, b in zip(before[1], after[1], strict=True)]
        print(
            f"CPU per attempt: the daemon {ours[0]:.2f} ms in user space, {ours[1]:.2f} ms in "
            f"the kernel; its keeper {kept[0]:.2f} + {kept[1]:.2f} ms; the commands (the "
            f"keeper's children) {kept[2] + kept[3]:.2f} ms"
        )
        spy.send_signal(2)
        spy.wait(60)
        own, command = _popen_cpu(args.n)
        print(
            f"Python Popen with 16 in flight, per `true`: {own:.2f} ms in Popen's process, "
            f"{command:.2f} ms in the command"
        )
        daemon.terminate()
        daemon.wait(60)
        summarise(raw)


def _cpu(pid: int | None) -> list[float]:
    """utime, stime, and the reaped children's cutime and cstime of a process, in seconds."""
    if pid is None:
        return [0.0] * 4
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [int(x) / os.sysconf("SC_CLK_TCK") for x in fields[11:15]]


def _keeper(daemon: int) -> int | None:
    """The daemon's keeper: its child that runs taskq.daemon.keeper (started by now)."""
    deadline = time.time() + 30
    while time.time() < deadline:
        children = Path(f"/proc/{daemon}/task/{daemon}/children").read_text().split()
        for pid in children:
            try:
                if b"taskq.daemon.keeper" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
            except OSError:
                continue
        time.sleep(0.05)
    return None


def _popen_cpu(n: int) -> tuple[float, float]:
    """CPU per `true` of Python starting n with 16 in flight: its own, the commands' (ms)."""
    before, children = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    running: list[subprocess.Popen[bytes]] = []
    for _ in range(n):
        if len(running) >= 16:
            running.pop(0).wait()
        running.append(subprocess.Popen(["true"]))
    for proc in running:
        proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    return (time.process_time() - before) / n * 1000, spent / n * 1000


def summarise(raw: Path) -> None:
    """Shares of the loop thread's wall time (idle included: fsyncs, sleeps, waits).

    Inclusive: samples with the function anywhere on the stack. Own: samples
    whose deepest taskq frame is that line (its system calls included).
    """
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    n = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "Daemon.run" not in stack:
            continue  # another thread: the exporter, the housekeeper, watchdog's
        n += int(count)
        frames = [f for f in stack.split(";") if "taskq/" in f]
        for frame in set(frames):
            inclusive[frame] += int(count)
        if frames:
            own[frames[-1]] += int(count)
    print(f"{n} samples of the loop's thread, idle included; share of them in each function:")
    for frame, count in inclusive.most_common(30):
        print(f"  {count / n * 100:5.1f}%  {frame}")
    print("own share (the deepest taskq frame, with what it calls outside taskq):")
    for frame, count in own.most_common(20):
        print(f"  {count / n * 100:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
