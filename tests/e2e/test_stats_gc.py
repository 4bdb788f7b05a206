"""`taskq stats` and retention (`taskq gc`, `daemon --keep-done`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, wait_for

StartDaemon = Callable[..., Daemon]


@pytest.mark.slow
def test_stats_counts_backlog_lateness_and_daemons(tq: Taskq, start_daemon: StartDaemon) -> None:
    began = time.time()
    ran = [tq.submit("--queue", "mail", "--", "true") for _ in range(3)]
    daemon = start_daemon()
    for task_id in ran:
        tq.wait_state(task_id, ("done",))
    # a start's lateness is at most the time from its submission (its run_at) to its end
    ran_for = time.time() - began
    daemon.stop()
    tq.submit("--at", "2001-01-01T00:00:00Z", "--queue", "mail", "--", "true")
    tq.submit("--at", "2002-01-01T00:00:00Z", "--queue", "web", "--", "true")
    tq.submit("--in", "1h", "--queue", "web", "--", "true")
    doc = json.loads(tq.run("stats", "--json").stdout)
    assert doc["counts"]["done"] == {"mail": 3}
    assert doc["counts"]["pending"] == {"mail": 1, "web": 2}
    assert doc["overdue"]["mail"]["count"] == 1 and doc["overdue"]["web"]["count"] == 1
    assert doc["overdue_total"] == 2
    assert doc["overdue"]["mail"]["oldest_run_at"] == "2001-01-01T00:00:00.000000Z"
    assert doc["oldest_overdue_age"] > 25 * 365 * 86400
    assert doc["lateness"]["attempts"] == 3 and 0 <= doc["lateness"]["p50"] <= ran_for
    text = tq.run("stats").stdout.decode()
    assert "overdue: 2 (mail 1, web 1)" in text and "lateness of the last 3 attempts" in text
    assert text.splitlines()[0].split() == ["STATE", "TOTAL", "mail", "web"]


def age_done_days(spool: Path) -> None:
    """Pretend today's done/ day is a day of 2001."""
    for day in (spool / "done").iterdir():
        day.rename(day.with_name("20010101"))


@pytest.mark.slow
def test_gc_removes_old_days_logs_and_keys(tq: Taskq, start_daemon: StartDaemon) -> None:
    keyed = tq.submit("--key", "once", "--", "true")
    plain = tq.submit("--", "true")
    daemon = start_daemon()
    tq.wait_state(keyed, ("done",))
    tq.wait_state(plain, ("done",))
    daemon.stop()
    age_done_days(tq.spool)
    out = tq.run("gc", "--older-than", "1d", "--dry-run").stdout.decode()
    assert out.strip() == "would remove 2 done task(s) in 1 day(s), with their logs and 1 key(s)"
    assert (tq.spool / "logs" / keyed).exists()
    out = tq.run("gc", "--older-than", "1d").stdout.decode()
    assert out.startswith("removed 2 done task(s) in 1 day(s)")
    assert not (tq.spool / "done" / "20010101").exists()
    assert not (tq.spool / "logs" / keyed).exists() and not (tq.spool / "logs" / plain).exists()
    assert os.listdir(tq.spool / "keys") == []
    assert tq.run("show", keyed, check=False).returncode == 3
    assert tq.submit("--key", "once", "--", "true") != keyed  # the key is free again


@pytest.mark.slow
def test_gc_keeps_recent_days(tq: Taskq, start_daemon: StartDaemon) -> None:
    task_id = tq.submit("--", "true")
    daemon = start_daemon()
    tq.wait_state(task_id, ("done",))
    daemon.stop()
    assert tq.run("gc").stdout.startswith(b"removed 0 done task(s)")
    assert tq.state(task_id) == "done"


@pytest.mark.slow
def test_daemon_keep_done_prunes(tq: Taskq, start_daemon: StartDaemon) -> None:
    task_id = tq.submit("--", "true")
    first = start_daemon()
    tq.wait_state(task_id, ("done",))
    first.stop()
    age_done_days(tq.spool)
    start_daemon("--keep-done", "30d")
    wait_for(lambda: not (tq.spool / "done" / "20010101").exists(), 10, "the old day to be pruned")
    assert tq.run("show", task_id, check=False).returncode == 3
