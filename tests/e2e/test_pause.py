"""Paused queues (taskq pause/resume), through real daemons and the real CLI."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest
from conftest import Daemon, Taskq, wait_for

from taskq.spool import journal
from taskq.times.clock import wall_us
from taskq.times.timespec import SECOND
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]


def _starts(tq: Taskq, ids: list[str]) -> list[tuple[int, str]]:
    """(start time, id) of each task's first attempt, from the journals."""
    out = []
    for task_id in ids:
        for r in journal.read(str(tq.spool / "logs" / task_id)):
            if r["event"] == "start":
                out.append((parse_when(r["time"], 0), task_id))
    return sorted(out)


def _done(tq: Taskq) -> set[str]:
    done = tq.spool / "done"
    if not done.exists():
        return set()
    return {n.split("_")[1] for day in done.iterdir() for n in os.listdir(day)}


def _batch(tq: Taskq, queue: str, n: int) -> list[str]:
    lines = "".join(json.dumps({"command": ["true"], "queue": queue}) + "\n" for _ in range(n))
    return tq.run("submit", "--batch", "-", input=lines.encode()).stdout.decode().split()


@pytest.mark.slow
def test_a_paused_queue_with_1000_tasks_waits_then_drains_fairly(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    start_daemon("--workers", "4", host="one")
    start_daemon("--workers", "4", host="two")  # every daemon honours the pause
    assert tq.run("pause", "bulk", "side").stdout.decode().splitlines() == [
        "paused bulk until resumed",
        "paused side until resumed",
    ]
    bulk = _batch(tq, "bulk", 1000)
    side = _batch(tq, "side", 50)
    probe = tq.submit("--queue", "other", "--", "true")
    tq.wait_state(probe, ("done",))  # the daemons dispatch, and ran none of the paused
    stats = json.loads(tq.run("stats", "--json").stdout)
    assert stats["counts"]["pending"] == {"bulk": 1000, "side": 50}
    assert [p["queue"] for p in stats["paused"]] == ["bulk", "side"]
    assert "paused: queue bulk until resumed" in tq.run("stats").stdout.decode()
    assert "paused: queue side until resumed" in tq.run("status").stdout.decode()
    assert _starts(tq, bulk + side) == []
    tq.run("resume", "bulk", "side")
    wait_for(lambda: _done(tq) >= {*bulk, *side}, 180, "all 1,050 tasks done")
    order = [task_id in side for _, task_id in _starts(tq, bulk + side)]
    # Round robin: the 50 side tasks start among the first ~100, not after the 1,000.
    assert sum(order[:150]) >= 45, order[:150]
    assert json.loads(tq.run("stats", "--json").stdout)["paused"] == []


@pytest.mark.slow
def test_a_pause_until_lapses_by_itself(tq: Taskq, start_daemon: StartDaemon) -> None:
    start_daemon()
    until = wall_us() + 3 * SECOND
    shown = tq.run("pause", "q", "--until", f"@{until / SECOND:.6f}").stdout.decode()
    assert shown.startswith("paused q until 20")
    task = tq.submit("--queue", "q", "--", "true")
    tq.wait_state(task, ("done",), timeout=60)
    ((started, _),) = _starts(tq, [task])
    assert started >= until  # never before the pause ended
    assert json.loads(tq.run("stats", "--json").stdout)["paused"] == []


@pytest.mark.slow
def test_expires_still_applies_while_paused(tq: Taskq, start_daemon: StartDaemon) -> None:
    start_daemon("--rescan", "500ms")
    tq.run("pause", "q")
    task = tq.submit("--queue", "q", "--expires", "1s", "--", "true")
    doc = tq.wait_state(task, ("failed",), timeout=60)
    assert doc["expired"] is True and _starts(tq, [task]) == []
    assert "paused: queue q" in tq.run("status").stdout.decode()  # still paused


def test_bad_pause_requests_change_nothing(tq: Taskq) -> None:
    bad = tq.run("pause", "no_underscores", check=False)
    assert bad.returncode == 2 and bad.stderr.decode().count("\n") == 1
    past = tq.run("pause", "q", "--until", "@1000", check=False)
    assert past.returncode == 2 and b"not in the future" in past.stderr
    assert not (tq.spool / "paused").exists() or os.listdir(tq.spool / "paused") == []
    tq.submit("--in", "1h", "--", "true")  # pause makes no spool: submit does
    tq.run("pause", "q")
    unknown = tq.run("resume", "q", "other", check=False)
    assert unknown.returncode == 4 and unknown.stderr == b"taskq: queue other is not paused\n"
    assert os.listdir(tq.spool / "paused") == ["q"]  # nothing resumed


@pytest.mark.slow
def test_a_file_that_is_not_a_pause_is_quarantined(tq: Taskq, start_daemon: StartDaemon) -> None:
    tq.submit("--in", "1h", "--", "true")  # pause makes no spool: submit does
    tq.run("pause", "q")
    (tq.spool / "paused" / "q").write_text("not json")
    (tq.spool / "paused" / "q").chmod(0o600)
    start_daemon()
    task = tq.submit("--queue", "q", "--", "true")
    tq.wait_state(task, ("done",))
    (reason,) = [p for p in os.listdir(tq.spool / "corrupt") if p.endswith(".reason")]
    assert "not a pause file" in (tq.spool / "corrupt" / reason).read_text()
