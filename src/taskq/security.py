"""Whose task is it, and may it run: the run-as-owner rules, like atd's.

A task runs as the owner of its file. A daemon run as root runs each task
as its file's owner (with that user's groups, HOME, USER, LOGNAME and
SHELL), provided the owner has a passwd entry and the spool's config allows
the user ([security] allow = [...], deny = [...] in config.toml; no allow
list means every user). A daemon run as an ordinary user runs only tasks
whose files that user owns. Files that others could write were refused
before this point (fsutil.read_spool_file).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    allow: frozenset[str] | None = None  # None: every user
    deny: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RunAs:
    """The identity an attempt runs under."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str
    home: str

    @property
    def switch(self) -> bool:
        """Whether the daemon must change user to run it."""
        return self.uid != os.geteuid()


def run_as(owner: int, policy: Policy) -> RunAs:
    """The identity for a task file owned by uid `owner`; ValueError says why not."""
    me = os.geteuid()
    if me != 0 and owner != me:
        raise ValueError(f"owned by uid {owner}, not by the daemon's user (uid {me})")
    try:
        pw = pwd.getpwuid(owner)
    except KeyError:
        if (
            owner == me
            and str(me) not in policy.deny
            and (policy.allow is None or str(me) in policy.allow)
        ):  # our own task, under a bare uid (a container): no switch needed
            home = os.environ.get("HOME", "/")
            return RunAs(me, os.getegid(), tuple(os.getgroups()), str(me), home)
        raise ValueError(f"owned by uid {owner}, which has no passwd entry") from None
    if pw.pw_name in policy.deny or (policy.allow is not None and pw.pw_name not in policy.allow):
        raise ValueError(f"owned by {pw.pw_name}, who may not run tasks here (config.toml)")
    groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)) if me == 0 else tuple(os.getgroups())
    return RunAs(owner, pw.pw_gid, groups, pw.pw_name, pw.pw_dir)
