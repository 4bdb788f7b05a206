"""Start one attempt: a supervised command in its own session, output to logs/.

An attempt of our own without a cgroup is started by the daemon's keeper
(keeper.py), which supervises many at once; the others, and any the keeper
cannot take, run under a minimal sh supervisor in a new session (so the
whole process group can be signalled). Either supervisor holds an flock()ed
status file open on fd 3 while the command runs and writes the command's
exit status into it when it ends. The lock and the status outlive the
daemon: a restarted daemon can tell a live orphan (the lock is held) from a
finished one (status written) from a lost one (neither), and so never runs
an attempt twice merely because the daemon crashed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import pwd
import signal
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from taskq.client import fence
from taskq.daemon.cgroups import Group
from taskq.daemon.keeper import proc_start_time as proc_start_time  # (its owner)
from taskq.daemon.keeperlink import KeeperLink
from taskq.spool.layout import out_path, status_path
from taskq.spool.runas import RunAs
from taskq.spool.task import ClaimName, TaskBody, TaskName
from taskq.times.timespec import format_iso

# $1 is the status descriptor's number (3 when posix_spawn put it there; as
# inherited otherwise), $2 the gate's ("-": none), $3 the working directory,
# $4 the umask ("-": keep the daemon's), the rest the command. The
# command does not inherit the status descriptor, so only the supervisor
# holds the status lock. The supervisor catches SIGTERM (sent to the whole
# group on timeout or cancel) so that it outlives the command and records
# how it ended; a caught signal reverts to its default in the command, which
# sees the TERM as usual. SIGKILL ends both. It writes "S" before anything
# else: an empty status file, unlocked, is an attempt that never began (its
# daemon died between creating it and the spawn). An attempt with a cgroup
# waits at its gate, a pipe, until the daemon has moved it into the group
# and written "go": builtins only until then, so nothing forks outside the
# group; a gate closed without "go" (the join failed, or the daemon died)
# ends the attempt with 126 before the command runs, never unconfined.
SUPERVISOR = (
    'trap : TERM; [ "$1" = 3 ] || eval "exec 3>&$1 $1>&-"; shift; echo S >&3; '
    '[ "$1" = - ] || { g=; eval "read -r g <&$1; exec $1<&-"; [ "$g" = go ] || '
    "{ echo 'taskq: the attempt could not join its cgroup; its command was not run' >&2; "
    "echo 126 >&3; exit 126; }; }; shift; "
    'cd -- "$1" || { echo 126 >&3; exit 126; }; shift; '
    '[ "$1" = - ] || umask "$1" || { echo 126 >&3; exit 126; }; shift; '
    '"$@" 3>&-; s=$?; echo $s >&3; exit $s'
)
GATE_FD = 4  # where posix_spawn puts the gate's reading end
SH = "/bin/sh"


@dataclass
class Spawned:
    """A started attempt: its pid (also its process group), its supervisor, a join's failure."""

    pid: int
    proc_start: int | None
    kept: bool = False  # the keeper supervises it (pid is the command's); else our sh child
    unjoined: str | None = None  # why the attempt could not join its cgroup (it ends with 126)
    group: Group | None = None  # the cgroup it runs in (the starter's, for its Running)
    at: int = 0  # when it was spawned (wall µs; 0: not noted)


Join = Callable[[int], None]  # moves a process into an attempt's cgroup (cgroups.Group.join)


@functools.cache
def _identity(uid: int) -> dict[str, str]:
    """HOME, USER, LOGNAME and SHELL for a user, as login would set them."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return {"SHELL": SH}
    return {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": SH}


def task_env(
    body: TaskBody, held: ClaimName, spool_root: str, run_at: int, user: RunAs | None = None
) -> dict[str, str]:
    """The attempt's environment: the body's env, identity, and every TASKQ_* fact.

    Recorded variables never decide whom the task runs as (the owner of its
    file does); for another user's task the passwd entry's HOME, USER and
    LOGNAME, and SHELL=/bin/sh, replace what the body recorded. PATH is the
    body's (recorded, or the default). TASKQ_* are always the daemon's, made
    here from the claim the attempt starts under (taskq(1), TASK ENVIRONMENT).
    """
    name = held.task
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
        TASKQ_FENCE=str(fence.token(held)),  # taskq fence-check's token (client/fence.py)
        TASKQ_HOST=held.host,
    )
    return env


def spawn(
    body: TaskBody,
    name: TaskName,
    log_dir: str,
    env: dict[str, str],
    user: RunAs | None = None,
    join: Join | None = None,
) -> Spawned:
    """Start the attempt under an sh supervisor; the status file is locked before the child exists.

    No Python runs between fork and exec: posix_spawn for our own tasks,
    subprocess (whose child side is C) to run another user's. The log
    directory exists (ownership.bind made it). With `join`, the supervisor
    waits at its gate until join has moved it into its cgroup.
    """
    in_fd, out_fd, status_fd = _attempt_files(body, log_dir, name.attempt)
    gate_in, gate_out = os.pipe2(os.O_CLOEXEC) if join is not None else (-1, -1)
    try:
        if user is not None and user.switch:
            # The owner may read its attempt's output and status. Through the
            # open descriptors: a name could be swapped for a link meanwhile.
            # The directory and the journal stay the daemon's.
            os.fchown(out_fd, user.uid, user.gid)
            os.fchown(status_fd, user.uid, user.gid)
            child = _spawn_as(user, body, env, (in_fd, out_fd, status_fd, gate_in))
        else:
            child = _spawn_own(body, env, (in_fd, out_fd, status_fd, gate_in))
    except BaseException:
        if gate_out >= 0:
            os.close(gate_out)
        raise
    finally:
        for fd in (status_fd, out_fd, in_fd, gate_in):
            if fd >= 0:
                os.close(fd)
    if join is not None:
        child.unjoined = _open_gate(child.pid, join, gate_out)
    return child


def ask(
    keeper: KeeperLink,
    body: TaskBody,
    name: TaskName,
    log_dir: str,
    env: dict[str, str],
    user: RunAs | None = None,
    not_before: tuple[int, int] | None = None,
) -> bool:
    """Ask the keeper to start the attempt, at not_before; False if it cannot (spawn() then).

    The status file is locked before the request leaves, and its lock goes
    with the descriptor to the keeper. The answer, the pid or why not, comes
    in order with the turn's others (KeeperLink.answers). Another user's
    attempt keeps its sh supervisor: the keeper runs as the daemon's user.
    """
    if user is not None and user.switch:
        return False
    request = keeper.request(body.argv, env, body.cwd, body.umask, not_before)
    if request is None:
        return False
    fds = _attempt_files(body, log_dir, name.attempt)
    try:
        keeper.send(request, list(fds))
    finally:
        for fd in fds:
            os.close(fd)
    return True


def stage(log_dir: str, attempt: int) -> None:
    """Make an attempt's status and output files ahead of its start: empty and unlocked.

    What a start that never began leaves; the start opens them as fresh
    (and refuses them as it would then, should one fill meanwhile).
    """
    for path in (status_path(log_dir, attempt), out_path(log_dir, attempt)):
        os.close(_open_attempt_file(path, os.O_RDONLY))


def _attempt_files(body: TaskBody, log_dir: str, attempt: int) -> tuple[int, int, int]:
    """The attempt's standard input, its fresh output file and its locked status file."""
    status_fd = _lock_status(status_path(log_dir, attempt))
    try:
        out_fd = _fresh(out_path(log_dir, attempt), os.O_WRONLY | os.O_APPEND)
    except BaseException:
        os.close(status_fd)
        raise
    try:
        return _stdin_fd(body.stdin), out_fd, status_fd
    except BaseException:
        os.close(status_fd)
        os.close(out_fd)
        raise


def _spawn_own(body: TaskBody, env: dict[str, str], fds: tuple[int, int, int, int]) -> Spawned:
    """Start one of our own attempts: posix_spawn, the descriptors on 0 to 3 (and the gate on 4)."""
    in_fd, out_fd, status_fd, gate_in = fds
    actions = [
        (os.POSIX_SPAWN_DUP2, in_fd, 0),
        (os.POSIX_SPAWN_DUP2, out_fd, 1),
        (os.POSIX_SPAWN_DUP2, out_fd, 2),
        (os.POSIX_SPAWN_DUP2, status_fd, 3),
    ]
    gate = "-"
    if gate_in >= 0:
        actions.append((os.POSIX_SPAWN_DUP2, gate_in, GATE_FD))
        gate = str(GATE_FD)
    argv = [SH, "-c", SUPERVISOR, "taskq-attempt", "3", gate, body.cwd, _umask(body), *body.argv]
    pid = os.posix_spawn(
        SH, argv, env, file_actions=actions, setsid=True, setsigdef=_DEFAULT_SIGNALS
    )
    return Spawned(pid, proc_start_time(pid))


def _open_gate(pid: int, join: Join, gate_out: int) -> str | None:
    """Join the held supervisor to its cgroup, then let it go on; why not, if it cannot."""
    try:
        join(pid)
    except OSError as e:
        return f"could not join its cgroup: {e.strerror or e}"
    else:
        os.write(gate_out, b"go\n")  # a pipe's buffer takes it: never blocks
        return None
    finally:
        os.close(gate_out)


def _umask(body: TaskBody) -> str:
    """The supervisor's umask argument: the recorded mask in octal, or '-' for none."""
    return "-" if body.umask is None else f"{body.umask:04o}"


class AttemptBusy(OSError):
    """Another supervisor holds this attempt's status lock: our claim is stale."""


class AttemptUsed(OSError):
    """This attempt's files hold output already: it ran (perhaps under a forged id)."""


def _fresh(path: str, flags: int) -> int:
    """Open an attempt's file, created now or left empty by a start that never began.

    Never through a link, never a FIFO or a device, never a file that holds
    anything: an attempt never appends to another's output (AttemptUsed).
    """
    fd = _open_attempt_file(path, flags)
    if os.fstat(fd).st_size:
        os.close(fd)
        raise AttemptUsed(errno.EEXIST, "the attempt's files exist and are not empty", path)
    return fd


def _open_attempt_file(path: str, flags: int) -> int:
    """Create an attempt's file, or open the one there if it is a plain file (one link)."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise AttemptUsed(errno.EEXIST, "the attempt's file is not a plain file", path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _lock_status(path: str) -> int:
    """Open and lock a fresh attempt's status file, never blocking.

    A held lock means this attempt runs already under another daemon, which
    took our claim over while we were paused: we must not start it, nor
    touch its status. A status that is not empty (and not locked) is an
    attempt that ran: AttemptUsed.
    """
    fd = _open_attempt_file(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AttemptBusy(errno.EBUSY, "another daemon runs this attempt", path) from None
    if os.fstat(fd).st_size:
        os.close(fd)
        raise AttemptUsed(errno.EEXIST, "the attempt's status is not empty", path)
    return fd


_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)


def _spawn_as(
    user: RunAs, body: TaskBody, env: dict[str, str], fds: tuple[int, int, int, int]
) -> Spawned:
    """Start another user's attempt: new session, its groups, gid and uid, all in C."""
    in_fd, out_fd, status_fd, gate_in = fds
    slot, gate_slot = _slots()
    if gate_in >= 0 and gate_slot < 0:
        raise OSError(errno.EMFILE, "no descriptor below 10 was free for an attempt's gate")
    os.dup2(status_fd, slot, inheritable=False)  # sh names descriptors 0-9 only
    passed: tuple[int, ...] = (slot,)
    gate = "-"
    if gate_in >= 0:
        os.dup2(gate_in, gate_slot, inheritable=False)
        passed, gate = (slot, gate_slot), str(gate_slot)
    argv = [SH, "-c", SUPERVISOR, "taskq-attempt", str(slot), gate, body.cwd, _umask(body)]
    try:
        child = _popen_as(user, [*argv, *body.argv], env, in_fd, out_fd, passed)
    finally:
        for fd in passed:  # the slots let go of the status lock and the gate
            os.dup2(_devnull(), fd, inheritable=False)
    # The daemon reaps its children itself (waitpid(-1)); mark this one as
    # settled so that subprocess never reaps it behind the daemon's back.
    child.returncode = 0
    return Spawned(child.pid, proc_start_time(child.pid))


def status_slot() -> int:
    """Reserve, before other threads run, the descriptors below 10 that hand files to sh."""
    return _slots()[0]


@functools.cache
def _slots() -> tuple[int, int]:
    """Descriptor numbers below 10 reserved (on /dev/null): a status file's and a gate's.

    Only the loop's thread spawns, and the slots are never free, so no other
    thread's open() can land on one between the dup2 and the spawn. The
    gate's is -1 if none was free: then another user's attempt with a
    cgroup cannot start (OSError, a failed attempt).
    """
    found = []
    for fd in range(9, 3, -1):
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            os.dup2(_devnull(), fd, inheritable=False)
            found.append(fd)
            if len(found) == 2:
                break
    if not found:
        raise OSError(errno.EMFILE, "no descriptor below 10 is free for an attempt's status")
    return found[0], found[1] if len(found) == 2 else -1


def _popen_as(
    user: RunAs,
    argv: list[str],
    env: dict[str, str],
    in_fd: int,
    out_fd: int,
    passed: tuple[int, ...],
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        executable=SH,
        stdin=in_fd,
        stdout=out_fd,
        stderr=out_fd,
        pass_fds=passed,
        close_fds=True,
        start_new_session=True,
        env=env,
        user=user.uid,
        group=user.gid,
        extra_groups=list(user.groups),
        restore_signals=True,
    )


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


def kill_group(pid: int, sig: int) -> None:
    """Signal an attempt's whole process group; a vanished group is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def close_on_exec_all() -> None:
    """Mark every open descriptor close-on-exec, once, after start-up.

    Ours are already; a library's may not be (watchdog's inotify descriptor
    is not), and posix_spawn, unlike subprocess, closes nothing by itself.
    """
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return  # no /proc: nothing to sweep with; our own descriptors are CLOEXEC
    for name in names:
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                os.set_inheritable(fd, False)


def watch_exit(pid: int, proc_start: int | None) -> int | None:
    """A pidfd that becomes readable when process pid (started at proc_start) ends.

    None when the process is already gone or is another process by now (the
    pid was reused): then there is nothing to wait for.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if proc_start is None or proc_start_time(pid) != proc_start:
        os.close(fd)
        return None
    return fd
