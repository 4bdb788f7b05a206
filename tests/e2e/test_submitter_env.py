"""The submitter's environment, umask and directory, recorded as at(1) does."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq

StartDaemon = Callable[..., Daemon]


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """Run the block (and the processes it starts) under mask."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def submit_as(tq: Taskq, mask: int, env: dict[str, str], *args: str) -> str:
    """taskq submit from a shell with this umask and exactly this environment."""
    full = {**env, "TASKQ_SPOOL": str(tq.spool)}
    argv = ["sh", "-c", f'umask {mask:03o}; exec "$@"', "sh", *TASKQ, "submit", *args]
    done = subprocess.run(argv, env=full, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def _tool(tmp_path: Path) -> Path:
    """A directory holding a command `mytool` that only the submitter's PATH finds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "mytool"
    tool.write_text("#!/bin/sh\necho mytool ran\n")
    tool.chmod(0o755)
    return bin_dir


@pytest.mark.slow
def test_the_task_sees_the_submitters_path_umask_and_directory(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    bin_dir = _tool(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with umask(0o077):  # the daemon's own: private files, and no bin_dir on its PATH
        start_daemon(env={"PATH": "/usr/bin:/bin"})
    path = f"{bin_dir}:/usr/bin:/bin"
    script = 'echo "$PATH"; umask; mytool; echo made > made; pwd'
    env = {"PATH": path, "HOME": str(tmp_path), "MYVAR": "from the shell"}
    task_id = submit_as(tq, 0o027, env, "--cwd", str(work), "--", "sh", "-c", script)
    tq.wait_state(task_id, ("done",), timeout=60)
    assert tq.run("logs", task_id).stdout.decode() == f"{path}\n0027\nmytool ran\n{work}\n"
    assert (work / "made").stat().st_mode & 0o777 == 0o640  # 0666 & ~027


@pytest.mark.slow
def test_left_out_variables_and_overrides(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    start_daemon()
    env = {
        "PATH": "/usr/bin:/bin",
        "MYVAR": "kept",
        "OTHER": "recorded",
        "TERM": "xterm",
        "DISPLAY": ":0",
        "SHLVL": "3",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "TASKQ_FOO": "bar",
        "TASKQ_TIMEFMT": "utc",
    }
    script = "env | sort | grep -E '^(MYVAR|OTHER|TERM|DISPLAY|SHLVL|SSH_AUTH_SOCK|TASKQ_FOO)='"
    task_id = submit_as(tq, 0o022, env, "--env", "OTHER=given", "--", "sh", "-c", script)
    tq.wait_state(task_id, ("done",), timeout=60)
    # sh sets SHLVL itself (to 1: the supervisor's), never the recorded 3.
    out = tq.run("logs", task_id).stdout.decode().splitlines()
    assert [line for line in out if not line.startswith("SHLVL=")] == [
        "MYVAR=kept",
        "OTHER=given",
    ]
    assert "SHLVL=3" not in out
    recorded = tq.run("show", "--env", task_id).stdout.decode().splitlines()
    assert "MYVAR=kept" in recorded and "OTHER=given" in recorded
    assert not [v for v in recorded if v.startswith(("TERM=", "DISPLAY=", "TASKQ_", "SSH_"))]


@pytest.mark.slow
def test_no_env_records_nothing(tq: Taskq, start_daemon: StartDaemon, tmp_path: Path) -> None:
    with umask(0o077):
        start_daemon()
    env = {"PATH": f"{_tool(tmp_path)}:/usr/bin:/bin", "MYVAR": "not recorded"}
    script = 'echo "$PATH|${MYVAR-unset}|$A"; umask'
    task_id = submit_as(tq, 0o002, env, "--no-env", "--env", "A=1", "--", "sh", "-c", script)
    tq.wait_state(task_id, ("done",), timeout=60)
    assert tq.run("logs", task_id).stdout.decode() == "/usr/local/bin:/usr/bin:/bin|unset|1\n0077\n"
    shown = tq.run("show", task_id).stdout.decode()
    assert "env:       not recorded (--no-env): 2 variables" in shown
    assert "umask:     not recorded (the daemon's)" in shown


@pytest.mark.slow
def test_show_says_what_was_recorded(tq: Taskq) -> None:
    # LC_CTYPE set, or Python's start-up would set it (PEP 538) and it would be recorded.
    env = {"PATH": "/usr/bin:/bin", "GREETING": "hello, world", "EMPTY": "", "LC_CTYPE": "C.UTF-8"}
    task_id = submit_as(tq, 0o027, env, "--in", "1h", "--", "true")
    shown = tq.run("show", task_id).stdout.decode()
    assert "env:       4 variables, recorded at submit (taskq show --env ID prints them)" in shown
    assert "umask:     0027" in shown
    printed = tq.run("show", "--env", task_id).stdout.decode()
    assert printed == "EMPTY=''\nGREETING='hello, world'\nLC_CTYPE=C.UTF-8\nPATH=/usr/bin:/bin\n"
    doc = tq.show(task_id)
    assert doc["env"] == env and doc["umask"] == "0027" and doc["env_recorded"] is True
    [path] = (tq.spool / "pending").glob(f"*/*_{task_id}_*")
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_environment_over_the_limit_is_refused(tq: Taskq) -> None:
    # Three of 100 KiB: one string of an exec's environment may not pass 128 KiB.
    env = {"PATH": "/usr/bin:/bin", **{f"BIG{i}": "x" * (100 << 10) for i in range(3)}}
    argv = [*TASKQ, "submit", "--", "true"]
    full = {**env, "TASKQ_SPOOL": str(tq.spool)}
    done = subprocess.run(argv, env=full, capture_output=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.decode().count("\n") == 1
    assert "over the limit of 262144" in done.stderr.decode()
    assert not list((tq.spool / "pending").glob("*/*"))
    # --no-env is the way out, as the message says.
    argv = [*TASKQ, "submit", "--no-env", "--", "true"]
    done = subprocess.run(argv, env=full, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.slow
def test_batch_lines_start_from_the_recorded_environment(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    start_daemon()
    lines = tmp_path / "batch.ndjson"
    lines.write_text(
        '{"command": ["sh", "-c", "echo $MYVAR $LINE; umask"], "env": {"LINE": "one"}}\n'
        '{"command": ["sh", "-c", "echo $MYVAR $LINE; umask"]}\n'
    )
    env = {"PATH": "/usr/bin:/bin", "MYVAR": "shell"}
    first, second = submit_as(tq, 0o027, env, "--batch", str(lines)).splitlines()
    for task_id in (first, second):
        tq.wait_state(task_id, ("done",), timeout=60)
    assert tq.run("logs", first).stdout.decode() == "shell one\n0027\n"
    assert tq.run("logs", second).stdout.decode() == "shell\n0027\n"
