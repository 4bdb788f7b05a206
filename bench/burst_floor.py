"""The floor of a burst: the spool's own file work per attempt, with no scheduler around it.

One Python loop, as the daemon's is, runs N `true` commands with 16 in
flight and does for each only what taskq's guarantees need of the
filesystem and the process table, nothing else: claim (rename out of the
bucket), read and parse the body, start (rename in claimed/, made durable
by one fsync per turn before any exec), make the log directory, create and
lock the status file and create the output file, spawn the command under
the same `sh` supervisor as taskq (runner.SUPERVISOR), read its start time
from /proc, append a start record to its journal; then, at its end, read
its status, append an end record and move it to done/ (durable at the next
turn). It checks no names, parses nothing but the body, logs nothing.

It prints this loop's rate, the same loop's with the command exec'd
directly (no supervisor, so no exit status survives a crash), and Python
Popen's with 16 in flight, alternating, in one run. Whatever taskq's own
loop adds comes on top of the first figure.

    python bench/burst_floor.py [-n 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from taskq.daemon.runner import SUPERVISOR

WIDTH = 16
BODY = json.dumps({"version": 1, "argv": ["true"], "cwd": "/", "env": {"PATH": "/usr/bin:/bin"}})


def popen_rate(n: int, width: int) -> float:
    """How fast Python starts `true` with `width` processes in flight."""
    t0 = time.perf_counter()
    running: list[subprocess.Popen[bytes]] = []
    for _ in range(n):
        if len(running) >= width:
            running.pop(0).wait()
        running.append(subprocess.Popen(["true"]))
    for p in running:
        p.wait()
    return n / (time.perf_counter() - t0)


def floor_rate(root: Path, n: int, supervised: bool) -> float:
    """Attempts started per second by the bare loop, over n tasks due at once."""
    dirs = {d: root / d for d in ("pending", "claimed", "done", "logs")}
    for d in dirs.values():
        d.mkdir(parents=True)
    for i in range(n):
        (dirs["pending"] / f"t{i}").write_text(BODY)
    os.sync()
    running: dict[int, int] = {}  # pid -> task number
    started = 0
    t0 = time.perf_counter()
    while started < n or running:
        turn = []
        while started < n and len(running) + len(turn) < WIDTH:
            turn.append(_claim(dirs, started))
            started += 1
        if turn:
            _fsync(dirs["claimed"])  # the starts are durable before any exec
        for i in turn:
            running[_spawn(dirs, i, supervised)] = i
        pid, _ = os.waitpid(-1, 0)
        ended = [running.pop(pid)]
        while running:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            ended.append(running.pop(pid))
        for i in ended:
            _finish(dirs, i)
        _fsync(dirs["done"])
        _fsync(dirs["claimed"])
    return n / (time.perf_counter() - t0)


def _claim(dirs: dict[str, Path], i: int) -> int:
    os.rename(dirs["pending"] / f"t{i}", dirs["claimed"] / f"t{i}_claimed")
    with open(dirs["claimed"] / f"t{i}_claimed", "rb") as f:
        json.loads(f.read())
    os.rename(dirs["claimed"] / f"t{i}_claimed", dirs["claimed"] / f"t{i}_started")
    return i


def _spawn(dirs: dict[str, Path], i: int, supervised: bool) -> int:
    log = dirs["logs"] / f"t{i}"
    os.mkdir(log)
    status = os.open(log / "1.status", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(status, fcntl.LOCK_EX | fcntl.LOCK_NB)
    out = os.open(log / "1.out", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    argv = ["sh", "-c", SUPERVISOR, "taskq-attempt", "3", "/", "-", "true"]
    if not supervised:
        argv = ["true"]
    actions = [(os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, out, 2)]
    if supervised:
        actions.append((os.POSIX_SPAWN_DUP2, status, 3))
    path = "/bin/sh" if supervised else "/bin/true"
    pid = os.posix_spawn(path, argv, {"PATH": "/usr/bin:/bin"}, file_actions=actions, setsid=True)
    os.close(status)
    os.close(out)
    with open(f"/proc/{pid}/stat", "rb") as f:
        f.read()
    _journal(log, {"event": "start", "pid": pid, "time": time.time()})
    return pid


def _finish(dirs: dict[str, Path], i: int) -> None:
    log = dirs["logs"] / f"t{i}"
    with open(log / "1.status", "rb") as f:
        f.read()
    _journal(log, {"event": "end", "status": 0, "time": time.time()})
    day = dirs["done"] / "20261201"
    day.mkdir(exist_ok=True)
    os.rename(dirs["claimed"] / f"t{i}_started", day / f"t{i}")


def _journal(log: Path, record: dict[str, object]) -> None:
    fd = os.open(log / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.write(fd, json.dumps(record).encode() + b"\n")
    os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"floor": [], "floor, no sh": [], "Popen": []}
    with tempfile.TemporaryDirectory(prefix="taskq-floor-") as tmp:
        for k in range(args.rounds):
            rates["floor"].append(floor_rate(Path(tmp) / f"a{k}", args.n, supervised=True))
            rates["floor, no sh"].append(floor_rate(Path(tmp) / f"b{k}", args.n, False))
            rates["Popen"].append(popen_rate(args.n, WIDTH))
            print(f"round {k + 1}: " + ", ".join(f"{m} {r[-1]:,.0f}/s" for m, r in rates.items()))
    popen = statistics.median(rates["Popen"])
    for measure, values in rates.items():
        median = statistics.median(values)
        print(f"{measure:>13}: {median:,.0f}/s median, {median / popen:.2f}x Popen")


if __name__ == "__main__":
    main()
