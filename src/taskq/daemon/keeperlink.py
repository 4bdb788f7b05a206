"""The daemon's end of its keeper (keeper.py): start it, ask it to spawn, hear the ends.

One keeper per daemon, started at the first attempt it can take and again
after it died. Requests and replies go over a SOCK_SEQPACKET socket pair,
so no other process can reach the keeper. The loop sends a turn's spawn
requests one after another and reads their replies (the pids), in order,
at the start of the next turn, each at most hung_after() after the one
before: a keeper that does not answer in time, or a ping
still unanswered a renewal later, is hung and is killed. A request sent
ahead of its instant carries it (not_before); the keeper answers once it
has spawned at that instant, within milliseconds. The keeper's end
of an attempt (its exit status written, its lock let go) comes back as a
message that wakes the loop. A keeper that is gone, killed or dead, has
its attempts judged by the caller (attempts.py): each is killed by process
group and recorded lost, never left to run beside a retry.
"""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import json
import logging
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from taskq.daemon.keeper import DEFAULT_SIGNALS, MAX_REQUEST
from taskq.times.timespec import SECOND

log = logging.getLogger("taskq")

REPLY_WAIT = 5 * SECOND  # the least time a keeper may take to answer before it is hung
START_WAIT = 60 * SECOND  # one that has not said it is ready: as long as a busy daemon's start
KEEPER_FD = 3  # where the keeper finds its socket
IN_FLIGHT = 1 << 16  # bytes of requests sent and not yet answered, at most (beyond one)


def hung_after(lease: int) -> int:
    """How long a keeper may leave a spawn or a ping unanswered: 5 s, or a third of the lease.

    The keeper writes to the spool on its way to an answer: the `S` before
    a spawn, and each ended attempt's status (written before it reads the
    next request). A shared filesystem that stalls its writes for seconds
    (MooseFS has stalled 3.9 s) stalls the answers as long, and a keeper
    killed as hung loses every attempt it runs. So it is given as long as
    the loop may wait without a lapse of its claims: renewals come every
    third of the lease, and a wait of a third more still renews in time.
    """
    return max(REPLY_WAIT, lease // 3)


class KeeperGone(OSError):
    """The keeper died, or was hung and killed, before it answered a spawn."""


class NotRun(OSError):
    """The keeper could not run the command (not found, not executable): its status is code."""

    def __init__(self, code: int, error: str) -> None:
        super().__init__(errno.ENOEXEC, error)
        self.code = code


class Early(OSError):
    """The wall clock had not reached the instant the keeper was to start at: nothing ran."""

    def __init__(self) -> None:
        super().__init__(errno.EAGAIN, "the wall clock stepped back before the start")


class Began(NamedTuple):
    """An attempt the keeper started: its command's pid and start time (clock ticks, which
    guard a kill against pid reuse), and when it spawned it (wall µs, read just before)."""

    pid: int
    proc_start: int | None
    at: int


Answer = Began | NotRun | KeeperGone | Early


class KeeperLink:
    """The socket to this daemon's keeper, and what it said that the loop has not heard yet."""

    def __init__(
        self,
        watch: Callable[[int, object], None],
        unwatch: Callable[[int], None],
        lease: int = 0,
    ) -> None:
        self.watch, self.unwatch = watch, unwatch
        self.hung_after = hung_after(lease)
        self.sock: socket.socket | None = None
        self.pidfd = -1
        self.pid = 0
        self.ends: list[tuple[int, int]] = []  # (pid, code) heard, not yet reaped
        self.gone = False  # the keeper died (or was killed) since ended() last said so
        self.pinged: int | None = None  # when the unanswered ping was sent (monotonic µs)
        self.ready = False  # the keeper said it serves (it has imported what it needs)
        self.asked: collections.deque[int] = collections.deque()  # sizes of unanswered requests
        self.answered: list[Answer] = []  # read, not yet taken by answers()

    def request(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        umask: int | None,
        not_before: tuple[int, int] | None = None,
    ) -> bytes | None:
        """A spawn request for argv; None if no keeper can take it (too large, none starts).

        not_before is the start's instant on the wall and monotonic clocks
        (µs): the keeper spawns once both have passed it (keeper.start_at).
        """
        asked: dict[str, object] = {
            "op": "spawn",
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "umask": umask,
        }
        if not_before is not None:
            asked["not_before"] = list(not_before)
        request = json.dumps(asked).encode()
        if len(request) > MAX_REQUEST or not self._running():
            return None
        return request

    def send(self, request: bytes, fds: list[int]) -> None:
        """Send a request with the attempt's descriptors; its answer comes from answers().

        A turn's requests all go before any answer is read, so that the keeper
        spawns on its core while the loop prepares the next attempt. Only so
        much waits in the socket at once: beyond IN_FLIGHT bytes the answers
        so far are read first, so that a send never blocks on a full socket.
        KeeperGone: the keeper is gone (the status file says whether it began).
        """
        if self.asked and sum(self.asked) + len(request) > IN_FLIGHT:
            self._hear(0)
        if self.sock is None:
            raise KeeperGone(errno.EPIPE, "the keeper is gone")
        try:
            self.sock.sendmsg(
                [request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_ints(fds)))]
            )
        except OSError as e:
            self._lost(f"could not be asked: {e.strerror}")
            raise KeeperGone(errno.EPIPE, "the keeper is gone") from None
        self.asked.append(len(request))

    def answers(self) -> list[Answer]:
        """The answers to every request sent since the last call, in order.

        Each is Began (its pid, its start time and when it was spawned),
        NotRun (it could not be run; its status is recorded), KeeperGone (the
        keeper went away first) or Early (the wall clock stepped back before
        the instant: not run).
        """
        self._hear(0)
        out, self.answered = self.answered, []
        return out

    def _hear(self, left: int) -> None:
        """Read answers until `left` requests are unanswered; a gone keeper answers the rest."""
        while len(self.asked) > left:
            try:
                reply = self._reply()
            except KeeperGone as e:
                self.answered += [e] * len(self.asked)
                self.asked.clear()
                return
            self.asked.popleft()
            if reply["op"] == "failed":
                self.answered.append(NotRun(int(reply["code"]), str(reply["error"])))
            elif reply["op"] == "early":
                self.answered.append(Early())
            else:
                start = reply.get("proc_start")
                proc_start = None if start is None else int(start)
                self.answered.append(Began(int(reply["pid"]), proc_start, int(reply["at"])))

    def _reply(self) -> dict[str, Any]:
        """Wait for a spawn's reply, queueing the ends heard meanwhile."""
        while True:
            if self.sock is None:
                raise KeeperGone(errno.EPIPE, "the keeper is gone")
            left = (self.hung_after if self.ready else START_WAIT) / SECOND
            readable, _, _ = select.select([self.sock], [], [], left)
            if not readable:
                self.kill("it did not answer a spawn in time")
                raise KeeperGone(errno.ETIMEDOUT, "the keeper did not answer")
            message = self._read()
            if message is None:
                raise KeeperGone(errno.EPIPE, "the keeper died")
            if message["op"] in ("spawned", "failed", "early"):
                return message

    def ended(self) -> tuple[list[tuple[int, int]], bool]:
        """The (pid, code) of attempts the keeper saw end, and whether the keeper is gone."""
        while self.sock is not None:
            try:
                if self._read(socket.MSG_DONTWAIT) is None:
                    break
            except BlockingIOError:  # nothing more to hear
                break
        ends, gone = self.ends, self.gone
        self.ends, self.gone = [], False
        return ends, gone

    def _read(self, flags: int = 0) -> dict[str, Any] | None:
        """One message: an end is queued, a pong noted; None when the keeper is gone."""
        assert self.sock is not None
        try:
            data = self.sock.recv(4096, flags)
        except BlockingIOError:
            raise
        except OSError:
            data = b""
        if not data:
            self._lost("it died")
            return None
        message: dict[str, Any] = json.loads(data)
        if message["op"] == "ended":
            code = int(message["code"])
            if message.get("signal") == signal.SIGKILL:
                code = -signal.SIGKILL  # a KILL of the group ended sh too: the journal says so
            self.ends.append((int(message["pid"]), code))
        elif message["op"] == "pong":
            self.pinged = None
        elif message["op"] == "ready":
            self.ready = True
        return message

    def check(self, mono: int) -> None:
        """Once a renewal: a keeper that left a ping unanswered hung_after is hung (killed)."""
        if self.sock is None:
            return
        if self.pinged is not None:
            if mono - self.pinged > (self.hung_after if self.ready else START_WAIT):
                self.kill("it did not answer a ping in time")
            return
        try:
            self.sock.send(b'{"op": "ping"}')
            self.pinged = mono
        except OSError:
            self._lost("it died")

    def kill(self, why: str) -> None:
        """Kill the keeper and wait until it is gone, so that nothing it holds lives on."""
        log.error("killing the attempts' keeper (pid %d): %s", self.pid, why)
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            select.select([self.pidfd], [], [], REPLY_WAIT / SECOND)
        self._lost("killed")

    def _lost(self, why: str) -> None:
        if self.sock is None:
            return
        log.error("the attempts' keeper (pid %d) is gone: %s", self.pid, why)
        self.unwatch(self.sock.fileno())
        self.sock.close()
        os.close(self.pidfd)
        self.sock, self.gone, self.pinged, self.ready = None, True, None, False

    def start(self) -> None:
        """Start the keeper before the first attempt is due: it takes a while to import."""
        self._running()

    def _running(self) -> bool:
        """Start the keeper if none runs; False if it cannot be started."""
        if self.sock is not None:
            return True
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-m", "taskq.daemon.keeper", str(KEEPER_FD), "taskq-keeper"],
                dict(os.environ),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), KEEPER_FD),
                    # Not the daemon's stdio: a pipe read to its end must end with the daemon.
                    *((os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)),
                ],
                setsid=True,
                setsigdef=DEFAULT_SIGNALS,
            )
            self.pidfd = os.pidfd_open(self.pid)
        except OSError as e:
            log.error("cannot start the attempts' keeper: %s; using sh supervisors", e)
            ours.close()
            return False
        finally:
            theirs.close()
        self.sock, self.ready = ours, False
        self.watch(ours.fileno(), "keeper")
        return True

    def close(self) -> None:
        """The daemon stops: the keeper goes on with what runs, and exits after it."""
        if self.sock is not None:
            self.sock.close()
            os.close(self.pidfd)
            self.sock = None


def _ints(fds: list[int]) -> bytes:
    return array.array("i", fds).tobytes()
