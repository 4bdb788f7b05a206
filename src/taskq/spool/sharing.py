"""Who writes where in a shared spool: the modes of its directories, set up and checked.

A spool shared by the members of a group (`taskq init --shared GROUP`)
belongs to root and that group. Members create files in drop/ alone (1730:
they may create and open by name, never list, and the sticky bit keeps
each one's files his own); they may search keys/ and replies/ for the
files named for them (2710), and read (2750) every other directory, to
follow their own tasks; only root (the daemon) writes anything but drop/.
This module owns that table (MODES), making a spool so or converting one
(`share`), and what fsck expects of one (`expected`).
"""

from __future__ import annotations

import grp
import os
import stat
from collections.abc import Iterator

from taskq.errors import BadInput, NoPermission
from taskq.spool import fsutil
from taskq.spool.layout import CONFIG, DOORBELL, DROP_DIRS, SUBDIRS, Spool

READ = 0o2750  # members read and search; setgid: what is made in it gets the group
MODES = {
    ".": READ,
    **dict.fromkeys(SUBDIRS, READ),
    "drop": 0o1730,  # members create, never list; sticky: their files stay theirs
    "pickup": READ,
    "replies": 0o2710,  # members open the answers named for them, never list
    "keys": 0o2710,  # members read their own keys by name, never list
}
FILES = {DOORBELL: 0o640, CONFIG: 0o640}  # members read config.toml at every submit


def group_id(group: str) -> int:
    """A group's id, by name or number; BadInput if there is none."""
    try:
        return grp.getgrgid(int(group)).gr_gid if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise BadInput(f"no group {group!r}") from None


def expected(spool: Spool) -> dict[str, tuple[int, int]] | None:
    """A shared spool's layout directories and the (mode, gid) each must have; None if private."""
    if not spool.shared():
        return None
    gid = os.lstat(spool.drop).st_gid
    return {sub: (mode, gid) for sub, mode in MODES.items()}


def share(spool: Spool, gid: int) -> list[str]:
    """Make the spool shared by group gid, or convert it: every directory root's and gid's.

    Directories of the layout get their mode from MODES, and every
    directory below them (buckets, done/ days, logs/ID, ids/ shards ...)
    READ; files keep their owners and modes (a member's task file from
    before the conversion still runs as that member), but for the doorbell
    and config.toml (FILES). Nothing is followed through a link. Returns one
    line per directory or file changed.
    """
    if os.geteuid() != 0:
        raise NoPermission("only root can share a spool (its daemon runs members' tasks as them)")
    spool.init()
    changed = []
    for sub in (".", *SUBDIRS, *DROP_DIRS):
        path = os.path.normpath(os.path.join(spool.root, sub))
        fsutil.ensure_dir(path)
        changed += _set(spool, path, MODES[sub], gid)
        if sub not in (".", *DROP_DIRS):
            for below in _below(path):
                changed += _set(spool, below, READ, gid)
    for name, mode in FILES.items():
        changed += _set(spool, os.path.join(spool.root, name), mode, gid, directory=False)
    fsutil.fsync_dir(spool.root)
    return changed


def _below(top: str) -> Iterator[str]:
    for directory, subdirs, _ in os.walk(top):
        for sub in subdirs:
            path = os.path.join(directory, sub)
            if not os.path.islink(path):  # (os.walk does not follow it either)
                yield path


def _set(spool: Spool, path: str, mode: int, gid: int, directory: bool = True) -> list[str]:
    """Give path to root and gid with mode, through a descriptor opened without following."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except FileNotFoundError:
        return []
    except OSError as e:
        return [f"{os.path.relpath(path, spool.root)}: left alone ({e.strerror})"]
    try:
        st = os.fstat(fd)
        if not directory and not stat.S_ISREG(st.st_mode):
            return [f"{os.path.relpath(path, spool.root)}: left alone (not a regular file)"]
        if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, gid, mode):
            return []
        os.fchown(fd, 0, gid)
        os.fchmod(fd, mode)  # after chown, which drops setgid
        was = stat.S_IMODE(st.st_mode)
        return [
            f"{os.path.relpath(path, spool.root)}: {was:04o} {st.st_uid}:{st.st_gid} -> "
            f"{mode:04o} 0:{gid}"
        ]
    finally:
        os.close(fd)
