"""Every command that changes the spool, with its standard streams closed, full or broken.

The exit status must say whether the change was made (taskq(1), EXIT
STATUS): 0 once it is durable, printed or not, so that a caller who retries
on a failure (75 above all) never makes it twice; any other status only
when nothing changed. No traceback, no hang. Each command runs against a
fresh copy of one prepared spool, and a probe reads the spool's files to
tell whether its change is there.

"Full" is a character device 1,7 made with mknod in the test's own
directory (as /dev/full is: writes fail with ENOSPC, reads give zeros);
without root those cases are left out. A broken pipe is a pipe whose
reader has gone (EPIPE).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TASKQ, Taskq
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # each case is a real process; the prepared spool, a daemon's run
EXAMPLES = int(os.environ.get("TASKQ_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BATCH = b'{"command": ["true"], "in": "1h"}\n{"command": ["true"], "in": "2h"}\n'


@dataclass(frozen=True)
class Prepared:
    """The template spool and the tasks in it that commands act on."""

    spool: Path
    pending: str  # a pending task, due in a day
    failed: str  # a task that failed its one attempt
    devices: Path | None  # a directory with `full` (1,7) and `null` (1,3), if mknod works


def _devices(top: Path) -> Path | None:
    """Device nodes of our own (never the host's /dev/null or /dev/full): root only."""
    top.mkdir()
    try:
        os.mknod(top / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        os.mknod(top / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (top / "full").open("wb").close()  # a nodev mount refuses to open it
    except OSError:
        return None
    return top


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    top = tmp_path_factory.mktemp("stdio")
    tq = Taskq(top / "spool")
    pending = tq.submit("--in", "1d", "--", "true")
    failed = tq.submit("--max-attempts", "1", "--", "false")
    done = tq.submit("--", "true")
    daemon = subprocess.Popen(
        [*TASKQ, "daemon", "--host-id", "stdio"],
        env={**os.environ, "TASKQ_SPOOL": str(tq.spool)},
        stderr=subprocess.DEVNULL,
    )
    try:
        tq.wait_state(failed, ("failed",), timeout=60)
        tq.wait_state(done, ("done",), timeout=60)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    (day,) = os.listdir(tq.spool / "done")
    os.rename(tq.spool / "done" / day, tq.spool / "done" / "20000101")  # for gc to remove
    tq.run("pause", "held")
    for name in ("nightly", "sleepy"):
        tq.run("schedule", "add", name, "--cron", "0 0 1 1 *", "--", "true")
    tq.run("schedule", "pause", "sleepy")
    (tq.spool / "stray").write_text("not part of a spool\n")  # for fsck to quarantine
    return Prepared(tq.spool, pending, failed, _devices(top / "dev"))


def _names(directory: Path) -> Iterator[str]:
    return (p.name for p in directory.rglob("*") if p.is_file())


def _pending(spool: Path) -> list[str]:
    return list(_names(spool / "pending"))


def _schedule(spool: Path, name: str) -> dict[str, object] | None:
    path = spool / "schedules" / name / "schedule.json"
    return json.loads(path.read_text()) if path.exists() else None


@dataclass(frozen=True)
class Command:
    """A command that changes the spool, and how to tell whether it did."""

    name: str
    argv: Callable[[Prepared, Path], list[str]]  # given the spool copy it acts on
    changed: Callable[[Prepared, Path], bool]  # its change is in the spool copy
    stdin: bytes | None = None  # what it reads, when its standard input works

    def __repr__(self) -> str:
        return self.name


def _queued(spool: Path) -> int:
    return sum(1 for state in ("pending", "waiting") for _ in _names(spool / state))


def _queued_more(p: Prepared, s: Path) -> bool:
    """A task more in pending/ or waiting/ than in the template."""
    return _queued(s) > _queued(p.spool)


def _submitted(count: int) -> Callable[[Prepared, Path], bool]:
    return lambda p, s: len(_pending(s)) == len(_pending(p.spool)) + count


COMMANDS = [
    Command("submit", lambda p, s: ["submit", "--in", "1h", "--", "true"], _submitted(1)),
    Command("submit --json", lambda p, s: ["submit", "--json", "--", "true"], _submitted(1)),
    Command(
        "submit --stdin",
        lambda p, s: ["submit", "--stdin", "--in", "1h", "--", "cat"],
        _submitted(1),
        stdin=b"payload\n",
    ),
    Command(
        "submit --batch -", lambda p, s: ["submit", "--batch", "-"], _submitted(2), stdin=BATCH
    ),
    Command(
        "cancel",
        lambda p, s: ["cancel", p.pending],
        lambda p, s: any(p.pending in n for n in _names(s / "cancelled")),
    ),
    Command(
        "reschedule",
        lambda p, s: ["reschedule", p.pending, "--in", "2d"],
        lambda p, s: set(_pending(s)) != set(_pending(p.spool)),
    ),
    Command(
        "retry",
        lambda p, s: ["retry", p.failed, "--in", "1h"],
        lambda p, s: any(p.failed in n for n in _pending(s)),
    ),
    Command(
        "pause", lambda p, s: ["pause", "other"], lambda p, s: (s / "paused" / "other").exists()
    ),
    Command(
        "resume", lambda p, s: ["resume", "held"], lambda p, s: not (s / "paused" / "held").exists()
    ),
    Command(
        "schedule add",
        lambda p, s: ["schedule", "add", "weekly", "--cron", "0 0 * * 0", "--", "true"],
        lambda p, s: _schedule(s, "weekly") is not None,
    ),
    Command(
        "schedule pause",
        lambda p, s: ["schedule", "pause", "nightly"],
        lambda p, s: (_schedule(s, "nightly") or {}).get("paused") is True,
    ),
    Command(
        "schedule resume",
        lambda p, s: ["schedule", "resume", "sleepy"],
        lambda p, s: (_schedule(s, "sleepy") or {}).get("paused") is False,
    ),
    Command(
        "schedule rm",
        lambda p, s: ["schedule", "rm", "nightly"],
        lambda p, s: _schedule(s, "nightly") is None,
    ),
    Command("at", lambda p, s: ["at", "now + 1 hour"], _submitted(1), stdin=b"true\n"),
    Command("batch", lambda p, s: ["batch"], _submitted(1), stdin=b"true\n"),
    Command(
        "atrm",
        lambda p, s: ["atrm", p.pending],
        lambda p, s: any(p.pending in n for n in _names(s / "cancelled")),
    ),
    Command("schedule run", lambda p, s: ["schedule", "run", "nightly"], _queued_more),
    Command(
        "schedule skip",
        lambda p, s: ["schedule", "skip", "nightly"],
        lambda p, s: (_schedule(s, "nightly") or {}).get("skip_before") is not None,
    ),
    Command(
        "schedule backfill",
        lambda p, s: [
            "schedule",
            "backfill",
            "nightly",
            "--from",
            "2020-01-01T00:00:00Z",
            "--to",
            "2021-06-01T00:00:00Z",
        ],
        _queued_more,
    ),
    Command("gc", lambda p, s: ["gc"], lambda p, s: not (s / "done" / "20000101").exists()),
    Command("fsck", lambda p, s: ["fsck"], lambda p, s: not (s / "stray").exists()),
    Command(
        "init", lambda p, s: ["init", str(s / "new")], lambda p, s: (s / "new/pending").is_dir()
    ),
]
if os.geteuid() == 0:  # only root shares a spool
    COMMANDS.append(
        Command(
            "init --shared",
            lambda p, s: ["init", "--shared", "root", str(s)],
            lambda p, s: (s / "drop").is_dir(),
        )
    )

STDOUT = ["closed", "full", "broken pipe", "pipe"]
STDIN = ["closed", "full", "null", "pipe"]
STDERR = ["closed", "full", "pipe"]
_copies = itertools.count()


@dataclass
class Ran:
    status: int
    stdout: bytes
    stderr: bytes


def run(p: Prepared, tmp_path: Path, cmd: Command, out: str, inp: str, err: str) -> Ran:
    """Run cmd on a fresh copy of the spool with its streams so; the copy is p's spool no more."""
    spool = tmp_path / f"copy{next(_copies)}"
    shutil.copytree(p.spool, spool, symlinks=True)
    redirect = {"closed": "{fd}>&-", "full": "{fd}>{dev}/full", "null": "{fd}<{dev}/null"}
    shell = " ".join(
        redirect[how].format(fd=fd, dev=p.devices)
        for fd, how in ((0, inp), (1, out), (2, err))
        if how in redirect
    )
    argv = ["sh", "-c", f'exec "$@" {shell}', "sh", *TASKQ, *cmd.argv(p, spool)]
    env = {**os.environ, "TASKQ_SPOOL": str(spool)}
    reader, writer = os.pipe()
    if out == "broken pipe":
        os.close(reader)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=writer if out == "broken pipe" else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        os.close(writer)
        stdout, stderr = proc.communicate(cmd.stdin or b"", timeout=60)
    finally:
        if out != "broken pipe":
            os.close(reader)
    ran = Ran(proc.returncode, stdout or b"", stderr or b"")
    check(p, spool, cmd, (out, inp, err), ran)
    shutil.rmtree(spool)
    return ran


def check(p: Prepared, spool: Path, cmd: Command, how: tuple[str, str, str], ran: Ran) -> None:
    out, inp, err = how
    text = ran.stderr.decode("utf-8", "replace")
    where = f"taskq {cmd.name} (stdout {out}, stdin {inp}, stderr {err}): exit {ran.status}"
    assert "Traceback" not in text, f"{where}\n{text}"
    changed = cmd.changed(p, spool)
    if ran.status == 0:
        assert changed, f"{where}, but its change is not in the spool\n{text}"
    else:
        assert not changed, f"{where} reads as 'not done', but its change was made\n{text}"
        assert cmd.stdin is not None and inp in ("closed", "full"), f"{where}\n{text}"
        assert ran.status == 2, f"{where}: bad input is 2\n{text}"
        if err == "pipe":
            assert text.startswith("taskq: ") and text.count("\n") == 1, f"{where}\n{text}"
    if ran.status == 0 and out != "pipe" and err == "pipe":
        assert "but cannot write standard output" in text, f"{where}: say it was done\n{text}"
    if out == "pipe" and ran.status == 0:
        assert ran.stdout, f"{where}: printed nothing"


@pytest.mark.parametrize("cmd", COMMANDS, ids=repr)
@pytest.mark.parametrize("out", ["full", "closed"])
def test_a_change_made_reads_as_made_when_stdout_fails(
    prepared: Prepared, tmp_path: Path, cmd: Command, out: str
) -> None:
    if out == "full" and prepared.devices is None:
        pytest.skip("needs root for a device node of its own (mknod)")
    ran = run(prepared, tmp_path, cmd, out, "pipe", "pipe")
    assert ran.status == 0, ran.stderr.decode()


def test_submit_to_a_full_stdout_says_its_id_on_stderr(prepared: Prepared, tmp_path: Path) -> None:
    """The README's retry loop retries on 75: `submit > /dev/full` must exit 0, and say the id."""
    if prepared.devices is None:
        pytest.skip("needs root for a device node of its own (mknod)")
    ran = run(prepared, tmp_path, COMMANDS[0], "full", "pipe", "pipe")
    message = ran.stderr.decode()
    assert ran.status == 0, message
    assert message.startswith("taskq: submitted ") and message.count("\n") == 1, message
    assert "No space left on device" in message


@FUZZ
@given(
    cmd=st.sampled_from(COMMANDS),
    out=st.sampled_from(STDOUT),
    inp=st.sampled_from(STDIN),
    err=st.sampled_from(STDERR),
)
def test_fuzzed_streams_never_make_a_change_read_as_not_made(
    prepared: Prepared, tmp_path: Path, cmd: Command, out: str, inp: str, err: str
) -> None:
    assume(prepared.devices is not None or "full" not in (out, inp, err))
    assume(not (inp == "null" and cmd.name == "submit --batch -"))  # no lines: nothing to make
    run(prepared, tmp_path, cmd, out, inp, err)


def test_reading_commands_fail_when_stdout_is_full(prepared: Prepared, tmp_path: Path) -> None:
    """A command that only reads has failed when it cannot print: 1, not 75 (the spool is fine)."""
    if prepared.devices is None:
        pytest.skip("needs root for a device node of its own (mknod)")
    env = {**os.environ, "TASKQ_SPOOL": str(prepared.spool)}
    for argv in (["ls"], ["show", prepared.pending], ["stats"], ["schedule", "ls"]):
        with open(prepared.devices / "full", "wb") as full:
            proc = subprocess.run(
                [*TASKQ, *argv], stdout=full, stderr=subprocess.PIPE, env=env, timeout=60
            )
        message = proc.stderr.decode()
        assert proc.returncode == 1, (argv, message)
        assert message == "taskq: cannot write standard output: No space left on device\n"


@pytest.mark.parametrize(("out", "inp"), [("closed", "closed"), ("full", "full")])
def test_a_daemon_with_its_stdin_and_stdout_closed_or_full_runs_tasks(
    prepared: Prepared, tmp_path: Path, out: str, inp: str
) -> None:
    """Its tasks never get a spool file as standard input; it stops with status 0."""
    if prepared.devices is None and "full" in (out, inp):
        pytest.skip("needs root for a device node of its own (mknod)")
    spool = tmp_path / "spool"
    tq = Taskq(spool)
    task_id = tq.submit("--", "sh", "-c", "echo out; echo err >&2; ls -l /proc/self/fd/")
    redirect = {"closed": "{fd}>&-", "full": "{fd}>{dev}/full"}
    shell = " ".join(
        redirect[how].format(fd=fd, dev=prepared.devices) for fd, how in ((0, inp), (1, out))
    )
    shell = shell.replace("0>", "0<")
    log = tmp_path / "daemon.log"
    env = {**os.environ, "TASKQ_SPOOL": str(spool)}
    with open(log, "wb") as f:
        daemon = subprocess.Popen(
            ["sh", "-c", f'exec "$@" {shell}', "sh", *TASKQ, "daemon", "--host-id", "stdio"],
            stderr=f,
            env=env,
        )
        try:
            tq.wait_state(task_id, ("done",), timeout=60)
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(60) == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    output = (spool / "logs" / task_id / "1.out").read_text()
    assert output.startswith("out\nerr\n"), output
    (stdin,) = [line for line in output.splitlines() if " 0 -> " in line]
    assert str(spool) not in stdin, f"a spool file is the task's standard input: {stdin}"
