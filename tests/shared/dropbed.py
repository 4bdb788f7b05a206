"""A shared spool, a root daemon, and throwaway members: the one bed of the shared-spool attacks.

alice (the victim) and mallory (the attacker) are members of a throwaway
group; mallory does what any member can do with a shell (cp, mv, ln -s,
mkfifo, touch) wherever the kernel lets him. The spool is shared as
`taskq init --shared` makes it (the drop's tests), or as its `share`
function says (test_shared_attacks.py's spool shared the old way).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, wait_for

from taskq.spool import drop
from taskq.spool.task import TaskBody

NEEDS_USERS = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None,
    reason="needs root, useradd and setpriv to make throwaway users",
)
DEADLINE = 30


@dataclass
class Bed:
    """A shared spool, its root daemon, and the members' taskq."""

    tq: Taskq  # root's
    top: Path  # 0755: members reach the spool and the scratch directory below it
    scratch: Path  # 1777: where members' tasks leave their markers
    taskq: list[str]  # a taskq command members can run
    group: str
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def spool(self) -> Path:
        return self.tq.spool

    @property
    def daemon(self) -> Daemon:
        return self.daemons[-1]

    def start_daemon(self, *args: str, env: dict[str, str] | None = None) -> Daemon:
        log = self.top / f"daemon{len(self.daemons)}.log"
        self.daemons.append(Daemon(self.tq, log, "--host-id", "shared", *args, env=env))
        return self.daemon

    def as_user(
        self, user: str, *argv: str, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command as a member, with his groups, from /."""
        pw = pwd.getpwnam(user)
        prefix = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
        env = {**os.environ, "TASKQ_SPOOL": str(self.spool), "HOME": "/"}
        return subprocess.run(
            [*prefix, *argv],
            env=env,
            capture_output=True,
            text=input is None,
            input=input,
            cwd="/",
            timeout=90,
        )

    def spawn_as(self, user: str, *argv: str) -> subprocess.Popen[str]:
        """Start a command as a member, in the background."""
        pw = pwd.getpwnam(user)
        prefix = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
        env = {**os.environ, "TASKQ_SPOOL": str(self.spool), "HOME": "/"}
        return subprocess.Popen(
            [*prefix, *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )

    def taskq_as(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.as_user(user, *self.taskq, *args)

    def shell_as(self, user: str, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a shell script as a member; return what it did (an attack may be refused)."""
        return self.as_user(user, "sh", "-c", script, "sh", *args)

    def run_script_as(self, user: str, script: str, *args: str) -> None:
        """Run a shell script as a member; each command must succeed (the attack is possible)."""
        proc = self.as_user(user, "sh", "-ec", script, "sh", *args)
        assert proc.returncode == 0, proc.stderr

    def submit_as(self, user: str, *args: str) -> str:
        proc = self.taskq_as(user, "submit", "--cwd", "/", *args)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def state(self, task: str) -> str | None:
        """A task's state as root sees it; None while its submission is still in the drop."""
        proc = self.tq.run("show", "--json", task, check=False)
        if proc.returncode == 3:  # no task (yet): a daemon has not taken it in
            return None
        assert proc.returncode == 0, proc.stderr
        return str(json.loads(proc.stdout)["state"])

    def wait_state(self, task: str, states: tuple[str, ...]) -> None:
        """Wait until the task is filed and in one of states."""
        wait_for(lambda: self.state(task) in states, DEADLINE, f"task {task} to reach {states}")

    def pending_file(self, task_id: str) -> Path:
        [path] = (self.spool / "pending").glob(f"*/*_{task_id}_*")
        return path

    def uid(self, user: str) -> int:
        return pwd.getpwnam(user).pw_uid

    def plant(self, user: str, name: str, data: bytes) -> None:
        """Put a file of `user`'s own making in drop/ under any name, as his shell could."""
        source = self.scratch / f"plant-{uuid.uuid4().hex}"
        source.write_bytes(data)
        source.chmod(0o644)
        target = self.spool / "drop" / name
        proc = self.shell_as(
            user, 'cp "$1" "$2.part" && mv "$2.part" "$2"', str(source), str(target)
        )
        assert proc.returncode == 0, proc.stderr
        source.unlink()

    def forged_submission(self, user: str, body: TaskBody) -> tuple[str, bytes]:
        """A drop file's name and bytes for `body` under its own id, with a valid-looking nonce."""
        _, nonce = drop.member_id(self.uid(user), 0)
        return f"{body.id}.task", drop.encode_submission(nonce, body)

    def logged(self, text: str) -> str:
        """Wait for a line of the daemon's log holding text; return that line."""

        def line() -> str | None:
            return next((x for x in self.daemon.text().splitlines() if text in x), None)

        return str(wait_for(line, DEADLINE, f"the daemon to log {text!r}"))

    def reasons(self) -> str:
        return "".join(p.read_text() for p in (self.spool / "corrupt").glob("*.reason"))


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_members() -> Iterator[tuple[str, str]]:
    """Two throwaway users in a throwaway group: (alice, mallory). (A fixture's body.)"""
    tag = uuid.uuid4().hex[:6]
    group, names = f"tqg{tag}", (f"tqa{tag}", f"tqm{tag}")
    subprocess.run(["groupadd", group], check=True)
    for name in names:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/bin/sh", "-G", group, name], check=True
        )
    yield names
    for name in names:
        subprocess.run(["userdel", name], check=False)
    subprocess.run(["groupdel", group], check=False)


def init_shared(tq: Taskq, group: str) -> None:
    """Share a new spool as taskq does: `taskq init --shared GROUP SPOOL`."""
    tq.run("init", "--shared", group, str(tq.spool))


def make_bed(
    members: tuple[str, str],
    others_taskq: list[str],
    share: Callable[[Taskq, str], None] = init_shared,
) -> Iterator[Bed]:
    """A spool shared with the members' group by `share`, run by root. (A fixture's body.)"""
    [group] = [g.gr_name for g in grp.getgrall() if members[0] in g.gr_mem]
    top = Path(tempfile.mkdtemp(prefix="taskq-shared-"))
    top.chmod(0o755)
    scratch = top / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    tq = Taskq(top / "spool")
    share(tq, group)
    box = Bed(tq, top, scratch, others_taskq, group)
    try:
        yield box
    finally:
        for daemon in box.daemons:
            daemon.stop()  # (one that died already: its log closed)
        shutil.rmtree(top)
