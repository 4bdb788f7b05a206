"""Daemons sharing a spool spread their claims: a burst costs about one claim rename per task.

Before the claim order, every daemon tried the tasks of a burst in the same
(run_at, id) order, so K daemons lost about K-1 claims per task run. The
daemons count the claims they win and lose (their last log line,
`taskq status`, the metrics); these tests read those counts and the tasks'
own start stamps.
"""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, read_stamps, stamp_cmd, wait_for

StartDaemon = Callable[..., Daemon]
STOPPED = re.compile(r"claims (\d+) won, (\d+) lost")


def burst(tq: Taskq, stamps: Path, n: int, due: float) -> dict[str, str]:
    """n tasks due at `due`, alternating between queues a and b; their queues by id."""
    lines = [
        json.dumps({"command": stamp_cmd(stamps), "run_at": f"@{due:.6f}", "queue": "ab"[i % 2]})
        for i in range(n)
    ]
    ids = tq.run("submit", "--batch", "-", input="\n".join(lines).encode()).stdout.split()
    return {task_id.decode(): "ab"[i % 2] for i, task_id in enumerate(ids)}


def share_a_burst(tq: Taskq, start_daemon: StartDaemon, stamps: Path, k: int, n: int) -> None:
    daemons = [
        start_daemon("--workers", "8", "--clock-check", "1s", host=f"spread{i}") for i in range(k)
    ]
    # Every daemon has written its health record, and read the others' (every 2 s).
    wait_for(lambda: len(list((tq.spool / "run").glob("*.status"))) == k, 60, "k records")
    time.sleep(3)
    due = time.time() + 2
    queue_of = burst(tq, stamps, n, due)
    wait_for(lambda: len(read_stamps(stamps)) >= n, 300, f"{n} tasks to start")
    status = wait_for(
        lambda: (out := tq.run("status").stdout.decode()).count(" won, ") == k and out,
        60,
        "every daemon's record to show its claims",
    )
    assert re.search(r"claims [1-9]\d* won, \d+ lost", status), status
    won = lost = 0
    for d in daemons:
        assert d.stop() == 0
        m = STOPPED.search(d.text())
        assert m, d.text()[-500:]
        won, lost = won + int(m.group(1)), lost + int(m.group(2))
    rows = read_stamps(stamps)
    runs = collections.Counter(t for t, _, _ in rows)
    assert set(runs) == set(queue_of) and set(runs.values()) == {1}
    assert won == n
    assert lost / n <= 0.2, f"{lost} claims lost for {n} tasks run by {k} daemons"
    assert min(s for _, _, s in rows) >= due, "none early"
    first = [queue_of[t] for t, _, _ in sorted(rows, key=lambda r: r[2])[: n // 4]]
    assert min(first.count("a"), first.count("b")) >= n // 16, "both queues take turns"


@pytest.mark.slow
def test_three_daemons_lose_few_claims_in_a_burst(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    share_a_burst(tq, start_daemon, stamps, 3, 600)


@pytest.mark.slow
def test_eight_daemons_lose_few_claims_in_a_burst(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    share_a_burst(tq, start_daemon, stamps, 8, 900)
