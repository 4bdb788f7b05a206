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
from conftest import Daemon, Taskq, wait_for

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


@pytest.mark.slow
def test_root_daemon_runs_each_task_as_its_owner(
    tq: Taskq, start_daemon: StartDaemon, users: list[str]
) -> None:
    script = 'echo "$(id -u) $(id -g) $HOME $USER $LOGNAME"'
    mine = tq.submit("--cwd", "/", "--", "sh", "-c", script)
    # Root's recorded environment, and variables set to claim root, never
    # decide whom the task runs as, nor what it is told it is.
    claims = ("--env", "HOME=/root", "--env", "USER=root", "--env", "LOGNAME=root")
    theirs = tq.submit("--cwd", "/", *claims, "--", "sh", "-c", script)
    give(tq, theirs, users[0])
    start_daemon()
    tq.wait_state(mine, ("done",))
    tq.wait_state(theirs, ("done",))
    pw = pwd.getpwnam(users[0])
    assert tq.run("logs", theirs).stdout.decode() == (
        f"{pw.pw_uid} {pw.pw_gid} {pw.pw_dir} {users[0]} {users[0]}\n"
    )
    assert tq.run("logs", mine).stdout.decode().startswith("0 0 ")


@pytest.mark.slow
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


@pytest.mark.slow
def test_ordinary_daemon_runs_only_its_own_users_tasks(
    users: list[str], others_taskq: list[str]
) -> None:
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
            return subprocess.run([*as_alice, *others_taskq, *args], env=env, capture_output=True)

        own = run("submit", "--cwd", "/", "--", "true").stdout.decode().strip()
        foreign = run("submit", "--cwd", "/", "--", "true").stdout.decode().strip()
        [path] = (tq.spool / "pending").glob(f"*/*_{foreign}_*")
        os.chown(path, bob.pw_uid, bob.pw_gid)
        daemon = subprocess.Popen(
            [*as_alice, *others_taskq, "daemon", "--host-id", "alice"],
            env=env,
            stderr=subprocess.DEVNULL,
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


@pytest.mark.slow
def test_shared_spool_mode(users: list[str], others_taskq: list[str]) -> None:
    """A spool `taskq init --shared` made, like atd's: members submit, tasks run as them."""
    import grp

    group = f"tqg{uuid.uuid4().hex[:6]}"
    subprocess.run(["groupadd", group], check=True)
    top = Path(tempfile.mkdtemp(prefix="taskq-shared-"))
    os.chmod(top, 0o755)  # users must reach the spool: pytest's own tmp dirs are 0700
    tq = Taskq(top / "spool")
    daemon = None
    try:
        for user in users:
            subprocess.run(["usermod", "-a", "-G", group, user], check=True)
        gid = grp.getgrnam(group).gr_gid
        tq.run("init", "--shared", group)
        daemon = Daemon(tq, top / "daemon.log", "--host-id", "shared")
        env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
        ids = {}
        for user in users:  # both into the same minute's bucket, which the daemon makes
            pw = pwd.getpwnam(user)
            as_user = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
            argv = [
                *as_user,
                *others_taskq,
                "submit",
                "--in",
                "0.5s",
                "--cwd",
                "/",
                "--",
                "id",
                "-un",
            ]
            proc = subprocess.run(argv, env={**env, "HOME": "/"}, capture_output=True)
            assert proc.returncode == 0, proc.stderr
            ids[user] = proc.stdout.decode().strip()
        for user, task_id in ids.items():
            tq.wait_state(task_id, ("done",))
            assert tq.run("logs", task_id).stdout.decode() == f"{user}\n"
        for day in (tq.spool / "done").iterdir():  # what the daemon makes keeps the modes
            assert day.stat().st_mode & 0o7777 == 0o2750 and day.stat().st_gid == gid
        pw = pwd.getpwnam(users[0])
        log_dir = tq.spool / "logs" / ids[users[0]]
        assert (log_dir / "1.out").stat().st_uid == pw.pw_uid  # theirs to read
        assert log_dir.stat().st_uid == 0 and log_dir.stat().st_mode & 0o7777 == 0o2750
        assert (log_dir / "journal").stat().st_uid == 0  # the history stays the daemon's
        fsck = tq.run("fsck", "--dry-run").stdout.decode()
        assert fsck.startswith("fsck: 0 problem(s)"), fsck  # fsck leaves a shared spool alone
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(top)
        subprocess.run(["groupdel", group], check=False)
