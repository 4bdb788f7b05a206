"""The mount table: each mount's type, root and options, and what a path is on.

Read from /proc/self/mountinfo (octal escapes in paths undone). The cgroup
setup finds the hierarchies here; the daemon asks whether the spool is on
a local filesystem, whose file times come from this kernel's own clock
(clock_stamped_here), so that a start need allow for no clock margin.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from taskq.text.lazyre import Lazy

MOUNTINFO = "/proc/self/mountinfo"
# Filesystems whose times the running kernel stamps from its own clock: no
# network, no FUSE daemon (which may pass through another host's times).
LOCAL_TYPES = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "jfs", "bcachefs", "nilfs2"}
)
_ESCAPE = Lazy(r"\\([0-7]{3})")


class Mount(NamedTuple):
    """One line of the mount table."""

    fstype: str
    root: str  # what of its filesystem is mounted here
    point: str  # where
    options: frozenset[str]  # the filesystem's own (super) options


def table(path: str = MOUNTINFO) -> list[Mount]:
    """Every mount, in the table's order; none if the table cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        left, sep, right = line.partition(" - ")
        parts, tail = left.split(), right.split()
        if sep and len(parts) >= 5 and len(tail) >= 3:
            options = frozenset(tail[2].split(","))
            out.append(Mount(tail[0], _unescape(parts[3]), _unescape(parts[4]), options))
    return out


def fstype(path: str, mounts: list[Mount] | None = None) -> str | None:
    """The type of the filesystem path is on (its nearest existing ancestor's), or None."""
    where = os.path.realpath(path)
    while not os.path.exists(where) and where != "/":
        where = os.path.dirname(where)
    best: Mount | None = None
    for mount in table() if mounts is None else mounts:  # the last mount over a point wins
        point = mount.point.rstrip("/") or "/"
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return None if best is None else best.fstype


def clock_stamped_here(path: str) -> bool:
    """Whether path is on a local filesystem, whose file times are this kernel's clock."""
    return fstype(path) in LOCAL_TYPES


def _unescape(field: str) -> str:
    return _ESCAPE.compiled().sub(lambda m: chr(int(m.group(1), 8)), field)
