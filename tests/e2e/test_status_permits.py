"""taskq status lists the permits held now: which limit, for which task, by whom, since when."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, until, wait_for

from taskq.spool import permits
from taskq.spool.layout import Spool
from taskq.spool.task import new_id
from taskq.times.when import parse_when


def status(tq: Taskq) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(tq.run("status", "--json").stdout)
    return records


@pytest.mark.slow  # a real daemon runs a task for seconds
def test_status_shows_the_permits_a_running_attempt_holds(
    tq: Taskq, start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    tq.spool.mkdir(parents=True)
    (tq.spool / "config.toml").write_text("[queues.reports]\nlimit = 2\n")
    d = start_daemon()
    gate = tmp_path / "gate"
    before = time.time()
    task_id = tq.submit("--queue", "reports", "--mutex", "db", "--", "sh", "-c", until(gate)[2:])
    tq.wait_state(task_id, ("running",), 30)
    [record] = status(tq)
    owner = f"testhost_{d.proc.pid}"
    assert record["owner"] == owner
    held = {p["permit"]: p for p in record["permits"]}
    queue_permit = next(k for k in held if k.startswith("queue_"))
    assert sorted(held) == ["mutex_db_0", queue_permit]
    assert queue_permit in ("queue_reports_0", "queue_reports_1")
    [start] = [r for r in tq.show(task_id)["attempts"] if r["event"] == "start"]
    for p in held.values():
        assert (p["task"], p["owner"]) == (task_id, owner)
        since = parse_when(p["since"], 0) / 1e6
        assert before - 1 <= since <= parse_when(start["time"], 0) / 1e6 + 1
        assert parse_when(p["lease_expiry"], 0) > parse_when(p["since"], 0)
    text = tq.run("status").stdout.decode()
    assert (
        f"permit {queue_permit} (limit of queue reports): task {task_id}, held by {owner} since "
        in text
    )
    assert f"permit mutex_db_0 (mutex db): task {task_id}, held by {owner} since " in text
    gate.touch()
    tq.wait_state(task_id, ("done",), 30)
    wait_for(lambda: status(tq)[0]["permits"] == [], 30, "the permits to be given back")
    assert "permit " not in tq.run("status").stdout.decode()


def test_status_shows_permits_whose_holder_has_no_record(tq: Taskq) -> None:
    spool = Spool(str(tq.spool))
    spool.init()
    now = int(time.time() * 1e6)
    lease = permits.lease_for(new_id(now), now + 60_000_000, 4242, "elsewhere")
    assert permits.take(spool, permits.Permit("queue", "reports", 1), lease)
    [record] = status(tq)
    assert record["owner"] == "elsewhere_4242"
    assert record["alive"] is None  # another host's daemon: its lock cannot be judged here
    [p] = record["permits"]
    assert (p["kind"], p["name"], p["number"], p["task"]) == ("queue", "reports", 1, lease.task_id)
    assert f"permit queue_reports_1 (limit of queue reports): task {lease.task_id}" in (
        tq.run("status").stdout.decode()
    )
