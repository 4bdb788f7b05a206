"""Profile the daemon's burst path with py-spy: where does one attempt's time go?

Submits N `true` tasks due at one instant, runs `taskq daemon --workers 16`
under py-spy (sampling the running daemon by pid, idle time included) until
all are done, and prints the CPU time one attempt cost the daemon and the
attempt's processes (from /proc/PID/stat), then where the loop's thread
spent its wall time: the share of samples per function, inclusive and own.
Needs py-spy (the bench extra).

    python bench/profile_burst.py [-n 3000] [--raw FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
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
        before = _cpu(daemon.pid)
        while sum(len(os.listdir(d)) for d in done.glob("*")) < args.n:
            time.sleep(0.2)
        after = _cpu(daemon.pid)
        print(f"{args.n} tasks done {time.time() - due:.2f} s after their run_at")
        per = [(b - a) / args.n * 1000 for a, b in zip(before, after, strict=True)]
        print(
            f"CPU per attempt: the daemon {per[0]:.2f} ms in user space, {per[1]:.2f} ms in "
            f"the kernel; the attempts' processes {per[2] + per[3]:.2f} ms"
        )
        spy.send_signal(2)
        spy.wait(60)
        daemon.terminate()
        daemon.wait(60)
        summarise(raw)


def _cpu(pid: int) -> list[float]:
    """utime, stime, and the reaped children's cutime and cstime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [int(x) / os.sysconf("SC_CLK_TCK") for x in fields[11:15]]


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
