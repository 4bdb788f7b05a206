"""What an attempt may use: the resource limits a task asks for, their ranges and body form.

`taskq submit --memory-max SIZE --cpu-weight N --cpu-max PERCENT
--tasks-max N` (and a batch line's memory_max, cpu_weight, cpu_max,
tasks_max) ask the daemon to run each attempt in a cgroup of its own with
those limits, as `systemd-run -p MemoryMax=` would. A body records them as
one object, `"limits": {...}`, holding only the limits asked for; a body
without it asks for none, and its attempts get no cgroup. Every value is
checked here, through spool/fields.py, by the body reader and the request
builder alike. The daemon's side (making the cgroup) is daemon/cgroups.py.
"""

from __future__ import annotations

from typing import Any

from taskq.errors import BadInput
from taskq.spool import fields
from taskq.spool.record import Frozen, record

MEMORY_MAX = (1 << 20, 1 << 62)  # bytes: below a MiB not even sh starts
CPU_WEIGHT = (1, 10_000)  # systemd's CPUWeight= (cgroup v2 cpu.weight); 100 is the default
CPU_MAX = (1, 100_000)  # percent of one CPU per CPU_PERIOD; 1% is the kernel's least quota
TASKS_MAX = (1, 4_194_304)  # processes and threads; Linux's PID_MAX_LIMIT
CPU_PERIOD = 100_000  # µs, systemd's CPUQuotaPeriodSec= default
NAMES = ("memory_max", "cpu_weight", "cpu_max", "tasks_max")


# A record, not a NamedTuple: submit imports this module, and a NamedTuple
# compiles its methods as the class is made (spool/record.py).
@record
class Resources(Frozen):
    """The limits of each attempt of a task; None: not limited."""

    memory_max: int | None = None  # bytes of memory (and swap) the attempt may use
    cpu_weight: int | None = None  # its share of contended CPU, 1 to 10000 (100: as others)
    cpu_max: int | None = None  # percent of one CPU it may use at most (200: two CPUs)
    tasks_max: int | None = None  # processes and threads of the command, at most

    def to_doc(self) -> dict[str, int]:
        """The body's "limits" object: the limits given, by name."""
        d = self.__dict__
        return {name: d[name] for name in NAMES if d[name] is not None}

    def controllers(self) -> frozenset[str]:
        """The cgroup controllers these limits need: memory, cpu, pids."""
        need = set()
        if self.memory_max is not None:
            need.add("memory")
        if self.cpu_weight is not None or self.cpu_max is not None:
            need.add("cpu")
        if self.tasks_max is not None:
            need.add("pids")
        return frozenset(need)

    def describe(self) -> str:
        """The limits as submit's options would ask for them."""
        parts = []
        if self.memory_max is not None:
            parts.append(f"--memory-max {size_text(self.memory_max)}")
        if self.cpu_weight is not None:
            parts.append(f"--cpu-weight {self.cpu_weight}")
        if self.cpu_max is not None:
            parts.append(f"--cpu-max {self.cpu_max}%")
        if self.tasks_max is not None:
            parts.append(f"--tasks-max {self.tasks_max}")
        return " ".join(parts)


def size_text(amount: int) -> str:
    """A byte count as it would be typed: 50M rather than 52428800 where it is whole."""
    for suffix, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if amount % scale == 0:
            return f"{amount // scale}{suffix}"
    return str(amount)


def memory_max(what: str, value: object) -> int:
    """A memory limit: bytes, or text such as "512M" or "2G" (1024s)."""
    return fields.size(what, value, *MEMORY_MAX)


def cpu_weight(what: str, value: object) -> int:
    return fields.whole(what, value, *CPU_WEIGHT)


def cpu_max(what: str, value: object) -> int:
    """A CPU limit in percent of one CPU: a whole number, or text such as "50%"."""
    if type(value) is str:
        digits = value.strip().removesuffix("%").strip()
        if not digits.isascii() or not digits.isdigit():
            raise BadInput(f'{what} must be a percentage of one CPU, e.g. "50%" or "200%"')
        value = int(digits)
    return fields.whole(what, value, *CPU_MAX)


def tasks_max(what: str, value: object) -> int:
    return fields.whole(what, value, *TASKS_MAX)


_CHECKS = {
    "memory_max": memory_max,
    "cpu_weight": cpu_weight,
    "cpu_max": cpu_max,
    "tasks_max": tasks_max,
}


def given(doc: dict[str, Any], prefix: str = "", option: bool = False) -> dict[str, int]:
    """The limits a document (a batch line, or submit's options) names, each checked.

    Errors name a field as prefix + its name, or as the option (--memory-max).
    """
    return {
        name: _CHECKS[name](_label(name, prefix, option), doc[name])
        for name in NAMES
        if name in doc
    }


def _label(name: str, prefix: str, option: bool) -> str:
    return "--" + name.replace("_", "-") if option else prefix + name


def from_body(value: object) -> Resources | None:
    """A body's "limits" object, checked whole: an unknown limit is refused, not ignored.

    A daemon that ran a limit it does not know of would run the task unlimited.
    """
    if value is None:
        return None
    if type(value) is not dict:
        raise BadInput("limits must be an object")
    unknown = sorted(set(value) - set(NAMES))
    if unknown:
        raise BadInput(f"limits has a limit this daemon does not know: {unknown[0][:40]!r}")
    if not value:
        return None
    return Resources(**given(value, "limits."))
