"""One hand-placed file in a private spool: refused with one escaped log line, never a crash.

Each test here is a reproduction from issue 23 ("A private spool, one
hand-placed file" and "Other files stop it the same way"), run through a
real daemon or the real CLI: the file must gain nothing (no crash, no
wedge, no traceback, nothing run), end in corrupt/ with a reason where it
is a task's file, and the daemon must name what it refused in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from conftest import Daemon, Taskq, wait_for

from taskq.spool.layout import Spool
from taskq.spool.task import TaskName, bucket_of, new_id

StartDaemon = Callable[..., Daemon]


def due_bucket(tq: Taskq) -> Path:
    """A pending bucket that is due now."""
    bucket = tq.spool / "pending" / bucket_of(time.time_ns() // 1000 - 60_000_000)
    bucket.mkdir(parents=True, exist_ok=True)
    return bucket


def test_a_name_with_a_newline_is_one_escaped_log_line(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    Spool(str(tq.spool)).init()
    forged = "taskq[1]: started 01ARZ3NDEKTSV4RRFFQ69G5FAV attempt 1 pid 1 lateness 0ms"
    name = f"{TaskName(0, new_id(0), 1)}\n{forged}"
    path = due_bucket(tq) / name
    path.write_text("{}")
    daemon = start_daemon("--rescan", "0.2s")
    wait_for(lambda: not path.exists(), 15, "the file to be quarantined")
    lines = wait_for(
        lambda: [ln for ln in daemon.text().splitlines() if "quarantined" in ln], 10, "a log line"
    )
    assert len(lines) == 1 and "\\ntaskq[1]: started" in lines[0], daemon.text()
    assert not [ln for ln in daemon.text().splitlines() if ln.startswith("taskq[1]")]
    (reason,) = (tq.spool / "corrupt").glob("*.reason")
    assert reason.read_text().count("\n") == 1
    assert all("\n" not in p.name for p in (tq.spool / "corrupt").iterdir())
