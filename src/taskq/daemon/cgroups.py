"""Per-attempt cgroups: the resource limits of attempts that ask for them, and killing all of it.

An attempt whose task asks for limits (spool/resources.py) runs in a
cgroup of its own, made before the spawn with the limits written into it;
its supervisor is moved into it before it may run anything (runner.py's
gate), so everything the command starts, double-forked or not, is in the
group. A timeout, a cancel and the attempt's end kill what is in the group;
then the group is removed. Tasks without limits get no cgroup: nothing of
this runs for them.

Two backends do the same through one small interface (make, find, sweep;
a Group joins, signals, reads its events and is removed):

- cgroup v2 delegated to the daemon (systemd's Delegate=yes): the
  daemon's own cgroup, with memory.max (and memory.swap.max 0), cpu.weight,
  cpu.max and pids.max; cgroup.kill where the kernel has it.
- cgroup v1 hierarchies (memory, cpu, pids) writable by the daemon:
  memory.limit_in_bytes (and memory.memsw.limit_in_bytes where swap is
  accounted), cpu.shares (weight * 1024 / 100, as systemd maps it),
  cpu.cfs_quota_us per cpu.cfs_period_us, and pids.max.

Either way the groups are DAEMON_CGROUP/taskq/HOST_PID/ID.ATTEMPT, under
the cgroup the daemon was started in, so an operator can find an attempt's
group and the limits nest inside the daemon's own. Which backend is usable
is found once at start-up (detect); where neither is, the daemon says why,
and attempts that ask for limits are refused, never run unlimited.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from collections.abc import Iterator

from taskq.spool.resources import CPU_PERIOD, Resources, size_text

log = logging.getLogger("taskq")

CONTROLLERS = ("memory", "cpu", "pids")
OURS = "taskq"  # the directory under the daemon's own cgroup that holds every daemon's groups
DAEMON_LEAF = "taskq-daemon"  # (v2) the leaf the daemon moves into, if its cgroup must have none
MODES = ("auto", "v2", "v1", "none")  # --cgroups


class Group:
    """One attempt's cgroup: one directory (v2), or one per hierarchy it uses (v1)."""

    def __init__(self, dirs: list[str], v2: bool) -> None:
        self.dirs = dirs
        self.v2 = v2

    def join(self, pid: int) -> None:
        """Move a process (the supervisor, held at its gate) into the group."""
        for d in self.dirs:
            put(d, "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.dirs[0], "cgroup.procs"), "rb") as f:
                return [int(line) for line in f.read().split()]
        except FileNotFoundError:
            return []

    def kill(self, sig: int) -> None:
        """Signal every process in the group (cgroup.kill's one write, where it can)."""
        if sig == signal.SIGKILL and self.v2:
            with contextlib.suppress(FileNotFoundError):
                put(self.dirs[0], "cgroup.kill", "1")
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def notes(self, limits: Resources) -> list[str]:
        """What the limits did to the attempt, from the kernel's counters, for its end record."""
        out = []
        oom = _counter(self.dirs, "memory.events" if self.v2 else "memory.oom_control", "oom_kill")
        if oom:
            over = size_text(limits.memory_max or 0)
            out.append(f"killed by the OOM killer: over --memory-max {over} ({oom}x)")
        refused = _counter(self.dirs, "pids.events", "max")
        if refused:
            out.append(f"--tasks-max {limits.tasks_max} refused {refused} fork(s)")
        return out

    def remove(self) -> bool:
        """Remove the group's directories; False while processes are still leaving it."""
        gone = True
        for d in self.dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                gone = False
        return gone


class Backend:
    """Where attempt groups are made: ROOT/taskq/HOST_PID in each hierarchy of a controller."""

    def __init__(self, version: str, roots: dict[str, str], daemon: str) -> None:
        self.version = version  # "v2" or "v1"
        self.roots = roots  # controller -> the daemon's own cgroup directory in its hierarchy
        self.daemon = daemon  # HOST_PID

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.roots)

    def _bases(self, need: frozenset[str]) -> list[str]:
        """The directories, one per hierarchy, under which a group needing `need` goes."""
        dirs = {self.roots[c] for c in (need or self.controllers)}
        return sorted(os.path.join(d, OURS, self.daemon) for d in dirs)

    def make(self, name: str, limits: Resources) -> Group:
        """Make an attempt's group with its limits written; OSError (and nothing left) if not."""
        bases = self._bases(limits.controllers())
        group = Group([os.path.join(b, name) for b in bases], self.version == "v2")
        try:
            for base, d in zip(bases, group.dirs, strict=True):
                if self.version == "v1":  # made at the first attempt that needs it, then found
                    os.makedirs(base, 0o755, exist_ok=True)
                os.mkdir(d, 0o755)
                _limit(d, limits, self.version == "v2")
        except OSError:
            with contextlib.suppress(OSError):
                group.remove()
            raise
        return group

    def find(self, name: str) -> Group | None:
        """An attempt's group, made by whichever daemon started it (an adopted attempt's)."""
        dirs = []
        for root in sorted(set(self.roots.values())):
            for daemon in _entries(os.path.join(root, OURS)):
                d = os.path.join(root, OURS, daemon, name)
                if os.path.isdir(d):
                    dirs.append(d)
        return Group(dirs, self.version == "v2") if dirs else None

    def leave(self) -> None:
        """Remove this daemon's directory if it holds no group (an attempt left running keeps it).

        OURS stays: another daemon may be making its directory in it.
        """
        for root in set(self.roots.values()):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(root, OURS, self.daemon))

    def sweep(self) -> int:
        """Remove the empty groups of daemons that are gone; how many were removed.

        A group that still holds processes is an orphaned attempt still
        running: the daemon that adopts it removes it at its end.
        """
        removed = 0
        for root in sorted(set(self.roots.values())):
            ours = os.path.join(root, OURS)
            for daemon in _entries(ours):
                if daemon == self.daemon or _alive(daemon):
                    continue
                for name in _entries(os.path.join(ours, daemon)):
                    with contextlib.suppress(OSError):  # busy: it still runs
                        os.rmdir(os.path.join(ours, daemon, name))
                        removed += 1
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(ours, daemon))
        return removed


def _limit(d: str, limits: Resources, v2: bool) -> None:
    """Write the limits into a new group's directory, in each file of the controllers it has."""
    has = set(os.listdir(d))
    if limits.memory_max is not None and ("memory.max" in has or "memory.limit_in_bytes" in has):
        if v2:
            put(d, "memory.max", str(limits.memory_max))
            if "memory.swap.max" in has:  # so that, as on v1, swap counts within the limit
                put(d, "memory.swap.max", "0")
        else:
            put(d, "memory.limit_in_bytes", str(limits.memory_max))
            if "memory.memsw.limit_in_bytes" in has:
                put(d, "memory.memsw.limit_in_bytes", str(limits.memory_max))
    if limits.cpu_weight is not None and ("cpu.weight" in has or "cpu.shares" in has):
        if v2:
            put(d, "cpu.weight", str(limits.cpu_weight))
        else:
            put(d, "cpu.shares", str(max(2, limits.cpu_weight * 1024 // 100)))
    if limits.cpu_max is not None and ("cpu.max" in has or "cpu.cfs_quota_us" in has):
        quota = limits.cpu_max * CPU_PERIOD // 100
        if v2:
            put(d, "cpu.max", f"{quota} {CPU_PERIOD}")
        else:
            put(d, "cpu.cfs_period_us", str(CPU_PERIOD))
            put(d, "cpu.cfs_quota_us", str(quota))
    if limits.tasks_max is not None and "pids.max" in has:
        put(d, "pids.max", str(limits.tasks_max + 1))  # the supervisor is not the command's


def put(d: str, name: str, value: str) -> None:
    """Write one value into a cgroup file (one write(2), as the kernel wants it)."""
    fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _counter(dirs: list[str], file: str, key: str) -> int:
    """A 'key N' line of a flat-keyed cgroup file in any of the dirs; 0 if there is none."""
    for d in dirs:
        try:
            with open(os.path.join(d, file), "rb") as f:
                for line in f.read().decode().splitlines():
                    k, _, v = line.partition(" ")
                    if k == key and v.strip().isdigit():
                        return int(v)
        except (FileNotFoundError, UnicodeDecodeError):
            continue
    return 0


def _entries(d: str) -> Iterator[str]:
    try:
        with os.scandir(d) as it:
            yield from sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return


def _alive(daemon: str) -> bool:
    """Whether HOST_PID's pid is a live process here (a reused pid only delays a sweep)."""
    pid = daemon.rpartition("_")[2]
    if not pid.isdigit():
        return True  # not a daemon's name: leave it alone
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
