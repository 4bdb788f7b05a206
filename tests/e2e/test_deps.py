"""Dependencies (submit --after), through real daemons and the real CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TASKQ, Daemon, Taskq, read_stamps, stamp_cmd, wait_for

from taskq.client import request
from taskq.client.submit import submit
from taskq.spool import byid, ending
from taskq.spool.layout import Spool
from taskq.spool.states import State
from taskq.spool.task import Request
from taskq.times.clock import wall_us
from taskq.times.timespec import DAY
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]


def _records(tq: Taskq, task_id: str, event: str) -> list[dict[str, Any]]:
    return [r for r in tq.show(task_id)["attempts"] if r["event"] == event]


@pytest.mark.slow
def test_after_ok_chain_whose_middle_task_fails(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    a = tq.submit("--", *stamp_cmd(stamps))
    b = tq.submit("--after", a, "--max-attempts", "2", "--", "sh", "-c", "exit 7")
    c = tq.submit("--after", b, "--", *stamp_cmd(stamps))
    d = tq.submit("--after", c, "--", *stamp_cmd(stamps))
    e = tq.submit("--after", f"{a},{b}", "--after-any", "--", *stamp_cmd(stamps))
    assert {tq.state(t) for t in (b, c, d, e)} == {"waiting"}
    # Two daemons, as two hosts: whichever ends a task resolves its dependents.
    start_daemon("--retry-delay", "100ms", host="one")
    start_daemon("--retry-delay", "100ms", host="two")
    tq.run("wait", "--timeout", "60s", a, b, c, d, e, check=False)
    assert [tq.state(t) for t in (a, b, c, d, e)] == [
        "done",
        "failed",
        "cancelled",
        "cancelled",
        "done",
    ]
    ran = {row[0] for row in read_stamps(stamps)}
    assert ran == {a, e}  # c and d never ran
    assert _records(tq, c, "cancelled")[0]["reason"] == f"dependency {b} failed"
    assert _records(tq, d, "cancelled")[0]["reason"] == f"dependency {c} cancelled"
    # b started only after a ended, e only after b's last attempt ended.
    a_end = parse_when(_records(tq, a, "end")[0]["time"], 0)
    assert parse_when(_records(tq, b, "start")[0]["time"], 0) >= a_end
    b_end = parse_when(_records(tq, b, "end")[-1]["time"], 0)
    assert len(_records(tq, b, "end")) == 2
    assert parse_when(_records(tq, e, "start")[0]["time"], 0) >= b_end
    cancelled_at = parse_when(_records(tq, c, "cancelled")[0]["time"], 0)
    print(f"c cancelled {(cancelled_at - b_end) / 1e6:.3f}s after b's last attempt ended")
    assert not os.listdir(tq.spool / "deps")  # every entry resolved and tidied


def test_unknown_dependency_is_refused_and_nothing_is_written(tq: Taskq) -> None:
    known = tq.submit("--in", "1h", "--", "true")
    unknown = "01M8NVZZEZZGH6Q9TEMTSY3RJA"
    proc = tq.run("submit", "--after", f"{known},{unknown}", "--", "true", check=False)
    assert proc.returncode == 3
    assert proc.stderr.decode().splitlines() == [f"taskq: --after: no task {unknown} in {tq.spool}"]
    assert os.listdir(tq.spool / "waiting") == [] and os.listdir(tq.spool / "deps") == []
    assert tq.run("submit", "--after", "nonsense", "--", "true", check=False).returncode == 2
    batch = tq.run("submit", "--after", known, "--batch", "-", input=b"", check=False)
    assert batch.returncode == 2 and b"--after does not go with --batch" in batch.stderr


@pytest.mark.slow
def test_dependencies_that_already_ended(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    ok = tq.submit("--", "true")
    bad = tq.submit("--max-attempts", "1", "--", "false")
    start_daemon()
    tq.run("wait", ok, bad, check=False)
    # A failed dependency cancels at once, in the submitter itself.
    doomed = tq.submit("--after", bad, "--", *stamp_cmd(stamps))
    assert tq.state(doomed) == "cancelled"
    runs = tq.submit("--after", ok, "--", *stamp_cmd(stamps))
    tq.wait_state(runs, ("done",))
    assert [row[0] for row in read_stamps(stamps)] == [runs]


@pytest.mark.slow
def test_cancelling_a_dependency_cancels_its_dependents(tq: Taskq) -> None:
    first = tq.submit("--in", "1h", "--", "true")
    second = tq.submit("--after", first, "--", "true")
    third = tq.submit("--after", second, "--after-any", "--", "true")
    tq.run("cancel", first)
    assert tq.state(second) == "cancelled"
    assert _records(tq, second, "cancelled")[0]["reason"] == f"dependency {first} cancelled"
    # --after-any: the cancelled second has ended, so third runs (it is released).
    assert tq.state(third) == "pending"
    # Cancelling a waiting task removes its entries under its dependencies.
    fourth = tq.submit("--in", "1h", "--", "true")
    fifth = tq.submit("--after", fourth, "--", "true")
    tq.run("cancel", fifth)
    assert os.listdir(tq.spool / "deps" / fourth) == []


@pytest.mark.slow
def test_ls_and_show_say_what_a_task_waits_for(tq: Taskq) -> None:
    first = tq.submit("--in", "1h", "--", "true")
    second = tq.submit("--after", first, "--after-any", "--", "echo", "hi")
    line = next(x for x in tq.run("ls").stdout.decode().splitlines() if x.startswith(second))
    assert "waiting" in line and line.endswith(f"echo hi  (after {first})")
    lines = tq.run("ls", "--json", "--state", "waiting").stdout.decode().splitlines()
    listed = [json.loads(line) for line in lines]  # NDJSON
    assert [(r["id"], r["after"]) for r in listed] == [(second, [first])]
    shown = tq.run("show", second).stdout.decode()
    assert f"after:     {first} (pending); runs however they end" in shown
    doc = tq.show(second)
    assert doc["after"] == [{"id": first, "state": "pending"}] and doc["after_mode"] == "any"


@pytest.mark.slow
def test_waiting_tasks_cost_the_daemon_nothing(tq: Taskq, start_daemon: StartDaemon) -> None:
    spool = Spool(str(tq.spool))
    now = wall_us()
    first = tq.submit("--in", "1d", "--", "true")
    req = Request(run_at=now, cwd="/", after=[first])
    ids = [submit(spool, request.body(req, ["true"], now))[0].id for _ in range(500)]
    # A file in waiting/ that nobody links: a daemon that read waiting/ would
    # quarantine it; one that never looks there leaves it.
    (tq.spool / "waiting" / "garbage").write_text("not a task")
    daemon = start_daemon("--rescan", "200ms")
    probe = tq.submit("--", "true")
    tq.wait_state(probe, ("done",))
    rescans = tq.submit("--", "true")  # after several rescans of 200 ms
    wait_for(lambda: tq.state(rescans) == "done" and daemon.text().count("ended") == 2, 30)
    assert (tq.spool / "waiting" / "garbage").exists()
    assert "quarantined" not in daemon.text()
    # Their dependency runs now: all 500 are released and run.
    tq.run("reschedule", first, "--in", "0s")
    wait_for(lambda: _done(tq) >= {first, *ids}, 120, "all 500 dependents done")
    assert os.listdir(tq.spool / "waiting") == ["garbage"]


def _done(tq: Taskq) -> set[str]:
    """The ids in done/, from the names alone (cheap enough to poll)."""
    return {n.split("_")[1] for day in (tq.spool / "done").iterdir() for n in os.listdir(day)}


@pytest.mark.slow
def test_a_safety_pass_resolves_what_a_killed_ender_left(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    first = tq.submit("--at", "2099-01-01T00:00:00Z", "--", "true")
    second = tq.submit("--after", first, "--", *stamp_cmd(stamps))
    spool = Spool(str(tq.spool))
    # As a daemon killed between its end rename and the resolution would
    # leave it: the dependency in done/ with its marker, the dependent waiting.
    found = byid.locate(spool, first)
    day = tq.spool / "done" / "20990101"
    day.mkdir(parents=True)
    os.rename(found.path, day / os.path.basename(found.path))
    assert ending.mark_ended(spool, first, State.DONE)
    assert tq.state(second) == "waiting"
    start_daemon("--rescan", "1h")  # the start-up pass, not the periodic one
    tq.wait_state(second, ("done",), timeout=30)
    assert [row[0] for row in read_stamps(stamps)] == [second]


@pytest.mark.slow
def test_far_future_dependency_does_not_hold_a_slot(tq: Taskq) -> None:
    # A dependent whose own run_at is later still waits for it after release.
    first = tq.submit("--in", "1h", "--", "true")
    later = tq.submit("--after", first, "--after-any", "--in", "2h", "--", "true")
    tq.run("cancel", first)
    doc = tq.show(later)
    assert doc["state"] == "pending"
    assert parse_when(doc["run_at"], 0) > wall_us() + DAY // 24


def test_a_dependent_of_an_occurrence_a_schedule_cancels_is_cancelled(tq: Taskq) -> None:
    add = ("schedule", "add", "nightly", "--cron", "@yearly", "--json", "--", "true")
    occurrence = json.loads(tq.run(*add).stdout)["task"]
    dependent = tq.submit("--after", occurrence, "--", "true")
    assert tq.state(dependent) == "waiting"
    tq.run("schedule", "rm", "nightly")  # its waiting occurrence is cancelled
    assert tq.state(occurrence) == "cancelled"
    assert tq.state(dependent) == "cancelled"
    reason = _records(tq, dependent, "cancelled")[0]["reason"]
    assert reason == f"dependency {occurrence} cancelled"
    assert os.listdir(tq.spool / "waiting") == []


def _listed(tq: Taskq, tmp_path: Path, *args: str) -> set[str]:
    """The spool's directories that `taskq ARGS` lists (getdents64, read off strace)."""
    trace = tmp_path / "trace"
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    argv = ["strace", "-f", "-qq", "-y", "-e", "trace=getdents64", "-o", str(trace), *TASKQ]
    subprocess.run([*argv, *args], env=env, check=True, capture_output=True, timeout=120)
    found = re.findall(r"getdents64\(\d+<([^>]*)>", trace.read_text())
    return {os.path.relpath(d, tq.spool) for d in found if d.startswith(str(tq.spool))}


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace (Debian package) is missing")
def test_after_finds_its_dependencies_by_id_without_listing_the_spool(
    tq: Taskq, tmp_path: Path
) -> None:
    lines = b"".join(b'{"command": ["true"], "in": "%dh"}\n' % h for h in range(1, 40))
    tq.run("submit", "--batch", "-", input=lines)  # 39 buckets a walk would list
    first = tq.submit("--in", "2d", "--", "true")
    listed = _listed(tq, tmp_path, "submit", "--after", first, "--", "true")
    assert not any(d.startswith("pending") for d in listed), listed
    dependent = next(iter(os.listdir(tq.spool / "waiting"))).split("_")[1]
    assert not any(d.startswith("pending") for d in _listed(tq, tmp_path, "show", dependent))
