"""Unit tests of the due index, the journal and the runner, on real files."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest

from taskq.daemon import runner
from taskq.daemon.dueindex import DueIndex
from taskq.spool import attemptfiles, journal, layout
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.task import TaskBody, TaskName, bucket_of, new_id
from taskq.times.timespec import MINUTE, SECOND

NOW = 1_800_000_000 * SECOND


def put(spool: Spool, run_at: int, queue: str = "default") -> TaskName:
    name = TaskName(run_at, new_id(NOW), 1, queue)
    os.makedirs(spool.bucket_dir(name.bucket), exist_ok=True)
    Path(spool.bucket_dir(name.bucket), str(name)).write_text("{}")
    return name


def test_due_index_reads_up_to_now_and_the_next_bucket_only(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    past = [put(spool, NOW - MINUTE - i) for i in range(3)]
    soon = put(spool, NOW + 5 * MINUTE)
    put(spool, NOW + 60 * MINUTE)  # beyond the first future bucket: not read
    os.makedirs(spool.bucket_dir(bucket_of(NOW - 10 * MINUTE)))  # an empty past bucket
    index = DueIndex(spool)
    assert index.rescan(NOW) == []
    assert len(index) == 4 and index.more_beyond
    assert not os.path.exists(spool.bucket_dir(bucket_of(NOW - 10 * MINUTE)))  # removed
    order = [index.pop_due(lambda t: True, lambda q: True) for _ in range(4)]
    assert [e[0] for e in order if e] == [*sorted(past), soon]


def test_due_index_takes_a_bursts_tasks_in_id_order(tmp_path: Path) -> None:
    """Tasks due at one instant go in submission (id) order, pushed ones too."""
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    burst = [put(spool, NOW - 1) for _ in range(40)]
    index = DueIndex(spool)
    index.rescan(NOW)
    retried = TaskName(NOW - 1, burst[5].id, 2, burst[5].queue)  # back, same instant
    index.push(retried)
    index.push(TaskName(NOW - 2, burst[7].id, 2, burst[7].queue))  # back, earlier
    taken = []
    while (e := index.pop_due(lambda t: True, lambda q: True)) is not None:
        taken.append(e[0])
    assert taken[0].run_at == NOW - 2
    assert taken[1:] == sorted([*burst, retried])


def test_due_index_round_robin_across_queues(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    for i in range(3):
        put(spool, NOW - 10 + i, "a")
    put(spool, NOW - 1, "b")
    index = DueIndex(spool)
    index.rescan(NOW)
    queues = []
    while (e := index.pop_due(lambda t: True, lambda q: True)) is not None:
        queues.append(e[0].queue)
    assert queues == ["a", "b", "a", "a"]


def test_journal_tolerates_a_torn_line_and_reads_budgets(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    log_dir = str(tmp_path / "logs" / "X")
    assert journal.append(log_dir, Event.START, NOW, attempt=1, run_at="2027-01-15T08:00:00Z")
    journal.append(log_dir, Event.RETRIED, NOW + 1, attempt=3)
    with open(os.path.join(log_dir, "journal"), "ab") as f:
        f.write(b'{"event": "end", "att')  # a crash mid-append
    records = journal.read(log_dir)
    assert [r["event"] for r in records] == ["start", "retried"]
    assert journal.budget_start(records, 2) == 1  # the retry names an attempt not yet made
    assert journal.budget_start(records, 3) == 3
    journal.revoke(log_dir, Event.RETRIED, NOW + 1)
    assert journal.budget_start(journal.read(log_dir), 3) == 1


def test_runner_records_status_and_output_past_the_daemon(tmp_path: Path) -> None:
    (tmp_path / "logs" / "T").mkdir(parents=True)  # ownership.bind makes it
    log_dir = str(tmp_path / "logs" / "T")
    body = TaskBody(
        id=new_id(NOW),
        argv=["sh", "-c", "echo out; echo err >&2; exit 3"],
        run_at=NOW,
        submitted_at=NOW,
    )
    name = TaskName(NOW, body.id, 1)
    child = runner.spawn(body, name, log_dir, {"PATH": "/usr/bin:/bin"})
    assert attemptfiles.supervisor_alive(log_dir, 1) or attemptfiles.read_status(log_dir, 1) == 3
    _, status = os.waitpid(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert attemptfiles.read_supervisor(log_dir, 1) == (True, 3)
    assert not attemptfiles.supervisor_alive(log_dir, 1)
    assert Path(layout.out_path(log_dir, 1)).read_text() == "out\nerr\n"


def test_runner_watches_a_live_process_by_pidfd(tmp_path: Path) -> None:
    pid = os.posix_spawn("/bin/sleep", ["sleep", "0.2"], {})
    fd = runner.watch_exit(pid, runner.proc_start_time(pid))
    assert fd is not None
    assert runner.watch_exit(pid, 12345) is None  # another process by that pid: nothing
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 30
    while not select.select([fd], [], [], 0.05)[0]:
        assert time.monotonic() < deadline
    os.close(fd)


def test_runner_refuses_an_attempt_another_supervisor_holds(tmp_path: Path) -> None:
    """A daemon paused past its lease must not start (or truncate) the new owner's attempt."""
    (tmp_path / "logs" / "T").mkdir(parents=True)  # ownership.bind makes it
    log_dir = str(tmp_path / "logs" / "T")
    gate = tmp_path / "gate"
    body = TaskBody(
        id=new_id(NOW),
        argv=["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.01; done"],
        run_at=0,
        submitted_at=0,
    )
    name = TaskName(NOW, body.id, 1)
    first = runner.spawn(body, name, log_dir, {"PATH": "/usr/bin:/bin"})
    try:
        with pytest.raises(runner.AttemptBusy):
            runner.spawn(body, name, log_dir, {"PATH": "/usr/bin:/bin"})
        assert attemptfiles.supervisor_alive(log_dir, 1)
    finally:
        gate.touch()
        os.waitpid(first.pid, 0)
    assert attemptfiles.read_supervisor(log_dir, 1) == (True, 0)


def test_runner_never_reuses_an_attempt_that_ran(tmp_path: Path) -> None:
    """A second start of an attempt (a forged id, a stale claim) never appends to its output."""
    (tmp_path / "logs" / "T").mkdir(parents=True)  # ownership.bind makes it
    log_dir = str(tmp_path / "logs" / "T")
    body = TaskBody(id=new_id(NOW), argv=["echo", "first"], run_at=0, submitted_at=0)
    name = TaskName(NOW, body.id, 1)
    os.waitpid(runner.spawn(body, name, log_dir, {"PATH": "/usr/bin:/bin"}).pid, 0)
    again = TaskBody(id=body.id, argv=["echo", "second"], run_at=0, submitted_at=0)
    with pytest.raises(runner.AttemptUsed):
        runner.spawn(again, name, log_dir, {"PATH": "/usr/bin:/bin"})
    assert Path(layout.out_path(log_dir, 1)).read_text() == "first\n"
    assert attemptfiles.read_supervisor(log_dir, 1) == (True, 0)


def test_last_of_answers_the_same_object_once_and_an_equal_one_anew() -> None:
    from taskq.spool.memo import LastOf

    calls: list[dict[str, str]] = []

    def size(env: dict[str, str]) -> int:
        calls.append(env)
        return len(env)

    memo = LastOf(size)
    env = {"A": "1"}
    assert memo(env) == memo(env) == 1
    assert len(calls) == 1
    other = {"A": "1"}
    assert memo(other) == 1 and calls[-1] is other  # equal is not enough: identity decides
    assert memo(env) == 1 and len(calls) == 3


def test_a_batch_checks_each_lines_own_environment() -> None:
    """Bodies sharing the request's env are checked once; a line's own env is checked itself."""
    from taskq.client import batch
    from taskq.errors import BadInput
    from taskq.spool.task import Request

    defaults = Request(run_at=0, cwd="/", env={"PATH": "/bin", "OK": "x"})
    data = b'{"command": ["true"]}\n{"command": ["true"]}\n'
    first, second = batch.parse(data, defaults, 0)
    assert first.env is second.env is defaults.env
    bad = data + b'{"command": ["true"], "env": {"BAD": "a\\u0000b"}}\n'
    with pytest.raises(BadInput, match="batch line 3: variable BAD contains a NUL byte"):
        batch.parse(bad, defaults, 0)
