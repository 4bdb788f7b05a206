"""`taskq submit` through the real executable: durability layout, keys, bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TASKQ, Taskq

from taskq.client.submit import submit
from taskq.spool.defaults import default_spool
from taskq.spool.layout import Spool
from taskq.spool.task import TaskBody, TaskName, bucket_of, new_id, valid_id
from taskq.times.when import parse_when


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def pending_files(spool: Path) -> list[Path]:
    return sorted(p for p in (spool / "pending").glob("*/*"))


def test_submit_prints_id_and_writes_the_bucket(tq: Taskq) -> None:
    task_id = tq.submit("--at", "2030-01-02T03:04:05.678Z", "--", "echo", "hi there")
    assert valid_id(task_id)
    [path] = pending_files(tq.spool)
    name = TaskName.parse(path.name)
    assert name.id == task_id and name.attempt == 1
    assert path.parent.name == "203001020304" == bucket_of(name.run_at)
    body = TaskBody.from_json(path.read_bytes())
    assert body.argv == ["echo", "hi there"]
    assert body.env["PATH"] == os.environ["PATH"]  # recorded, as at(1) does
    assert body.env_recorded and body.umask == _umask()
    assert body.cwd == os.getcwd()
    assert list((tq.spool / "tmp").iterdir()) == []
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(tq.spool.stat().st_mode & 0o777) == "0o700"


@pytest.mark.slow
def test_submit_json_and_options(tq: Taskq, tmp_path: Path) -> None:
    out = tq.run(
        "submit",
        "--json",
        "--in",
        "1h30m",
        "--queue",
        "mail",
        "--max-attempts",
        "5",
        "--timeout",
        "30s",
        "--expires",
        "10m",
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        "--cwd",
        str(tmp_path),
        "--",
        "true",
    ).stdout
    doc = json.loads(out)
    assert doc["created"] is True
    shown = tq.show(doc["id"])
    assert shown["state"] == "pending"
    assert shown["queue"] == "mail" and shown["max_attempts"] == 5
    assert shown["timeout"] == 30.0 and shown["expires"] == 600.0
    assert shown["env"]["A"] == "1" and shown["env"]["B"] == "x=y"
    assert shown["cwd"] == str(tmp_path)
    assert shown["run_at"] == doc["run_at"]


@pytest.mark.slow
def test_key_deduplicates(tq: Taskq) -> None:
    first = tq.submit("--key", "nightly-2026-12-01", "--in", "1h", "--", "true")
    second = tq.submit("--key", "nightly-2026-12-01", "--in", "2h", "--", "false")
    other = tq.submit("--key", "another", "--", "true")
    assert first == second != other
    assert len(pending_files(tq.spool)) == 2
    doc = json.loads(tq.run("submit", "--json", "--key", "nightly-2026-12-01", "--", "true").stdout)
    assert doc == {"id": first, "created": False, "run_at": tq.show(first)["run_at"]}


def test_key_finishes_a_submission_cut_short(tq: Taskq) -> None:
    """A key bound to a body left in tmp/ (submitter killed) publishes that body."""
    first = tq.submit("--key", "k", "--in", "1h", "--", "true")
    [path] = pending_files(tq.spool)
    os.rename(path, tq.spool / "tmp" / f"{first}.task")  # as if killed before publishing
    assert tq.submit("--key", "k", "--", "false") == first
    assert [p.name for p in pending_files(tq.spool)] == [path.name]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at", "tomorrow noon noon", "--", "true"], "bad time 'tomorrow noon noon'"),
        (["--in", "5 minutes", "--", "true"], "bad duration"),
        (["--at", "now", "--in", "5m", "--", "true"], "not both"),
        (["--timeout", "0", "--", "true"], "--timeout must be longer than zero"),
        (["--env", "NOEQUALS", "--", "true"], "bad --env"),
        (["--queue", "a/b", "--", "true"], "bad queue"),
        (["--cwd", "/nonexistent/dir", "--", "true"], "is not a directory"),
        (["--max-attempts", "0", "--", "true"], "--max-attempts"),
        ([], "missing COMMAND"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    tq: Taskq, args: list[str], message: str
) -> None:
    proc = tq.run("submit", *args, check=False)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert message in err and err.startswith("taskq: ")
    assert proc.stdout == b""
    assert pending_files(tq.spool) == []


def test_stdin_over_the_limit_is_refused(tq: Taskq) -> None:
    proc = tq.run("submit", "--stdin", "--", "cat", input=b"x" * (1024 * 1024 + 1), check=False)
    assert proc.returncode == 2 and b"over the limit" in proc.stderr
    assert pending_files(tq.spool) == []


def as_nobody() -> list[str]:
    """A prefix that runs a command as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv (util-linux) is missing")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.slow
def test_unwritable_spool_is_refused(tq: Taskq, request: pytest.FixtureRequest) -> None:
    # As root, the submitter is nobody, who must be able to reach taskq.
    command = request.getfixturevalue("others_taskq") if os.geteuid() == 0 else TASKQ
    tq.submit("--", "true")
    (tq.spool / "tmp").chmod(0o500)
    os.chmod(tq.spool.parent, 0o755)
    if os.geteuid() == 0:
        os.chown(tq.spool, 65534, 65534)
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    proc = subprocess.run(
        [*as_nobody(), *command, "submit", "--", "true"], env=env, capture_output=True, cwd="/"
    )  # from /: the checkout may be a directory nobody cannot reach
    assert proc.returncode == 77, proc.stderr
    assert proc.stderr.startswith(b"taskq: ") and proc.stderr.count(b"\n") == 1
    assert len(pending_files(tq.spool)) == 1


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, for disk-full and read-only spools (needs mount rights)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=400", "tmpfs", str(mnt)],
        capture_output=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.mark.slow
def test_disk_full_is_a_temporary_failure(tq: Taskq, small_fs: Path) -> None:
    spooled = Taskq(small_fs / "spool")
    spooled.submit("--", "true")
    filler = fill(small_fs, inodes=False)
    proc = spooled.run("submit", "--stdin", "--", "cat", input=b"y" * 200_000, check=False)
    assert proc.returncode == 75, proc.stderr
    assert b"No space left on device" in proc.stderr and proc.stderr.count(b"\n") == 1
    assert len(pending_files(spooled.spool)) == 1
    assert list((spooled.spool / "tmp").iterdir()) == []
    shutil.rmtree(filler)
    spooled.submit("--", "true")  # space is back: accepted again
    assert len(pending_files(spooled.spool)) == 2


def test_read_only_spool_is_a_temporary_failure(small_fs: Path) -> None:
    spooled = Taskq(small_fs / "spool")
    spooled.submit("--", "true")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    proc = spooled.run("submit", "--", "true", check=False)
    assert proc.returncode == 75, proc.stderr
    assert b"Read-only file system" in proc.stderr and proc.stderr.count(b"\n") == 1


@pytest.mark.slow
def test_run_at_in_the_past_keeps_its_time(tq: Taskq) -> None:
    task_id = tq.submit("--at", "2001-02-03T04:05:06Z", "--", "true")
    assert parse_when(tq.show(task_id)["run_at"], 0) == parse_when("2001-02-03T04:05:06Z", 0)


def test_spool_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_spool() == str(tmp_path / "state" / "taskq")
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_spool() == os.path.expanduser("~/.local/state/taskq")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_spool() == "/var/spool/taskq"


def test_spool_option_beats_environment(tq: Taskq, tmp_path: Path) -> None:
    other = tmp_path / "other"
    tq.run("--spool", str(other), "submit", "--", "true")
    assert len(pending_files(other)) == 1 and not (tq.spool / "pending").exists()


def fill(fs: Path, inodes: bool = True) -> Path:
    """Fill a filesystem's blocks (and inodes); return the directory to remove to free it."""
    filler = fs / "filler"
    filler.mkdir()
    fd = os.open(filler / "blocks", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"x" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        for i in range(100_000 if inodes else 0):
            os.close(os.open(filler / str(i), os.O_WRONLY | os.O_CREAT))
    except OSError:
        pass
    return filler


@pytest.mark.slow
def test_daemon_waits_out_a_full_disk_and_loses_nothing(tq: Taskq, small_fs: Path) -> None:
    """No room for an attempt's logs: the task goes back to pending, not to a failed attempt."""
    from conftest import Daemon, wait_for

    spooled = Taskq(small_fs / "spool")
    spooled.submit("--", "true")  # the spool exists before the daemon
    daemon = Daemon(spooled, small_fs.parent / "daemon.log", "--host-id", "full")
    try:
        # Due only once the disk is surely full: three submissions and the
        # filling take seconds on a loaded machine (1.5 s was not enough).
        due = time.time() + 12
        ids = [spooled.submit("--at", f"@{due:.3f}", "--", "true") for _ in range(3)]
        filler = fill(small_fs)
        assert time.time() < due, "the disk was filled after the tasks fell due"
        wait_for(lambda: "pausing dispatch" in daemon.text(), 60, "the daemon to notice")
        assert daemon.proc.poll() is None
        assert all(spooled.state(i) == "pending" for i in ids)
        shutil.rmtree(filler)
        for task_id in ids:
            doc = spooled.wait_state(task_id, ("done",), timeout=30)
            assert doc["attempt"] == 1  # the full disk cost no attempt
    finally:
        daemon.stop()


@pytest.mark.slow
def test_daemon_starting_on_a_full_disk_waits(tq: Taskq, small_fs: Path) -> None:
    from conftest import Daemon, wait_for

    spooled = Taskq(small_fs / "spool")
    task_id = spooled.submit("--", "true")
    filler = fill(small_fs, inodes=False)
    daemon = Daemon(spooled, small_fs.parent / "daemon.log", "--host-id", "full")
    try:
        wait_for(lambda: "cannot measure the clock" in daemon.text(), 15, "the daemon to say why")
        assert spooled.state(task_id) == "pending" and daemon.proc.poll() is None
        shutil.rmtree(filler)
        spooled.wait_state(task_id, ("done",), timeout=30)
    finally:
        daemon.stop()
    filler = fill(small_fs)  # not even an inode for its lock: it cannot start, and says so
    proc = spooled.run("daemon", check=False)
    assert proc.returncode == 75 and proc.stderr.count(b"\n") == 1
    assert b"No space left on device" in proc.stderr


@pytest.mark.slow
def test_daemon_on_a_read_only_spool_says_so(small_fs: Path) -> None:
    spooled = Taskq(small_fs / "spool")
    spooled.submit("--", "true")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    proc = spooled.run("daemon", check=False)
    assert proc.returncode == 75, proc.stderr
    assert b"Read-only file system" in proc.stderr and proc.stderr.count(b"\n") == 1
    assert spooled.run("ls").returncode == 0  # reading still works


def test_a_new_spool_in_a_world_writable_directory_stays_private(tmp_path: Path) -> None:
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o1777)  # like /tmp
    spooled = Taskq(public / "spool")
    spooled.submit("--", "true")
    modes = {
        p.name: oct(p.stat().st_mode & 0o7777)
        for p in [spooled.spool, *spooled.spool.iterdir()]
        if p.is_dir()
    }
    assert set(modes.values()) == {"0o700"}, modes


# The start-up import budget of `taskq submit`: every task submitted one at a
# time pays for each module imported here (bench/run.py's "one `taskq
# submit` process" row measures it against `python -c 'import click'`). A
# module joins this list only when submit cannot do without it.
SUBMIT_BUDGET = {
    "taskq",
    "taskq.cli",
    "taskq.cli.common",
    "taskq.cli.main",
    "taskq.cli.output",
    "taskq.cli.params",
    "taskq.cli.submit",
    "taskq.client",
    "taskq.client.environment",
    "taskq.client.limits",
    "taskq.client.request",
    "taskq.client.submit",
    "taskq.errors",
    "taskq.spool",
    "taskq.spool.config",
    "taskq.spool.defaults",
    "taskq.spool.faults",
    "taskq.spool.fields",  # the one set of field checks: request.accepted is the reader's
    "taskq.spool.fsutil",
    "taskq.spool.hints",
    "taskq.spool.keys",
    "taskq.spool.layout",
    "taskq.spool.memo",
    "taskq.spool.record",  # Request and TaskBody, records made without compiling
    "taskq.spool.resources",  # a body's limits: a record and its checks
    "taskq.spool.task",
    "taskq.text",
    "taskq.text.lazyre",
    "taskq.times",
    "taskq.times.timespec",
}
# Never on submit's path: gettext's locale (click's help option asks for it
# unless given its text), ctypes (renameat2), the daemon's libraries, and
# what only other commands, a key, a config.toml or a crash point need;
# nor json (a plain body is laid out with json's C escaper alone) and
# dataclasses (whose classes compile their methods as they are made).
SUBMIT_NEVER = {
    "json",
    "dataclasses",
    "locale",
    "ctypes",
    "subprocess",
    "hashlib",
    "logging",
    "signal",
    "tomllib",
    "fcntl",
    "zoneinfo",
    "watchdog",
    "prometheus_client",
    "filelock",
    "daemon",
    "cronsim",
}


def test_a_submission_imports_only_its_budget(tq: Taskq) -> None:
    """Start-up is most of a submission's cost: it imports its budget and nothing else."""
    script = (
        "import sys\n"
        "from taskq.cli.main import main\n"
        "sys.argv = ['taskq', 'submit', '--in', '1h', '--', 'true']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, timeout=60, check=True
    )
    task_id, loaded_line = proc.stdout.decode().splitlines()
    assert valid_id(task_id) and len(pending_files(tq.spool)) == 1
    loaded = set(loaded_line.split())
    ours = {m for m in loaded if m == "taskq" or m.startswith("taskq.")}
    assert ours - SUBMIT_BUDGET == set(), "submit imports more of taskq than its budget"
    assert {m for m in loaded if m.split(".")[0] in SUBMIT_NEVER} == set()


def test_the_command_line_is_imported_frozen_and_runs_with_the_collector_on() -> None:
    """`taskq` (and python -m taskq) imports with the collector paused, and freezes what it made.

    The collector would otherwise walk start-up's objects at every full
    collection and at exit (taskq/__main__.py); the command itself runs with it on.
    """
    script = (
        "import gc, sys\n"
        "from taskq.__main__ import run\n"
        "sys.argv = ['taskq', '--version']\n"
        "try:\n"
        "    run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(gc.isenabled(), gc.get_freeze_count())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=True
    )
    version, collecting = proc.stdout.decode().splitlines()
    assert version.startswith("taskq, version ")
    enabled, frozen = collecting.split()
    assert enabled == "True" and int(frozen) > 10_000  # click's and taskq's modules among them


def test_a_file_forged_under_a_new_tasks_name_gives_way_to_the_task(tmp_path: Path) -> None:
    """A member who reads a new id (tmp/, ids/) and plants its name first loses the race."""
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    now = parse_when("now", 0)
    body = TaskBody(id=new_id(now), argv=["true"], run_at=now + 3_600_000_000, submitted_at=now)
    name = TaskName(body.run_at, body.id, 1, body.queue)
    bucket = Path(spool.bucket_dir(name.bucket))
    bucket.mkdir(parents=True)
    forged = TaskBody(
        id=body.id, argv=["sh", "-c", "echo forged"], run_at=body.run_at, submitted_at=now
    )
    (bucket / str(name)).write_bytes(forged.to_json())
    assert submit(spool, body) == (name, True)
    assert (bucket / str(name)).read_bytes() == body.to_json()
    assert os.listdir(spool.tmp) == []
