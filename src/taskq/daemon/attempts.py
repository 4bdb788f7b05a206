"""The attempts a daemon watches: spawn, reap, timeouts, stopping, adopted orphans.

An attempt is the daemon's own: its keeper's (whose ends the keeper tells)
or its sh supervisor, a child reaped with waitpid; or an orphan it adopted
after taking over a claim whose attempt still runs (watched through a
pidfd, or by polling its supervisor's lock when its pid is unknown). This
module signals process groups and reports ended attempts; what becomes of
the task is decided elsewhere (policy) and carried out elsewhere (settle).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

from taskq.daemon import runner
from taskq.daemon.cgroups import Group
from taskq.daemon.confinement import Confinement
from taskq.daemon.keeperlink import KeeperLink
from taskq.spool import attemptfiles
from taskq.spool.runas import RunAs
from taskq.spool.task import ClaimName, TaskBody
from taskq.times.timespec import SECOND, format_duration

POLL_ADOPTED = SECOND // 5  # how often to look at an adopted attempt whose pid is unknown


@dataclass
class Prepared:
    """A due task whose start is durable: its claim, its request and whom it runs as."""

    claim: ClaimName
    body: TaskBody
    user: RunAs
    mono: int = 0  # when its start rename was made (monotonic µs)
    staged: bool = False  # its id bound and its attempt's files made ahead (Starter.stage)


@dataclass
class Running:
    """An attempt this daemon watches: its own child or an adopted orphan."""

    claim: ClaimName
    body: TaskBody
    pid: int | None
    started_mono: int  # µs on the monotonic clock (back-dated for an adopted one)
    adopted: bool = False
    pidfd: int | None = None
    lost: bool = False  # our lease was taken; we no longer own the claim
    term_sent: int | None = None
    killed: bool = False
    notes: list[str] = field(default_factory=list)
    group: Group | None = None  # its cgroup, if its task asks for limits
    kept: bool = False  # the keeper supervises it: its end comes from the keeper
    proc_start: int | None = None  # its pid's start time (guards a kill against pid reuse)


class Attempts:
    """Running attempts by pid (children) and by task id (adopted)."""

    def __init__(
        self,
        kill_grace: int,
        watch: Callable[[int, object], None],
        unwatch: Callable[[int], None],
        confinement: Confinement,
        lease: int = 0,
    ) -> None:
        self.kill_grace = kill_grace
        self.confinement = confinement
        self.watch = watch  # wake the loop when a pidfd is readable, with a key
        self.unwatch = unwatch
        self.children: dict[int, Running] = {}
        self.adopted: dict[str, Running] = {}
        self.handed: set[int] = set()  # children another daemon here watches now: reap only
        self.keeper = KeeperLink(watch, unwatch, lease)  # judged hung by the lease

    def __len__(self) -> int:
        return len(self.children) + len(self.adopted)

    def all(self) -> list[Running]:
        return [*self.children.values(), *self.adopted.values()]

    def ids(self) -> set[str]:
        return {r.claim.task.id for r in self.all()}

    def add_child(self, run: Running) -> None:
        assert run.pid is not None
        self.children[run.pid] = run

    def add_adopted(self, run: Running, proc_start: int | None) -> None:
        """Watch an orphan: through a pidfd if its pid is known and still its own."""
        self._find_group(run)
        if run.pid is not None:
            run.pidfd = runner.watch_exit(run.pid, proc_start)
        if run.pidfd is not None:
            self.watch(run.pidfd, ("adopted", run.body.id))
        self.adopted[run.body.id] = run

    def reap(self) -> list[tuple[Running, int | None]]:
        """Our attempts that ended, with their exit codes (negative: a signal; None: lost)."""
        ended = self._kept_ended()
        while self.children or self.handed:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            self.handed.discard(pid)
            run = self.children.pop(pid, None)
            if run is not None:
                self.end_group(run)
                ended.append((run, os.waitstatus_to_exitcode(status)))
        return ended

    def _kept_ended(self) -> list[tuple[Running, int | None]]:
        """The keeper's attempts it saw end; all the others it had, if it is gone.

        A dead keeper recorded no status for what it ran: each of its
        attempts is killed by process group (if its pid is still its own)
        so that none runs on beside a retry, and is lost.
        """
        ends, gone = self.keeper.ended()
        ended: list[tuple[Running, int | None]] = []
        for pid, code in ends:
            run = self.children.get(pid)
            if run is not None and run.kept:
                del self.children[pid]
                ended.append((run, code))
        if gone:
            for pid, run in list(self.children.items()):
                if run.kept:
                    del self.children[pid]
                    if runner.proc_start_time(pid) == run.proc_start:
                        runner.kill_group(pid, signal.SIGKILL)
                    run.notes.append("lost: its keeper died; its process group was killed")
                    ended.append((run, None))
        return ended

    def _find_group(self, run: Running) -> None:
        """An orphan's cgroup, made by the daemon that started it."""
        if run.body.limits is not None and run.group is None:
            run.group = self.confinement.find(f"{run.body.id}.{run.claim.task.attempt}")

    def end_group(self, run: Running) -> None:
        """The attempt ended: its cgroup's tale in its notes, what is left of it killed, removed."""
        self._find_group(run)  # (an orphan that ended while no daemon watched it)
        if run.group is not None and run.body.limits is not None:
            run.notes += self.confinement.ended(run.group, run.body.limits)
            run.group = None

    def adopted_ended(self, log_dir: str, task_id: str) -> bool:
        """Whether an adopted attempt's supervisor is gone (then forget it).

        A keeper's command may end a moment before the keeper has written its
        status: then the lock is polled, no longer the pidfd (readable for good).
        """
        run = self.adopted[task_id]
        if attemptfiles.supervisor_alive(log_dir, run.claim.task.attempt):
            if run.pidfd is not None and _ended(run.pidfd):
                self.unwatch(run.pidfd)
                os.close(run.pidfd)
                run.pidfd = None
            return False
        del self.adopted[task_id]
        if run.pidfd is not None:
            self.unwatch(run.pidfd)
            os.close(run.pidfd)
        self.end_group(run)
        return True

    def hand_over(self, run: Running) -> None:
        """Stop watching an attempt that another daemon on this host adopted.

        That daemon took our claim over while we were stopped past the lease,
        and watches the attempt through a pidfd; we only reap our child, so
        that it leaves no zombie, and record nothing of its end.
        """
        if run.pid is not None and self.children.get(run.pid) is run:
            del self.children[run.pid]
            if not run.kept:  # the keeper reaps its own
                self.handed.add(run.pid)
        elif self.adopted.get(run.body.id) is run:
            del self.adopted[run.body.id]
            if run.pidfd is not None:
                self.unwatch(run.pidfd)
                os.close(run.pidfd)

    def polled(self) -> list[Running]:
        """Adopted attempts without a pidfd: the loop looks at these every POLL_ADOPTED."""
        return [r for r in self.adopted.values() if r.pidfd is None]

    def signal(self, run: Running, sig: int, mono: int) -> None:
        """Signal an attempt's process group and its cgroup; TERM starts the grace before KILL.

        The cgroup holds what left the process group (a double fork, a new session).
        """
        if run.pid is None and run.group is None:
            return
        if run.pid is not None:
            runner.kill_group(run.pid, sig)
        if run.group is not None:
            run.group.kill(sig)
        if sig == signal.SIGTERM and run.term_sent is None:
            run.term_sent = mono
        elif sig == signal.SIGKILL:
            run.killed = True

    def enforce_timeouts(self, mono: int) -> None:
        """TERM an attempt past its --timeout; KILL one still there after the grace."""
        self.confinement.tidy()
        for run in self.all():
            if (run.pid is None and run.group is None) or run.killed:
                continue
            if run.term_sent is None:
                timeout = run.body.timeout
                if timeout is not None and mono >= run.started_mono + timeout:
                    run.notes.append(f"timeout after {format_duration(timeout)}")
                    self.signal(run, signal.SIGTERM, mono)
            elif mono >= run.term_sent + self.kill_grace:
                self.signal(run, signal.SIGKILL, mono)

    def deadlines(self) -> list[int]:
        """Monotonic instants at which a timeout or a kill grace runs out."""
        tidy = self.confinement.wake_at()
        out = [] if tidy is None else [tidy]
        for run in self.all():
            if run.killed or (run.pid is None and run.group is None):
                continue
            if run.term_sent is not None:
                out.append(run.term_sent + self.kill_grace)
            elif run.body.timeout is not None:
                out.append(run.started_mono + run.body.timeout)
        return out

    def close(self) -> None:
        self.keeper.close()
        for run in self.adopted.values():
            if run.pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(run.pidfd)


def _ended(pidfd: int) -> bool:
    """Whether the process behind a pidfd has ended (the pidfd is readable)."""
    return bool(select.select([pidfd], [], [], 0)[0])
