"""--priority through real daemons: higher first among the due tasks of a queue,
never before their time, without taking another queue's turn; with three
daemons and one killed -9, every task runs once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, kill_all, wait_for

pytestmark = pytest.mark.slow  # real daemons, seconds each

StartDaemon = Callable[..., Daemon]


def _cmd(stamps: Path, extra: str = "; sleep 0.2") -> list[str]:
    """Record 'ID QUEUE START' at the start of each run."""
    line = '"$TASKQ_ID $TASKQ_QUEUE $(date +%s.%N)"'
    return ["sh", "-c", f"echo {line} >> {stamps}{extra}"]


def _starts(stamps: Path) -> list[tuple[str, str, float]]:
    if not stamps.exists():
        return []
    rows = [line.split() for line in stamps.read_text().splitlines()]
    return sorted(((t, q, float(s)) for t, q, s in rows), key=lambda r: r[2])


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def test_higher_first_among_the_due_fair_across_queues(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    due = time.time() + 3
    prio: dict[str, int] = {}
    for p in [0, 5, -3, 9, 5, 0, 9, 1]:
        task = tq.submit("--at", _iso(due), "--priority", str(p), "--", *_cmd(stamps))
        prio[task] = p
    later = tq.submit("--at", _iso(due + 60), "--priority", "1000", "--", *_cmd(stamps))
    other = [tq.submit("--at", _iso(due), "--queue", "b", "--", *_cmd(stamps)) for _ in range(2)]
    start_daemon("--workers", "1")
    wait_for(lambda: len(_starts(stamps)) >= 10, 60, "the due tasks to run")
    started = _starts(stamps)
    assert all(s >= due for _, _, s in started)  # never early
    assert later not in {t for t, _, _ in started}  # a high priority does not make it due
    order = [prio[t] for t, q, _ in started if q == "default"]
    assert order == sorted(prio.values(), reverse=True)
    positions = [i for i, (t, _, _) in enumerate(started) if t in other]
    assert positions[0] <= 1 and positions[1] <= 3  # queue b keeps its turns
    # equal priorities run oldest first (ids are in submission order)
    nines = [t for t, q, _ in started if q == "default" and prio[t] == 9]
    assert nines == sorted(nines)


def test_priorities_across_three_daemons_with_kill_9_run_each_once(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    due = time.time() + 4
    lines = [
        json.dumps({"command": _cmd(stamps, "; sleep 0.3"), "priority": p, "run_at": _iso(due)})
        for p in [i % 7 for i in range(24)]
    ]
    batch = tmp_path / "batch.ndjson"
    batch.write_text("\n".join(lines) + "\n")
    ids = tq.run("submit", "--batch", str(batch)).stdout.decode().split()
    prio = {t: i % 7 for i, t in enumerate(ids)}
    lease = ("--lease", "3s", "--rescan", "1s", "--workers", "1")
    daemons = [start_daemon(*lease, host=f"h{i}") for i in range(3)]
    wait_for(lambda: len(_starts(stamps)) >= 4, 60, "the first runs")
    daemons[0].kill()  # SIGKILL
    daemons[0] = start_daemon(*lease, host="h0")
    wait_for(lambda: {t for t, _, _ in _starts(stamps)} >= set(ids), 120, "every task to run")
    for task in ids:
        tq.wait_state(task, ("done",), 60)
    kill_all(daemons)
    started = _starts(stamps)
    assert all(s >= due for _, _, s in started)
    runs = [t for t, _, _ in started]
    reruns = [t for t in set(runs) if runs.count(t) > 1]
    for task in reruns:  # only a run cut by the kill runs again (the documented duplicate)
        attempts = [r for r in tq.show(task)["attempts"] if r.get("event") == "start"]
        assert len(attempts) == runs.count(task)
    assert set(runs) == set(ids)
    first_half = [prio[t] for t in dict.fromkeys(runs)][: len(ids) // 2]
    assert sum(first_half) > sum(prio.values()) / 2  # the higher ones went first


def test_the_priorities_file_is_part_of_the_spool(tq: Taskq) -> None:
    task = tq.submit("--in", "1h", "--priority", "7", "--", "true")
    assert (tq.spool / "priorities").is_file() and tq.show(task)["priority"] == 7
    assert b"\npriority:  7\n" in tq.run("show", task).stdout
    out = tq.run("fsck").stdout.decode()
    assert "priorities" not in out and (tq.spool / "priorities").is_file()
    refused = tq.run("submit", "--priority", "1001", "--", "true", check=False)
    assert refused.returncode == 2
