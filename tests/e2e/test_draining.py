"""Many tasks due at once: fair draining across queues and per-queue caps."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, wait_for

from taskq.client.submit import submit
from taskq.spool.layout import Spool
from taskq.spool.task import DEFAULT_PATH, TaskBody, new_id
from taskq.times.timespec import SECOND

StartDaemon = Callable[..., Daemon]


def put(tq: Taskq, queue: str, run_at: int, script: str) -> str:
    """Submit through the library (fast), as the CLI would."""
    now = time.time_ns() // 1000
    body = TaskBody(
        id=new_id(now),
        argv=["sh", "-c", script],
        run_at=run_at,
        submitted_at=now,
        cwd="/",
        env={"PATH": DEFAULT_PATH},
        queue=queue,
    )
    spool = Spool(str(tq.spool))
    spool.init()
    return submit(spool, body)[0].id


def log_line(log: Path, extra: str = "") -> str:
    """A script that appends 'QUEUE START END' to log, doing `extra` in between."""
    return f's=$(date +%s.%N); {extra} echo "$TASKQ_QUEUE $s $(date +%s.%N)" >> {log}'


def lines(log: Path) -> list[tuple[str, float, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        queue, start, end = line.split()
        out.append((queue, float(start), float(end)))
    return out


@pytest.mark.slow
def test_a_burst_in_one_queue_does_not_starve_another(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    past = time.time_ns() // 1000 - 60 * SECOND
    for _ in range(100):
        put(tq, "bulk", past, log_line(log, "sleep 0.02;"))
    for _ in range(10):  # due a second after the whole burst
        put(tq, "urgent", past + SECOND, log_line(log, "sleep 0.02;"))
    start_daemon("--workers", "2")
    wait_for(lambda: len(lines(log)) == 110, 60, "all 110 tasks to run")
    order = [q for q, _, _ in sorted(lines(log), key=lambda r: r[1])]
    last_urgent = max(i for i, q in enumerate(order) if q == "urgent")
    assert last_urgent < 30, order[:40]  # strict run_at order would put it at 109


@pytest.mark.slow
def test_queue_limit_caps_concurrency(tq: Taskq, start_daemon: StartDaemon, tmp_path: Path) -> None:
    log = tmp_path / "log"
    now = time.time_ns() // 1000
    for _ in range(4):
        put(tq, "slow", now, log_line(log, "sleep 0.3;"))
        put(tq, "fast", now, log_line(log, "sleep 0.3;"))
    start_daemon("--workers", "4", "--queue-limit", "slow=1")
    wait_for(lambda: len(lines(log)) == 8, 30, "all 8 tasks to run")
    slow = sorted((s, e) for q, s, e in lines(log) if q == "slow")
    for (_, end), (start, _) in itertools.pairwise(slow):
        assert start >= end, f"two slow tasks overlapped: {slow}"
    fast = [(s, e) for q, s, e in lines(log) if q == "fast"]
    assert any(s < slow[0][1] for s, _ in fast), "fast tasks should run beside the slow one"


def test_bad_queue_limit_is_refused(tq: Taskq) -> None:
    proc = tq.run("daemon", "--queue-limit", "slow", check=False)
    assert proc.returncode == 2 and b"bad --queue-limit" in proc.stderr


@pytest.mark.slow
def test_daemons_share_a_burst_instead_of_hoarding(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    """Each daemon claims only what its free workers can start."""
    log = tmp_path / "log"
    first = start_daemon("--workers", "1", "--host-id", "one")
    start_daemon("--workers", "1", "--host-id", "two")
    due = time.time_ns() // 1000 + SECOND
    ids = [put(tq, "default", due, log_line(log, "sleep 0.4;")) for _ in range(6)]
    peak: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while len(lines(log)) < 6:
        assert time.monotonic() < deadline, "the burst did not finish"
        for entry in (tq.spool / "claimed").iterdir():
            host = entry.name.rsplit("_", 1)[1]
            count = sum(1 for e in (tq.spool / "claimed").iterdir() if e.name.endswith("_" + host))
            peak[host] = max(peak.get(host, 0), count)
        time.sleep(0.01)
    assert max(peak.values()) == 1, peak
    hosts = [
        next(
            r["host"]
            for r in json.loads(tq.run("show", "--json", i).stdout)["attempts"]
            if r["event"] == "start"
        )
        for i in ids
    ]
    assert hosts.count("one") >= 2 and hosts.count("two") >= 2, hosts
    assert first.proc.poll() is None
