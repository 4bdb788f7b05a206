"""Durability order, read off the system calls (strace): sync before acknowledging.

`taskq submit` must fsync the body, rename it into its bucket, and fsync the
bucket and pending/ before it prints the id; the daemon must make a task's
start transition durable before it execs the task.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import TASKQ, Taskq

pytestmark = pytest.mark.skipif(
    shutil.which("strace") is None, reason="strace (Debian package strace) is missing"
)
CALLS = "trace=openat,fsync,fdatasync,syncfs,rename,renameat,renameat2,link,write,execve"


def traced(tq: Taskq, trace: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    return subprocess.Popen(
        ["strace", "-f", "-qq", "-y", "-s", "256", "-e", CALLS, "-o", str(trace), *TASKQ, *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def ended(lines: list[str], i: int) -> int:
    """The line where the call on line i returned: strace -f splits a call another process's
    calls interrupt into "<unfinished ...>" and "<... NAME resumed>" lines."""
    if "<unfinished ...>" not in lines[i]:
        return i
    pid, call = lines[i].split()[0], lines[i].split()[1].partition("(")[0]
    return first(lines, rf"^{pid}\s+<\.\.\. {call} resumed>", i)


def first(lines: list[str], pattern: str, after: int = -1) -> int:
    """The index of the first line after `after` matching pattern; fail if none."""
    for i, line in enumerate(lines):
        if i > after and re.search(pattern, line):
            return i
    pytest.fail(f"no system call matching {pattern!r} after line {after}")


def test_submit_syncs_before_it_prints_the_id(tq: Taskq, tmp_path: Path) -> None:
    tq.submit("--", "true")  # the spool exists already
    trace = tmp_path / "trace"
    proc = traced(tq, trace, "submit", "--in", "1h", "--", "true")
    out, _ = proc.communicate(timeout=60)
    task_id = out.decode().strip()
    lines = trace.read_text().splitlines()
    sync_body = first(lines, rf"fsync\(\d+<[^>]*/tmp/{task_id}\.task>\)")
    rename = first(
        lines,
        rf'rename(at2?)?\(.*"[^"]*/tmp/{task_id}\.task".*"[^"]*/pending/\d{{12}}/[^"]*{task_id}',
        sync_body,
    )
    sync_bucket = first(lines, r"fsync\(\d+<[^>]*/pending/\d{12}>\)", rename)
    sync_pending = first(lines, r"fsync\(\d+<[^>]*/pending>\)", rename)
    ack = first(lines, rf'write\(1<[^>]*>, "{task_id}\\n"', max(sync_bucket, sync_pending))
    assert sync_body < rename < sync_bucket < ack and sync_pending < ack


def test_batch_syncs_before_it_prints_any_id(tq: Taskq, tmp_path: Path) -> None:
    tq.submit("--", "true")
    trace = tmp_path / "trace"
    proc = traced(tq, trace, "submit", "--batch", "-")
    out, _ = proc.communicate(b'{"command": ["true"]}\n{"command": ["true"], "in": "1h"}\n', 60)
    ids = out.decode().split()
    lines = trace.read_text().splitlines()
    last_rename = max(first(lines, rf"rename(at2?)?\(.*{i}") for i in ids)
    final_sync = first(lines, r"syncfs\(", last_rename)
    ack = first(lines, rf'write\(1<[^>]*>, "{ids[0]}', final_sync)
    assert last_rename < final_sync < ack


@pytest.mark.slow
def test_daemon_makes_the_start_durable_before_exec(tq: Taskq, tmp_path: Path) -> None:
    task_id = tq.submit("--in", "1.5s", "--", "true")
    trace = tmp_path / "trace"
    daemon = traced(tq, trace, "daemon", "--host-id", "traced")
    try:
        tq.wait_state(task_id, ("done",), timeout=30)
    finally:
        # Signal the daemon itself (its lock names its pid), not strace.
        for lock in (tq.spool / "run").glob("traced_*.lock"):
            os.kill(int(lock.name[len("traced_") : -len(".lock")]), signal.SIGTERM)
        daemon.communicate(timeout=30)
    lines = trace.read_text().splitlines()
    claim = first(
        # from the bucket's descriptor (strace -y shows its path), or by path
        lines,
        rf'renameat2\(.*/pending/\d{{12}}[/>][^"]*"?[^"]*{task_id}[^"]*".*/claimed/[^"]*_claimed_',
    )
    start = first(lines, rf'renameat2\(.*{task_id}[^"]*_claimed_.*{task_id}[^"]*_started_', claim)
    sync = ended(lines, first(lines, r"fsync\(\d+<[^>]*/claimed>(\)| <unfinished)", start))
    # The command's own exec, whoever makes it (the keeper, or an sh supervisor).
    execve = first(lines, r'execve\("[^"]*/true", \["true"\]', start)
    while not lines[ended(lines, execve)].endswith(" = 0"):  # a PATH entry without it
        execve = first(lines, r'execve\("[^"]*/true", \["true"\]', execve)
    assert claim < start < sync < execve
    done = first(lines, rf'renameat2\(.*{task_id}[^"]*_started_.*/done/\d{{8}}[/>]', execve)
    first(lines, r"fsync\(\d+<[^>]*/done/\d{8}>\)", done)
