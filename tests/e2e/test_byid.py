"""Lookups by id through ids/ hints: stale, lost and racing hints never make a lookup wrong."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, read_stamps, stamp_cmd, until, wait_for

from taskq.spool import hints
from taskq.spool.layout import Spool

StartDaemon = Callable[..., Daemon]


def hint_of(tq: Taskq, task_id: str) -> str:
    """The task file name an id's hint gives (its target, RUN_AT_ATTEMPT_QUEUE, and the id)."""
    target = os.readlink(tq.spool / "ids" / task_id[-2:] / task_id)
    run_at, _, rest = target.partition("_")
    return f"{run_at}_{task_id}_{rest}"


@pytest.mark.slow
def test_submit_and_reschedule_point_the_hint_at_the_task(tq: Taskq) -> None:
    task_id = tq.submit("--in", "1h", "--", "true")
    link = tq.spool / "ids" / task_id[-2:] / task_id
    assert hint_of(tq, task_id) == Path(tq.show(task_id)["path"]).name  # ls -l ids/*/ID says
    assert len(os.readlink(link)) < 60  # short enough to live in the link's inode
    tq.run("reschedule", task_id, "--in", "2h")
    assert hint_of(tq, task_id) == Path(tq.show(task_id)["path"]).name
    tq.run("cancel", task_id)
    assert tq.state(task_id) == "cancelled"  # the hint names pending/; the probe finds it


@pytest.mark.slow
def test_a_daemon_retry_is_found_through_the_journal(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    """The daemon renames a failed task (attempt 2, later run_at) without touching its hint."""
    start_daemon("--retry-delay", "1h")
    task_id = tq.submit("--max-attempts", "2", "--", *stamp_cmd(stamps, "; exit 3"))
    wait_for(lambda: read_stamps(stamps), 30, "the first attempt")
    doc = wait_for(lambda: (d := tq.show(task_id))["attempt"] == 2 and d, 30, "the retry")
    assert doc["state"] == "pending"
    assert hint_of(tq, task_id) == os.path.basename(doc["path"])  # the lookup repointed it
    tq.run("reschedule", task_id, "--in", "2h")
    assert hint_of(tq, task_id) == os.path.basename(tq.show(task_id)["path"])
    assert tq.run("cancel", task_id).stdout.decode() == f"cancelled {task_id}\n"
    assert [a for _, a, _ in read_stamps(stamps)] == [1]


@pytest.mark.slow
def test_lost_hints_are_searched_for_and_rebuilt_by_fsck(tq: Taskq) -> None:
    ids = [tq.submit("--in", f"{n}h", "--", "true") for n in (1, 2, 3)]
    shutil.rmtree(tq.spool / "ids")
    assert tq.state(ids[0]) == "pending"  # found by listing the spool; its hint rewritten
    assert hint_of(tq, ids[0]).split("_")[1] == ids[0]
    dry = tq.run("fsck", "--dry-run", check=False)
    assert dry.returncode == 1 and dry.stdout.decode().count("has no hint in ids/") == 2
    fixed = tq.run("fsck", check=False).stdout.decode()
    assert fixed.count("has no hint in ids/: written") == 2
    assert all(hint_of(tq, i).split("_")[1] == i for i in ids)
    (tq.spool / "ids" / "ZZ").mkdir()
    stale = tq.spool / "ids" / "ZZ" / ("0" * 24 + "ZZ")
    stale.symlink_to(f"../../pending/202001010000/20200101T000000.000000Z_{'0' * 24}ZZ_1_default")
    (tq.spool / "ids" / "ZZ" / "junk").write_text("")
    out = tq.run("fsck", check=False).stdout.decode()
    assert "which is gone: removed" in out and "not a task id's hint: removed" in out
    assert not stale.is_symlink() and tq.run("fsck").returncode == 0
    assert tq.run("show", "0" * 24 + "ZZ", check=False).returncode == 3


def test_a_long_batch_writes_one_hint_file_and_a_keyed_line_only_its_own_link(tq: Taskq) -> None:
    """A batch's ids follow one another: one file holds their hints; a key hit leaves none."""
    first = tq.submit("--key", "k1", "--in", "1h", "--", "true")
    lines = [{"command": ["true"], "in": 3600 + i * 61} for i in range(100)]
    lines += [{"command": ["true"], "key": "k1"}, {"command": ["true"], "key": "k2"}]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    ids = tq.run("submit", "--batch", "-", input=data).stdout.decode().split()
    assert len(ids) == 102 and ids[100] == first
    spool = Spool(str(tq.spool))
    for task_id in ids:  # each hint names its pending file (read in-process: 102 lookups)
        hint = hints.read_hint(spool, task_id)
        assert hint is not None
        assert os.path.exists(os.path.join(spool.bucket_dir(hint.bucket), str(hint)))
    links = {p.name for p in (tq.spool / "ids").glob("[0-9A-Z]*/*")}
    assert links == {first, ids[101]}  # no hint of an id that a key hit never published
    [batch] = (tq.spool / "ids").glob("+*/*")
    assert batch.name == f"{ids[0]}.100.34" and batch.parent.name == f"+{ids[0][:10]}"
    assert tq.show(ids[50])["state"] == "pending" and tq.run("fsck").returncode == 0


@pytest.mark.slow
def test_a_batch_hint_gives_way_to_a_later_link_and_fsck_removes_it_with_its_tasks(
    tq: Taskq,
) -> None:
    data = "".join(json.dumps({"command": ["true"], "in": 3600 + i}) + "\n" for i in range(20))
    ids = tq.run("submit", "--batch", "-", input=data.encode()).stdout.decode().split()
    tq.run("reschedule", ids[3], "--in", "5h")  # its own link now, the batch's record stale
    assert hint_of(tq, ids[3]) == Path(tq.show(ids[3])["path"]).name
    [batch] = (tq.spool / "ids").glob("+*/*")
    (batch.parent / "junk").write_text("")
    out = tq.run("fsck", check=False).stdout.decode()
    assert "not a batch's hints: removed" in out and "has no hint" not in out and batch.exists()
    for path in tq.spool.glob("pending/*/*"):
        path.unlink()  # every task of the batch gone (by hand)
    out = tq.run("fsck", check=False).stdout.decode()
    assert f"ids/{batch.parent.name}/{batch.name}: names no task that is left: removed" in out
    assert not batch.exists()
    assert tq.run("show", ids[0], check=False).returncode == 3


@pytest.mark.slow
def test_a_hint_in_the_first_form_still_finds_its_task(tq: Taskq) -> None:
    """Hints were once paths to the task file; a lookup still reads them, and fsck keeps them."""
    task_id = tq.submit("--in", "1h", "--", "true")
    path = Path(tq.show(task_id)["path"])
    link = tq.spool / "ids" / task_id[-2:] / task_id
    link.unlink()
    link.symlink_to(f"../../pending/{path.parent.name}/{path.name}")
    assert hints.read_hint(Spool(str(tq.spool)), task_id) is not None
    assert tq.show(task_id)["path"] == str(path) and tq.run("fsck").returncode == 0
    assert os.readlink(link) == f"../../pending/{path.parent.name}/{path.name}"


@pytest.mark.slow
def test_a_crash_between_move_and_hint_costs_nothing(tq: Taskq) -> None:
    task_id = tq.submit("--in", "1h", "--", "true")
    old = hint_of(tq, task_id)
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "TASKQ_CRASH_AT": "reschedule.moved"}
    crashed = subprocess.run([*TASKQ, "reschedule", task_id, "--in", "3h"], env=env)
    assert crashed.returncode == -signal.SIGKILL
    assert hint_of(tq, task_id) == old  # the task moved; its hint did not
    doc = tq.show(task_id)
    assert doc["state"] == "pending" and os.path.basename(doc["path"]) != old
    assert hint_of(tq, task_id) == os.path.basename(doc["path"])  # the lookup repaired it
    assert tq.run("fsck").returncode == 0


@pytest.mark.slow
def test_lookups_never_miss_tasks_in_motion(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path, tmp_path: Path
) -> None:
    """Show and wait, hammered while two daemons claim, run, retry and finish tasks."""
    gate = tmp_path / "gate"
    for host in ("a", "b"):
        start_daemon("--retry-delay", "0.1s", "--workers", "6", host=host)
    first = f"[ -e {tmp_path}/$TASKQ_ID ] || {{ touch {tmp_path}/$TASKQ_ID; exit 1; }}"
    cmd = stamp_cmd(stamps, f"; {first}{until(gate)}")
    ids = [tq.submit("--max-attempts", "3", "--in", "0.2s", "--", *cmd) for _ in range(8)]
    seen: dict[str, set[str]] = {i: set() for i in ids}
    failures: list[str] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            for task_id in ids:
                proc = tq.run("show", "--json", task_id, check=False)
                if proc.returncode != 0:
                    failures.append(proc.stderr.decode())
                else:
                    seen[task_id].add(json.loads(proc.stdout)["state"])

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        wait_for(lambda: len(read_stamps(stamps)) >= 2 * len(ids), 60, "every retry to start")
        wait_for(lambda: all("running" in seen[i] for i in ids), 60, "each to be seen running")
        gate.touch()
        waited = tq.run("wait", *ids, "--timeout", "60s", check=False)
    finally:
        stop.set()
        thread.join(60)
    assert waited.returncode == 0 and waited.stdout.decode().count(" done") == len(ids)
    assert failures == []
    assert all(states <= {"pending", "claimed", "running", "done"} for states in seen.values())


@pytest.mark.slow
def test_wait_wakes_on_ends_and_reports_each_once(tq: Taskq) -> None:
    ids = [tq.submit("--in", "1h", "--", "true") for _ in range(20)]
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    waiter = subprocess.Popen([*TASKQ, "wait", *ids], env=env, stdout=subprocess.PIPE)
    for task_id in reversed(ids):
        tq.run("cancel", task_id)
    out, _ = waiter.communicate(timeout=60)
    lines = out.decode().splitlines()
    assert sorted(lines) == sorted(f"{i} cancelled" for i in ids)


def test_the_end_watch_names_what_arrives(tq: Taskq) -> None:
    from taskq.observe.endwatch import EndWatch
    from taskq.spool.layout import Spool

    task_id = tq.submit("--in", "1h", "--", "true")
    spool = Spool(str(tq.spool))
    watch = EndWatch(spool)
    try:
        assert watch.watching and watch.take(0) == set()
        tq.run("cancel", task_id)
        arrived: set[str] = set()

        def seen() -> bool:
            arrived.update(watch.take(1))
            return task_id in arrived

        wait_for(seen, 30, "the event")
    finally:
        watch.stop()
