"""The daemon's part that confines attempts with limits: one cgroup each, made, ended, removed.

At start-up it finds the backend (cgroupsetup.detect) and says, in the log
and in the health record `taskq status` shows, which it uses or why it has
none; then it removes the empty groups daemons that are gone left behind.
For each attempt that asks for limits it makes the group before the spawn
(or says why the attempt cannot have one: refused, never run unlimited);
at the attempt's end it reads what the limits did (an OOM kill, refused
forks), kills what is left in the group and removes it, retrying while
killed processes are still leaving. Attempts without limits never reach it.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable

from taskq.daemon import cgroupsetup
from taskq.daemon.cgroups import Backend, Group
from taskq.spool.resources import Resources
from taskq.times.timespec import MS

log = logging.getLogger("taskq")

RETRY = 100 * MS  # how soon to try again to remove a group whose processes are leaving


class Confinement:
    """This daemon's cgroup backend (or why there is none) and the groups it is removing."""

    def __init__(self, mode: str, daemon: str, mono: Callable[[], int]) -> None:
        self.mode = mode  # --cgroups: auto, v2, v1 or none
        self.daemon = daemon  # HOST_PID
        self.mono = mono
        self.backend: Backend | None = None
        self.problem = "not looked for yet"
        self.leaving: list[Group] = []  # ended attempts' groups not yet empty
        self.swept = 0  # empty groups of dead daemons removed at start-up
        self.next_try = 0

    def start(self) -> None:
        """Find the backend and tidy what dead daemons left (tell() says what was found)."""
        self.backend, self.problem = cgroupsetup.detect(self.mode, self.daemon)
        if self.backend is not None:
            self.swept = self.backend.sweep()

    def tell(self) -> None:
        """Log, once, which cgroups attempts get, or why none."""
        if self.backend is None:
            log.info(
                "no cgroups for attempts: %s; tasks with resource limits "
                "(--memory-max, --cpu-weight, --cpu-max, --tasks-max) are refused",
                self.problem,
            )
            return
        log.info(
            "cgroup %s for attempts with resource limits: %s%s",
            self.backend.version,
            ", ".join(sorted(self.backend.controllers)),
            f"; removed {self.swept} left by daemons that are gone" if self.swept else "",
        )

    def public(self) -> dict[str, object]:
        """What the health record says of it (taskq status)."""
        if self.backend is None:
            return {"cgroups": None, "cgroup_controllers": "", "cgroups_problem": self.problem}
        controllers = " ".join(sorted(self.backend.controllers))
        return {
            "cgroups": self.backend.version,
            "cgroup_controllers": controllers,
            "cgroups_problem": None,
        }

    def refusal(self, limits: Resources) -> str | None:
        """Why an attempt with these limits cannot be confined here, or None if it can."""
        if self.backend is None:
            return (
                f"it asks for {limits.describe()}, and this daemon has no cgroups: {self.problem}"
            )
        missing = limits.controllers() - self.backend.controllers
        if missing:
            return (
                f"it asks for {limits.describe()}, and this daemon's cgroup "
                f"{self.backend.version} has no {', '.join(sorted(missing))} controller"
            )
        return None

    def make(self, name: str, limits: Resources) -> Group:
        assert self.backend is not None
        return self.backend.make(name, limits)

    def find(self, name: str) -> Group | None:
        """An adopted attempt's group, wherever the daemon that started it made it."""
        return None if self.backend is None else self.backend.find(name)

    def ended(self, group: Group, limits: Resources) -> list[str]:
        """An attempt ended: what its limits did to it; what is left killed, the group removed."""
        notes = group.notes(limits)
        self._remove(group)
        return notes

    def _remove(self, group: Group) -> None:
        try:
            group.kill(signal.SIGKILL)
            if group.remove():
                return
        except OSError as e:
            log.warning("cannot remove cgroup %s: %s", group.dirs[0], e)
            return
        self.leaving.append(group)
        self.next_try = self.mono() + RETRY

    def tidy(self) -> None:
        """Try again to remove the groups whose processes were still leaving."""
        if not self.leaving or self.mono() < self.next_try:
            return
        leaving, self.leaving = self.leaving, []
        for group in leaving:
            self._remove(group)

    def wake_at(self) -> int | None:
        """When tidy wants to run again (monotonic µs), if it has groups to remove."""
        return self.next_try if self.leaving else None

    def stop(self) -> None:
        """Leave: our directory goes if every group in it is gone."""
        self.next_try = 0
        self.tidy()
        if self.backend is not None:
            self.backend.leave()
