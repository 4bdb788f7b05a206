"""Finding, once at start-up, where this daemon can make attempts' cgroups (v2, v1, or nowhere).

The daemon's own cgroup is read from /proc/self/cgroup and the
hierarchies' mount points from /proc/self/mountinfo. cgroup v2 is usable
when the daemon's cgroup offers controllers (cgroup.controllers) and the
daemon may write it: delegated to it, as systemd's Delegate=yes does.
Then the controllers are enabled for its children; v2 lets a cgroup hand
controllers down only while it holds no process itself, so a daemon whose
cgroup holds it first moves into the leaf DAEMON_LEAF beside OURS. cgroup
v1 is usable for each controller whose hierarchy lets the daemon make
directories under its own cgroup. `auto` takes the backend offering more
of memory, cpu and pids (v2 on a tie); a problem found is said in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os

from taskq.daemon.cgroups import CONTROLLERS, DAEMON_LEAF, OURS, Backend, put
from taskq.spool import mounts as mount_table

MOUNTINFO = mount_table.MOUNTINFO
OWN = "/proc/self/cgroup"


def detect(mode: str, daemon: str) -> tuple[Backend | None, str]:
    """The backend to use, set up, and a line saying what it offers; or None and why not."""
    if mode == "none":
        return None, "turned off (--cgroups none)"
    mounts, own = _mounts(), _own()
    problems = []
    v2 = v1 = None
    if mode in ("auto", "v2"):
        v2, why = _v2_candidate(mounts, own)
        if v2 is None:
            problems.append(f"cgroup v2: {why}")
    if mode in ("auto", "v1"):
        v1, why = _v1_candidate(mounts, own)
        if not v1:
            problems.append(f"cgroup v1: {why}")
    try:
        if v2 is not None and (v1 is None or len(v2[1]) >= len(v1)):
            return _set_up_v2(v2[0], v2[1], daemon), ""
        if v1:
            return _set_up_v1(v1, daemon), ""
    except OSError as e:
        problems.append(f"cannot set up {e.filename or 'the cgroup'}: {e.strerror}")
    return None, "; ".join(problems) or "no cgroup hierarchy is mounted"


def _lines(path: str) -> list[str]:
    """The lines of a file of /proc, none when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """Each cgroup mount: (fstype, root within its hierarchy, mount point, super options)."""
    return [
        (m.fstype, m.root, m.point, set(m.options))
        for m in mount_table.table(MOUNTINFO)
        if m.fstype in ("cgroup", "cgroup2")
    ]


def _own() -> dict[str, str]:
    """The daemon's cgroup path in each hierarchy, by controller ('' for v2's)."""
    out: dict[str, str] = {}
    for line in _lines(OWN):
        _, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        for name in names.split(",") if names else [""]:
            out[name] = path
    return out


def _inside(root: str, mount: str, path: str) -> str | None:
    """Where a cgroup path (as /proc/self/cgroup names it) is, under a mount of root."""
    if root == "/":
        return mount + path.rstrip("/") if path != "/" else mount
    if path == root or path.startswith(root + "/"):
        return mount + path[len(root) :]
    return None  # our cgroup is outside what is mounted here


def _v2_candidate(
    mounts: list[tuple[str, str, str, set[str]]], own: dict[str, str]
) -> tuple[tuple[str, list[str]] | None, str]:
    """The daemon's v2 cgroup and the controllers it offers, if it may write it."""
    found = [(root, mount) for kind, root, mount, _ in mounts if kind == "cgroup2"]
    if not found or "" not in own:
        return None, "not mounted"
    where = _inside(found[0][0], found[0][1], own[""])
    if where is None:
        return None, f"the daemon's cgroup {own['']} is not under {found[0][1]}"
    try:
        with open(os.path.join(where, "cgroup.controllers"), encoding="ascii") as f:
            offered = [c for c in f.read().split() if c in CONTROLLERS]
    except OSError as e:
        return None, f"cannot read {where}/cgroup.controllers: {e.strerror}"
    if not offered:
        return None, f"the daemon's cgroup {where} offers none of memory, cpu, pids"
    if not os.access(where, os.W_OK) or not os.access(
        os.path.join(where, "cgroup.subtree_control"), os.W_OK
    ):
        return None, f"the daemon's cgroup {where} is not delegated to it (not writable)"
    return (where, offered), ""


def _v1_candidate(
    mounts: list[tuple[str, str, str, set[str]]], own: dict[str, str]
) -> tuple[dict[str, str], str]:
    """The daemon's own directory in each writable v1 hierarchy, by controller."""
    roots: dict[str, str] = {}
    why = "no hierarchy of memory, cpu or pids is mounted"
    for kind, root, mount, supers in mounts:
        for c in CONTROLLERS:
            if kind != "cgroup" or c not in supers or c in roots or c not in own:
                continue
            where = _inside(root, mount, own[c])
            if where is None or not os.path.isdir(where):
                why = f"the daemon's {c} cgroup {own[c]} is not under {mount}"
            elif not os.access(where, os.W_OK):
                why = f"{where} is not writable by the daemon"
            else:
                roots[c] = where
    return roots, why


def _set_up_v1(roots: dict[str, str], daemon: str) -> Backend:
    """Nothing is made before an attempt needs it: a daemon without such tasks leaves no trace."""
    return Backend("v1", roots, daemon)


def _set_up_v2(where: str, offered: list[str], daemon: str) -> Backend:
    """Hand the controllers down to OURS/daemon, first moving the daemon to a leaf if it must."""
    enable = " ".join("+" + c for c in offered)
    try:
        put(where, "cgroup.subtree_control", enable)
    except OSError as e:
        if e.errno != errno.EBUSY:  # (EBUSY: the cgroup holds processes, this daemon among them)
            raise
        leaf = os.path.join(where, DAEMON_LEAF)
        with contextlib.suppress(FileExistsError):
            os.mkdir(leaf, 0o755)
        put(leaf, "cgroup.procs", str(os.getpid()))
        put(where, "cgroup.subtree_control", enable)
    for sub in (os.path.join(where, OURS), os.path.join(where, OURS, daemon)):
        with contextlib.suppress(FileExistsError):
            os.mkdir(sub, 0o755)
        put(sub, "cgroup.subtree_control", enable)
    return Backend("v2", dict.fromkeys(offered, where), daemon)
