"""One hand-placed file in a private spool: refused with one escaped log line, never a crash.

Each test here is a reproduction from issue 23 ("A private spool, one
hand-placed file" and "Other files stop it the same way"), run through a
real daemon or the real CLI: the file must gain nothing (no crash, no
wedge, no traceback, nothing run), end in corrupt/ with a reason where it
is a task's file, and the daemon must name what it refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, read_stamps, run_until_it_dies, stamp_cmd, wait_for

from taskq.spool.layout import Spool
from taskq.spool.task import DEFAULT_PATH, TaskBody, TaskName, bucket_of, new_id

StartDaemon = Callable[..., Daemon]
pytestmark = pytest.mark.slow  # each is real daemons or commands: seconds apiece


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


def no_traceback(proc: subprocess.CompletedProcess[bytes], statuses: set[int]) -> None:
    """An operator command that read a bad file: a documented status, at most one-line errors."""
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert proc.returncode in statuses, (proc.returncode, proc.stderr.decode())


def hand_placed(tq: Taskq, change: Callable[[dict[str, Any]], str]) -> Path:
    """A task file in a due bucket whose body is a good body changed by hand (change returns
    the JSON text, so that it can also write what json.dumps would not)."""
    body = TaskBody(
        id=new_id(time.time_ns() // 1000),
        argv=["true"],
        run_at=0,
        submitted_at=0,
        env={"PATH": DEFAULT_PATH},
    )
    doc = json.loads(body.to_json())
    name = TaskName(time.time_ns() // 1000 - 60_000_000, body.id, 1)
    path = tq.spool / "pending" / name.bucket / str(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(change(doc))
    path.chmod(0o600)
    return path


def _set(**changes: Any) -> Callable[[dict[str, Any]], str]:
    return lambda doc: json.dumps({**doc, **changes})


def _deep_argv(doc: dict[str, Any]) -> str:
    return json.dumps({**doc, "argv": "ARGV"}).replace('"ARGV"', "[" * 5000 + "]" * 5000)


# issue 23, "A private spool, one hand-placed file": each once killed the
# daemon and every restart (spawn's ValueError, OverflowError, RecursionError).
HAND_PLACED = {
    "a NUL in an argv string": (_set(argv=["echo", "a\0b"]), "NUL"),
    "a NUL in cwd": (_set(cwd="/\0tmp"), "NUL"),
    "a NUL in an env value": (_set(env={"PATH": DEFAULT_PATH, "X": "a\0b"}), "NUL"),
    "an env name with '='": (_set(env={"PATH": DEFAULT_PATH, "A=B": "1"}), "names are"),
    "expires 9e307": (_set(expires=9e307), "expires must be"),
    "argv nested 5000 deep": (_deep_argv, "nested too deeply"),
}


def test_hand_placed_bodies_are_quarantined_and_the_daemon_runs_on(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    """Every body of HAND_PLACED at once, in one due bucket: each alone once stopped the
    daemon for good, so one daemon meeting them all must set each aside and run on."""
    Spool(str(tq.spool)).init()
    bad = {case: hand_placed(tq, change) for case, (change, _) in HAND_PLACED.items()}
    for command in (["ls"], ["fsck", "--dry-run"], ["fsck", "--dry-run", "--json"], ["stats"]):
        no_traceback(tq.run(*command, check=False), {0, 1})  # fsck: 1, a problem remains
    daemon = start_daemon("--rescan", "0.2s")
    good = tq.submit("--", *stamp_cmd(stamps))
    tq.wait_state(good, ("done",))
    reasons = tq.spool / "corrupt"  # a file is moved there first, its reason written after
    wait_for(
        lambda: (
            not any(p.exists() for p in bad.values())
            and len(list(reasons.glob("*.reason"))) == len(bad)
        ),
        30,
        "the quarantines",
    )
    refused = [ln for ln in daemon.text().splitlines() if "quarantined" in ln]
    assert len(refused) == len(bad), daemon.text()
    for case, path in bad.items():
        reason = HAND_PLACED[case][1]
        said = [ln for ln in refused if path.name in ln]
        assert len(said) == 1 and reason in said[0], (case, daemon.text())
        (why,) = reasons.glob(f"*_{path.name}_*.reason")  # the name it was claimed by
        assert reason in why.read_text() and why.read_text().count("\n") == 1, case
    assert daemon.proc.poll() is None
    daemon.stop()
    again = start_daemon()  # a restart meets nothing of them
    later = tq.submit("--", *stamp_cmd(stamps))
    tq.wait_state(later, ("done",))
    assert again.proc.poll() is None
    no_traceback(tq.run("fsck", check=False), {0})


def test_a_schedule_starting_in_9999_is_refused_and_leaves_nothing(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    proc = tq.run(
        "schedule", "add", "x", "--cron", "0 0 1 1 *", "--start", "9999-01-01T00:00:00Z",
        "--", "true", check=False,
    )  # fmt: skip
    no_traceback(proc, {2})
    assert len(proc.stderr.decode().strip().splitlines()) == 1
    assert not (tq.spool / "schedules" / "x").exists()
    assert json.loads(tq.run("ls", "--json").stdout or b"null") is None  # no occurrence
    no_traceback(tq.run("schedule", "ls", check=False), {0})
    daemon = start_daemon()
    tq.wait_state(tq.submit("--", "true"), ("done",))
    assert daemon.proc.poll() is None


# issue 23: schedule.json, which taskq-spool(5) lets an operator edit.
SCHEDULE_EDITS = {"every 1e-9": {"every": 1e-9}, "every 1e12": {"every": 1e12}}
SCHEDULE_EDITS["jitter 1e300"] = {"jitter": 1e300}


def test_hand_edited_schedules_are_quarantined_and_the_daemon_runs_on(
    tq: Taskq, start_daemon: StartDaemon, stamps: Path
) -> None:
    """One schedule for each edit of SCHEDULE_EDITS, all met by one daemon."""
    paths = {}
    for n, edit in enumerate(SCHEDULE_EDITS.values()):
        tq.run("schedule", "add", f"edited{n}", "--every", "1h", "--", "true")
        paths[f"edited{n}"] = path = tq.spool / "schedules" / f"edited{n}" / "schedule.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    shows = [["schedule", "show", name] for name in paths]
    for command in (["schedule", "ls"], *shows, ["fsck", "--dry-run"]):
        no_traceback(tq.run(*command, check=False), {0, 1})
    daemon = start_daemon("--rescan", "0.2s")
    wait_for(lambda: not any(p.exists() for p in paths.values()), 30, "the quarantines")
    for name, case in zip(paths, SCHEDULE_EDITS, strict=True):
        refused = [ln for ln in daemon.text().splitlines() if f"schedule {name}" in ln]
        assert len(refused) == 1 and "bad schedule" in refused[0], (case, daemon.text())
    tq.wait_state(tq.submit("--", *stamp_cmd(stamps)), ("done",))
    assert daemon.proc.poll() is None
    no_traceback(tq.run("schedule", "ls", check=False), {0})


@pytest.mark.parametrize("timeout", ["inf", "nan", "1e300", "-inf"])
def test_a_notify_timeout_out_of_range_is_one_line_and_78(tq: Taskq, timeout: str) -> None:
    Spool(str(tq.spool)).init()
    (tq.spool / "config.toml").write_text(f'[notify]\ncommand = ["true"]\ntimeout = {timeout}\n')
    proc = tq.run("daemon", check=False)
    no_traceback(proc, {78})
    assert len(proc.stderr.decode().strip().splitlines()) == 1, proc.stderr.decode()
    assert "notify.timeout" in proc.stderr.decode()


def test_fifos_in_run_and_logs_never_hang_a_reader(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    prom = tmp_path / "taskq.prom"
    daemon = start_daemon("--metrics-file", str(prom), "--rescan", "0.2s")
    task_id = tq.submit("--", "true")
    tq.wait_state(task_id, ("done",))
    journal = tq.spool / "logs" / task_id / "journal"
    journal.unlink()
    os.mkfifo(journal)
    counts = tq.spool / "run" / "counts.tsv"
    counts.unlink(missing_ok=True)
    os.mkfifo(counts)
    os.mkfifo(tq.spool / "run" / "testhost_1.status")  # a daemon record that is a FIFO
    for command in (["stats"], ["show", task_id], ["wait", task_id], ["status"], ["ls"]):
        no_traceback(tq.run(*command, check=False), {0})  # run's own timeout: 60 s
    started = time.time()
    wait_for(lambda: prom.exists() and prom.stat().st_mtime > started, 30, "a metrics count")
    assert daemon.proc.poll() is None
    no_traceback(tq.run("fsck", check=False), {0, 1})
    assert not journal.exists()  # fsck set it aside: the next append makes a journal again


def test_an_end_whose_name_is_taken_never_wedges_the_daemon(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    """A copy of a task's exact name in failed/: its end rename finds EEXIST (issue 23, hole 2)."""
    task_id = tq.submit("--in", "1s", "--expires", "1ms", "--", "true")
    (pending,) = (tq.spool / "pending").glob(f"*/*_{task_id}_*")
    (tq.spool / "failed" / pending.name).write_bytes(pending.read_bytes())
    time.sleep(1.1)  # due, and past its 1 ms: the daemon expires it at once
    daemon = start_daemon()
    tq.wait_state(task_id, ("failed",))
    assert (tq.spool / "failed" / pending.name).exists()
    assert "retrying" not in daemon.text() and daemon.proc.poll() is None
    refused = [ln for ln in daemon.text().splitlines() if "quarantined" in ln]
    assert len(refused) == 1 and f"failed/{pending.name}" in refused[0], daemon.text()
    tq.wait_state(tq.submit("--", "true"), ("done",))  # and the loop goes on


def test_a_file_two_daemons_died_reading_is_quarantined_by_the_third(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path, stamps: Path
) -> None:
    """The second-death rule (taskq-daemon(8) BAD FILES), with real deaths by SIGKILL."""
    poison = tq.submit("--", *stamp_cmd(stamps))
    for n in (1, 2):  # each dies right after reading the body, in the guard's handling
        assert run_until_it_dies(tq, tmp_path / f"dies{n}.log", "daemon.read") == -9
    assert "a second death sets it aside" in (tmp_path / "dies2.log").read_text()
    daemon = start_daemon()
    good = tq.submit("--", *stamp_cmd(stamps))
    tq.wait_state(good, ("done",))
    assert [t for t, _, _ in read_stamps(stamps)] == [good]
    (reason,) = (tq.spool / "corrupt").glob(f"*{poison}*.reason")
    assert "died twice while handling it (prepare)" in reason.read_text()
    assert "died twice" in daemon.text()
