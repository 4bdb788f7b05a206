"""The spool's count for the metrics, made by a child process so that it never holds up the loop.

Counting a large spool is seconds of Python, and a thread of the daemon's
own would hold the interpreter's lock for most of them: every time the loop
gave it up for a system call it would wait up to the switch interval to get
it back, and starts would be late (measured with 100,000 tasks stored,
bench/metrics_load.py: lateness p50 7.1 ms and p99 78 ms with a counting
thread, against 1.4 ms and 4.2 ms without metrics; 1.5 ms and 3.2 ms with
this child). So one
long-lived child, `python -m taskq.observe.counting SPOOL HOST`, at a lower
priority (nice 10), answers each request (a line: now, in µs) with a line:
`taskq stats`'s report, as JSON. It exits when its standard input closes,
so it never outlives its daemon; if it dies, the next request starts another.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import IO, Any

from taskq.observe import stats
from taskq.spool.layout import Spool

NICE = 10


class Counter:
    """The daemon's side: one child, asked for a report and waited for in turn."""

    def __init__(self, spool_root: str, host: str) -> None:
        self.argv = [sys.executable, "-m", "taskq.observe.counting", spool_root, host]
        self._proc: subprocess.Popen[str] | None = None

    def count(self, now: int) -> dict[str, Any]:
        """The stats report as of now (µs); OSError if the child cannot give one."""
        proc = self._child()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(f"{now}\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.close()
            raise OSError("the counting process ended")
        report: dict[str, Any] = json.loads(line)
        if "error" in report:
            raise OSError(report["error"])
        return report

    def _child(self) -> subprocess.Popen[str]:
        if self._proc is None:
            # close_fds (the default): it inherits none of the daemon's descriptors.
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        return self._proc

    def close(self) -> None:
        """Close its input (it exits) and reap it; the loop may have reaped it already."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve(spool: Spool, host: str, requests: IO[str], replies: IO[str]) -> None:
    """The child's side: a report for each request, until the requests end."""
    for line in requests:
        try:
            report = stats.collect(spool, int(line), host)
        except Exception as e:  # the daemon logs it and asks again later
            report = {"error": f"cannot count the spool's tasks: {e}"}
        replies.write(json.dumps(report) + "\n")
        replies.flush()


def main() -> None:
    os.nice(NICE)
    spool_root, host = sys.argv[1], sys.argv[2]
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        serve(Spool(spool_root), host, sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
