"""Cost grows with due work, not stored work: a large future backlog is free."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, read_stamps, stamp_cmd

from taskq.client import request
from taskq.client.submit import publish
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import Request, TaskName
from taskq.times.clock import wall_us

StartDaemon = Callable[..., Daemon]
FUTURE = 20_000  # tasks spread over the next 30 days (the benchmark goes to 1,000,000)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _unannounced(tq: Taskq) -> str:
    """A due task placed without ringing the doorbell: only a rescan (--rescan) finds it."""
    spool = Spool(str(tq.spool))
    body = request.body(Request(run_at=wall_us(), cwd="/"), ["true"], wall_us())
    fsutil.write_new(spool.tmp_body(body.id), body.to_json())
    publish(spool, spool.tmp_body(body.id), TaskName(body.run_at, body.id, 1))
    return body.id


@pytest.mark.slow
def test_future_backlog_is_not_read(tq: Taskq, start_daemon: StartDaemon, stamps: Path) -> None:
    start = time.time() + 86400
    lines = (
        json.dumps({"command": ["true"], "run_at": start + i * 30 * 86400 / FUTURE}) + "\n"
        for i in range(FUTURE)
    )
    tq.run("submit", "--batch", "-", input="".join(lines).encode())
    # A far-future bucket holding garbage: a daemon that read it would quarantine it.
    far = sorted((tq.spool / "pending").iterdir())[-1]
    (far / "garbage").write_text("not a task")
    due = tq.submit("--", *stamp_cmd(stamps))
    began = time.time()
    daemon = start_daemon("--rescan", "0.5s")
    tq.wait_state(due, ("done",))
    [(_, _, started)] = read_stamps(stamps)
    assert started - began < 5.0, "start-up to the first dispatch"
    for _ in range(3):  # three safety rescans, each of which must leave the future alone
        tq.wait_state(_unannounced(tq), ("done",))
    assert len(list((tq.spool / "done").glob("*/*"))) == 4
    assert (far / "garbage").exists() and list((tq.spool / "corrupt").iterdir()) == []
    assert rss_mb(daemon.proc.pid) < 100
    assert _tasks_in(tq.spool / "pending") == FUTURE + 1


def _tasks_in(pending: Path) -> int:
    """The entries of pending/'s buckets; one the daemon removes as empty meanwhile has none."""
    count = 0
    for bucket in pending.iterdir():
        with contextlib.suppress(FileNotFoundError):
            count += len(os.listdir(bucket))
    return count


@pytest.mark.slow
def test_submit_survives_a_racing_bucket_removal(tmp_path: Path) -> None:
    """A daemon removes empty past buckets; a submitter into one must not lose its task."""
    import os
    import threading

    from taskq.client.submit import submit, submit_batch
    from taskq.spool.layout import Spool
    from taskq.spool.task import TaskBody, bucket_of, new_id

    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    run_at = 1_700_000_000_000_000  # one past minute, so one bucket for every task
    bucket = spool.bucket_dir(bucket_of(run_at))
    stop = threading.Event()
    removed = 0

    def remover() -> None:
        nonlocal removed
        while not stop.is_set():
            try:
                os.rmdir(bucket)  # what the daemon does to an empty past bucket
                removed += 1
            except OSError:
                pass
            time.sleep(0.0001)  # far more often than any daemon, which does it once a rescan

    def body() -> TaskBody:
        return TaskBody(
            id=new_id(time.time_ns() // 1000), argv=["true"], run_at=run_at, submitted_at=0
        )

    thread = threading.Thread(target=remover)
    thread.start()
    try:
        ids = []
        for _ in range(200):
            ids.append(submit(spool, body())[0].id)
            for p in Path(bucket).glob("*") if os.path.isdir(bucket) else []:
                p.unlink(missing_ok=True)  # empty it again so the remover can strike
        batch = [body() for _ in range(200)]
        ids += [name.id for name, _ in submit_batch(spool, batch)]
    finally:
        stop.set()
        thread.join()
    assert removed > 10, "the race was not exercised"
    assert len(set(ids)) == 400
    assert len(os.listdir(bucket)) == 200  # the batch's tasks, all there
