"""The keeper: the process that starts a daemon's attempts and records how each ended.

It does for many attempts what the sh supervisor does for one (runner.py),
without an exec of its own per attempt. The daemon starts one keeper, in a
session of its own, and talks to it over a socket pair (keeperlink.py): a
request carries the command, its environment, working directory and umask,
with the attempt's standard input, output file and locked status file
passed as descriptors. Sharing the status file's open description shares
its flock(), so the lock the daemon took is the keeper's from then on. A
request may come a few milliseconds before its instant, with that instant
on both clocks ("not_before": wall and monotonic µs, as the daemon reckons
its earliest start): the keeper looks the command up at once, then sleeps
and spins until both clocks have passed it, so that at the instant only
the spawn remains (start_at). Then it writes "S" into the status file,
posix_spawns the command in a new session (it holds no lock, no other
descriptor of ours), and when the command ends writes its exit status
(128+n for death by signal n, as sh reports it), closes the file, which
lets the lock go, and tells the daemon.

The keeper outlives its daemon: its statuses keep being written, and the
next daemon adopts the attempts by their status files as it adopts a
supervisor's. It exits once no daemon is attached and none of its commands
runs. It never imports the rest of taskq: it must start fast and stay small.
"""

from __future__ import annotations

import array
import errno
import json
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

MAX_REQUEST = 1 << 17  # bytes: a larger request goes to the sh supervisor instead
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
_FDS = 3  # standard input, output, status
SPIN = 200  # µs: the last stretch before an instant is spun, not slept (a sleep overshoots)
LONGEST_WAIT = 100_000  # µs: an instant further off is not waited for (the wall clock stepped)


def _wall() -> int:
    return time.time_ns() // 1000


def _mono() -> int:
    return time.monotonic_ns() // 1000


def start_at(
    not_before: tuple[int, int],
    wall: Callable[[], int] = _wall,
    mono: Callable[[], int] = _mono,
    sleep: Callable[[float], None] = time.sleep,
) -> int | None:
    """Wait until both clocks have passed (wall, mono) µs; the wall reading then, or None.

    Never before either: the monotonic instant is the daemon's earliest
    start by its last clock measurement, the wall one the same by its wall
    clock, which a step back of the whole system's clock (and so of a local
    spool's) holds back. None, at once, when that is more than LONGEST_WAIT
    off: the wall clock stepped back since the daemon reckoned, and it must
    measure again.
    """
    wall_at, mono_at = not_before
    while True:
        now = wall()
        left = max(wall_at - now, mono_at - mono())
        if left <= 0:
            return now
        if left > LONGEST_WAIT:
            return None
        if left > SPIN:
            sleep((left - SPIN) / 1e6)


def exit_code(status: int) -> int:
    """A wait status as sh reports it: the exit code, or 128+n for death by signal n."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def resolve(command: str, path: str) -> str:
    """The file to execute for argv[0], searched in the task's PATH as sh would."""
    if "/" in command:
        return command
    for d in path.split(":"):
        candidate = os.path.join(d or ".", command)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(errno.ENOENT, "not found", command)


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (guards pid reuse)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)  # three system calls where open() makes nine
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name may contain spaces and parentheses; fields follow the last ')'.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


class NoDirectory(OSError):
    """The attempt's working directory cannot be entered."""


class Keeper:
    """The attempts one keeper runs: their status descriptors by pid."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.attached = True
        self.running: dict[int, int] = {}  # pid -> status descriptor
        self.sel = selectors.DefaultSelector()
        self.wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a hangup of the daemon's terminal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.sel.register(self.wake_r, selectors.EVENT_READ)
        self.sel.register(sock, selectors.EVENT_READ)

    def serve(self) -> None:
        """Take requests and record ends until no daemon is attached and nothing runs."""
        self._send({"op": "ready"})
        while self.attached or self.running:
            for key, _ in self.sel.select():
                if key.fileobj is self.sock:
                    self._receive()
                else:
                    while True:
                        try:
                            os.read(self.wake_r, 512)
                        except BlockingIOError:
                            break
            self._reap()

    def _receive(self) -> None:
        fds = array.array("i")
        try:
            data, anc, _, _ = self.sock.recvmsg(
                MAX_REQUEST, socket.CMSG_SPACE(_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC
            )
        except ConnectionResetError:
            data, anc = b"", []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            self._detach()
            return
        request = json.loads(data)
        if request.get("op") == "ping":
            self._send({"op": "pong"})
        elif request.get("op") == "spawn" and len(fds) == _FDS:
            self._send(self._start(request, fds[0], fds[1], fds[2]))
        else:
            for fd in fds:
                os.close(fd)

    def _detach(self) -> None:
        """The daemon is gone: keep recording what runs, take no more requests."""
        self.attached = False
        self.sel.unregister(self.sock)
        self.sock.close()

    def _start(
        self, request: dict[str, Any], in_fd: int, out_fd: int, status_fd: int
    ) -> dict[str, object]:
        """Begin an attempt at its instant: "S" first, then the command; why not, as sh says.

        Before the instant only the lookup happens; a command not found then
        is looked up again at the instant, so that nothing is judged early.
        An instant the wall clock does not reach in time is answered "early",
        its files untouched (its status empty: an attempt that never began).
        """
        try:
            found = _lookup(request)
            not_before = request.get("not_before")
            at = _wall() if not_before is None else start_at((not_before[0], not_before[1]))
            if at is None:
                os.close(status_fd)
                return {"op": "early"}
            os.write(status_fd, b"S\n")
            pid = _spawn(request, in_fd, out_fd, found)
        except OSError as e:
            # sh's statuses: 126 for a directory it cannot enter or a file it cannot run.
            code = 127 if e.errno == errno.ENOENT and not isinstance(e, NoDirectory) else 126
            error = f"{e.filename}: {e.strerror}"
            _write_all(out_fd, f"taskq: {error}\n".encode(errors="replace"))
            _end(status_fd, code)
            return {"op": "failed", "code": code, "error": error}
        finally:
            os.close(in_fd)
            os.close(out_fd)
        self.running[pid] = status_fd
        # Read here, on the keeper's core, and before the pid can be reaped and reused.
        return {"op": "spawned", "pid": pid, "proc_start": proc_start_time(pid), "at": at}

    def _reap(self) -> None:
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = self.running.pop(pid, None)
            if fd is None:
                continue
            code = exit_code(status)
            _end(fd, code)  # recorded before the daemon hears of it
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            self._send({"op": "ended", "pid": pid, "code": code, "signal": sig})

    def _send(self, message: dict[str, object]) -> None:
        if not self.attached:
            return
        try:
            self.sock.send(json.dumps(message).encode())
        except OSError:
            self._detach()


def _lookup(request: dict[str, Any]) -> str | None:
    """The file argv[0] names, looked up ahead of the instant where the cwd cannot matter."""
    command = str(request["argv"][0])
    if "/" in command or not all(d.startswith("/") for d in _path(request).split(":")):
        return None  # a path, or a PATH entry relative to the task's cwd: looked up there
    try:
        return resolve(command, _path(request))
    except OSError:
        return None  # looked up again at the instant, and reported then


def _path(request: dict[str, Any]) -> str:
    return str(request["env"].get("PATH", os.defpath))


def _spawn(request: dict[str, Any], in_fd: int, out_fd: int, found: str | None = None) -> int:
    """posix_spawn the command in its own session, in its directory, under its umask."""
    argv = [str(a) for a in request["argv"]]
    env = {str(k): str(v) for k, v in request["env"].items()}
    cwd, umask = str(request["cwd"]), request.get("umask")
    try:
        os.chdir(cwd)  # the keeper runs nothing else meanwhile: one thread
    except OSError as e:
        raise NoDirectory(e.errno, e.strerror, cwd) from None
    old = os.umask(umask) if isinstance(umask, int) else None
    try:
        path = found or resolve(argv[0], env.get("PATH", os.defpath))
        actions = [
            (os.POSIX_SPAWN_DUP2, in_fd, 0),
            (os.POSIX_SPAWN_DUP2, out_fd, 1),
            (os.POSIX_SPAWN_DUP2, out_fd, 2),
        ]
        try:
            return os.posix_spawn(
                path, argv, env, file_actions=actions, setsid=True, setsigdef=DEFAULT_SIGNALS
            )
        except OSError as e:
            if e.errno != errno.ENOEXEC:
                raise
            # No #! line: a shell script, as sh and execvp(3) run it.
            argv = ["sh", path, *argv[1:]]
            return os.posix_spawn(
                "/bin/sh", argv, env, file_actions=actions, setsid=True, setsigdef=DEFAULT_SIGNALS
            )
    finally:
        if old is not None:
            os.umask(old)
        os.chdir("/")


def _end(status_fd: int, code: int) -> None:
    """Record the exit status, then let the lock go."""
    try:
        _write_all(status_fd, f"{code}\n".encode())
    finally:
        os.close(status_fd)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # a full disk: the status stays "S", which reads as lost, never as a wrong code


def main() -> None:
    """`python -m taskq.daemon.keeper FD`: serve the daemon on the socket at FD."""
    os.chdir("/")
    sock = socket.socket(fileno=int(sys.argv[1]))
    os.set_inheritable(sock.fileno(), False)
    Keeper(sock).serve()


if __name__ == "__main__":
    main()
