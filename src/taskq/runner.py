"""Start one attempt: a supervised child in its own session, output to logs/.

Each attempt runs under a minimal sh supervisor in a new session (so the
whole process group can be signalled). The supervisor holds an flock()ed
status file open on fd 3 while the command runs and writes the command's
exit status into it when it ends. The lock and the status outlive the
daemon: a restarted daemon can tell a live orphan (the lock is held) from a
finished one (status written) from a lost one (neither), and so never runs
an attempt twice merely because the daemon crashed.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pwd
import signal
from dataclasses import dataclass

from taskq import fsutil
from taskq.security import RunAs
from taskq.task import TaskBody, TaskName
from taskq.timespec import format_iso

# $1 is the working directory; the rest is the command. The command does not
# inherit fd 3, so only the supervisor holds the status lock. The supervisor
# catches SIGTERM (sent to the whole group on timeout or cancel) so that it
# outlives the command and records how it ended; a caught signal reverts to
# its default in the command, which sees the TERM as usual. SIGKILL ends both.
# It writes "S" before anything else: an empty status file, unlocked, is an
# attempt that never began (its daemon died between creating it and the spawn).
SUPERVISOR = (
    'trap : TERM; echo S >&3; cd -- "$1" || { echo 126 >&3; exit 126; }; shift; '
    '"$@" 3>&-; s=$?; echo $s >&3; exit $s'
)
SH = "/bin/sh"


def out_path(log_dir: str, attempt: int) -> str:
    return os.path.join(log_dir, f"{attempt}.out")


def status_path(log_dir: str, attempt: int) -> str:
    return os.path.join(log_dir, f"{attempt}.status")


@dataclass
class Spawned:
    """A started attempt: the supervisor's pid (also its process group)."""

    pid: int
    proc_start: int | None


@functools.cache
def _identity(uid: int) -> dict[str, str]:
    """HOME, USER, LOGNAME and SHELL for a user, as login would set them."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return {"SHELL": SH}
    return {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": SH}


def task_env(
    body: TaskBody, name: TaskName, spool_root: str, run_at: int, user: RunAs | None = None
) -> dict[str, str]:
    """The child's environment: the body's env, identity, and TASKQ_* facts."""
    env = dict(body.env)
    if user is not None and user.switch:
        # Another user's task: its identity, not the daemon's, as login would set it.
        ident = {"HOME": user.home, "USER": user.name, "LOGNAME": user.name, "SHELL": SH}
        env.update(ident)
    for k, v in _identity(os.getuid()).items():
        env.setdefault(k, v)
    env.update(
        TASKQ_ID=body.id,
        TASKQ_ATTEMPT=str(name.attempt),
        TASKQ_RUN_AT=format_iso(run_at),  # as submitted or rescheduled; same for every retry
        TASKQ_DUE_AT=format_iso(name.run_at),  # this attempt's due time (later on a retry)
        TASKQ_QUEUE=body.queue,
        TASKQ_SPOOL=spool_root,
    )
    return env


def spawn(
    body: TaskBody, name: TaskName, log_dir: str, env: dict[str, str], user: RunAs | None = None
) -> Spawned:
    """Start the attempt; the status file is locked before the child exists."""
    fsutil.ensure_dir(log_dir)
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    status_fd = os.open(status_path(log_dir, name.attempt), flags | os.O_RDWR | os.O_TRUNC, 0o600)
    out_fd = os.open(out_path(log_dir, name.attempt), flags | os.O_WRONLY | os.O_APPEND, 0o600)
    in_fd = _stdin_fd(body.stdin)
    try:
        fcntl.flock(status_fd, fcntl.LOCK_EX)
        argv = [SH, "-c", SUPERVISOR, "taskq-attempt", body.cwd, *body.argv]
        if user is not None and user.switch:
            # The owner may read its attempt's output and status. Through the
            # open descriptors: a name could be swapped for a link meanwhile.
            # The directory and the journal stay the daemon's.
            os.fchown(out_fd, user.uid, user.gid)
            os.fchown(status_fd, user.uid, user.gid)
            pid = _fork_as(user, argv, env, (in_fd, out_fd, out_fd, status_fd))
            return Spawned(pid, proc_start_time(pid))
        pid = os.posix_spawn(
            SH,
            [SH, "-c", SUPERVISOR, "taskq-attempt", body.cwd, *body.argv],
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, in_fd, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, out_fd, 2),
                (os.POSIX_SPAWN_DUP2, status_fd, 3),
            ],
            setsid=True,
            setsigdef=(
                signal.SIGPIPE,
                signal.SIGINT,
                signal.SIGTERM,
                signal.SIGHUP,
                signal.SIGCHLD,
            ),
        )
    finally:
        for fd in (status_fd, out_fd, in_fd):
            os.close(fd)
    return Spawned(pid, proc_start_time(pid))


def _fork_as(user: RunAs, argv: list[str], env: dict[str, str], fds: tuple[int, ...]) -> int:
    """fork, then in the child: new session, fds 0-3, the user's groups, gid, uid; exec.

    posix_spawn cannot change user, so a root daemon running another user's
    task forks. Between fork and exec the child makes only a few system calls
    through Python (no locks of the daemon's other thread are needed for
    them), and exits 127 if any of them fails.
    """
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.setgroups(list(user.groups))
        os.setgid(user.gid)
        os.setuid(user.uid)
        os.execve(argv[0], argv, env)
    finally:
        os._exit(127)


def _stdin_fd(data: bytes | None) -> int:
    """An fd reading the payload from its start, or /dev/null."""
    if data is None:
        return os.dup(_devnull())
    fd = os.memfd_create("taskq-stdin", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@functools.cache
def _devnull() -> int:
    """One /dev/null descriptor for the daemon's life; each child gets a dup."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (guards pid reuse)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields follow the last ')'.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def kill_group(pid: int, sig: int) -> None:
    """Signal an attempt's whole process group; a vanished group is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def supervisor_alive(log_dir: str, attempt: int) -> bool:
    """Tell whether an attempt's supervisor still runs (holds the status lock)."""
    try:
        fd = os.open(status_path(log_dir, attempt), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def read_status(log_dir: str, attempt: int) -> int | None:
    """The exit status the supervisor recorded, or None if it recorded none."""
    return read_supervisor(log_dir, attempt)[1]


def read_supervisor(log_dir: str, attempt: int) -> tuple[bool, int | None]:
    """(whether the supervisor began, the exit status it recorded if any)."""
    try:
        with open(status_path(log_dir, attempt), "rb") as f:
            lines = f.read(64).split()
    except FileNotFoundError:
        return False, None
    began = b"S" in lines
    code = int(lines[-1]) if lines and lines[-1].isdigit() else None
    return began or code is not None, code
