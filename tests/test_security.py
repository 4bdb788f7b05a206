"""The run-as-owner security model, with throwaway users (needs root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, wait_for

StartDaemon = Callable[..., Daemon]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd to make throwaway users",
)


@pytest.fixture
def users() -> Iterator[list[str]]:
    names = [f"tq{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    yield names
    for name in names:
        subprocess.run(["userdel", name], check=False)


def give(tq: Taskq, task_id: str, user: str) -> None:
    """Make a task file belong to a user, as if that user had submitted it."""
    [path] = (tq.spool / "pending").glob(f"*/*_{task_id}_*")
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def test_root_daemon_runs_each_task_as_its_owner(
    tq: Taskq, start_daemon: StartDaemon, users: list[str]
) -> None:
    script = 'echo "$(id -u) $(id -g) $HOME $USER $LOGNAME"'
    mine = tq.submit("--cwd", "/", "--", "sh", "-c", script)
    theirs = tq.submit("--cwd", "/", "--", "sh", "-c", script)
    give(tq, theirs, users[0])
    start_daemon()
    tq.wait_state(mine, ("done",))
    tq.wait_state(theirs, ("done",))
    pw = pwd.getpwnam(users[0])
    assert tq.run("logs", theirs).stdout.decode() == (
        f"{pw.pw_uid} {pw.pw_gid} {pw.pw_dir} {users[0]} {users[0]}\n"
    )
    assert tq.run("logs", mine).stdout.decode().startswith("0 0 ")


def test_denied_and_writable_files_never_run(
    tq: Taskq, start_daemon: StartDaemon, users: list[str], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    cmd = ["--cwd", "/", "--", "sh", "-c", f"touch {marker}"]
    denied = tq.submit(*cmd)
    give(tq, denied, users[1])
    writable = tq.submit(*cmd)
    [path] = (tq.spool / "pending").glob(f"*/*_{writable}_*")
    path.chmod(0o666)
    (tq.spool / "config.toml").write_text(f'[security]\ndeny = ["{users[1]}"]\n')
    ok = tq.submit("--", "true")
    start_daemon()
    tq.wait_state(ok, ("done",))
    reasons = wait_for(
        lambda: (
            len(list((tq.spool / "corrupt").glob("*.reason"))) == 2
            and "".join(p.read_text() for p in (tq.spool / "corrupt").glob("*.reason"))
        ),
        10,
        "both files to be quarantined",
    )
    assert f"owned by {users[1]}, who may not run tasks here" in reasons
    assert "writable by group or others (mode 0666)" in reasons
    assert not marker.exists()


def test_ordinary_daemon_runs_only_its_own_users_tasks(users: list[str]) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    home = Path(tempfile.mkdtemp(prefix="taskq-user-"))
    try:
        alice, bob = (pwd.getpwnam(u) for u in users)
        os.chown(home, alice.pw_uid, alice.pw_gid)
        tq = Taskq(home / "spool")
        as_alice = [
            "setpriv",
            f"--reuid={alice.pw_uid}",
            f"--regid={alice.pw_gid}",
            "--clear-groups",
        ]
        env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "HOME": str(home)}

        def run(*args: str) -> subprocess.CompletedProcess[bytes]:
            return subprocess.run([*as_alice, *TASKQ, *args], env=env, capture_output=True)

        own = run("submit", "--cwd", "/", "--", "true").stdout.decode().strip()
        foreign = run("submit", "--cwd", "/", "--", "true").stdout.decode().strip()
        [path] = (tq.spool / "pending").glob(f"*/*_{foreign}_*")
        os.chown(path, bob.pw_uid, bob.pw_gid)
        daemon = subprocess.Popen(
            [*as_alice, *TASKQ, "daemon", "--host-id", "alice"], env=env, stderr=subprocess.DEVNULL
        )
        try:
            wait_for(lambda: "done" in run("show", "--json", own).stdout.decode(), 15, "own task")
            wait_for(lambda: list((tq.spool / "corrupt").glob("*.reason")), 10, "the foreign one")
        finally:
            daemon.terminate()
            daemon.wait(10)
        [reason] = (tq.spool / "corrupt").glob("*.reason")
        assert f"owned by uid {bob.pw_uid}, not by the daemon's user (uid {alice.pw_uid})" in (
            reason.read_text()
        )
    finally:
        shutil.rmtree(home)
