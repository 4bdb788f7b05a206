"""Whose task is it, and may it run: the run-as-owner rules, like atd's.

A task is the request of its file's owner, or, in a file root owns that
records a submitter (a daemon filed it from a member's drop file), of that
submitter (`requester`). A daemon run as root runs each task as that user
(with the user's groups, HOME, USER, LOGNAME and SHELL), provided the user
has a passwd entry and the spool's config allows the user ([security]
allow = [...], deny = [...] in config.toml; no allow list means every
user). A daemon run as an ordinary user runs only its own user's tasks.
Files that others could write were refused before this point
(fsutil.read_spool_file).
"""

from __future__ import annotations

import grp
import os
import pwd
import time
from dataclasses import dataclass

from taskq.errors import CorruptFile
from taskq.spool.task import TaskBody


def requester(body: TaskBody, file_uid: int) -> int:
    """The uid whose request a task is: its file's owner, or the submitter root filed it for.

    Only root can make a file that root owns, so a recorded submitter counts
    in root's files alone; in anyone else's it must be the owner.
    """
    if body.submitter is None or body.submitter == file_uid:
        return file_uid
    if file_uid == 0:
        return body.submitter
    raise CorruptFile(f"records submitter uid {body.submitter} but is owned by uid {file_uid}")


@dataclass(frozen=True)
class UserRules:
    """Whose tasks may run here: config.toml's [security] allow and deny lists."""

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


ACCOUNT_TTL = 10.0  # seconds a user's passwd entry and groups are reused for


def run_as(owner: int, rules: UserRules) -> RunAs:
    """The identity for a task file owned by uid `owner`; ValueError says why not."""
    me = os.geteuid()
    if me != 0 and owner != me:
        raise ValueError(f"owned by uid {owner}, not by the daemon's user (uid {me})")
    account = _account(owner, me)
    if account is None:
        if (
            owner == me
            and str(me) not in rules.deny
            and (rules.allow is None or str(me) in rules.allow)
        ):  # our own task, under a bare uid (a container): no switch needed
            home = os.environ.get("HOME", "/")
            return RunAs(me, os.getegid(), tuple(os.getgroups()), str(me), home)
        raise ValueError(f"owned by uid {owner}, which has no passwd entry")
    if account.name in rules.deny or (rules.allow is not None and account.name not in rules.allow):
        raise ValueError(f"owned by {account.name}, who may not run tasks here (config.toml)")
    return account


_accounts: dict[int, tuple[float, RunAs | None]] = {}


def _account(uid: int, me: int) -> RunAs | None:
    """A user's passwd entry and groups (None: no entry), looked up once per ACCOUNT_TTL.

    A burst of one user's tasks would otherwise read the passwd and group
    databases once per task; a change there counts within seconds.
    """
    now = time.monotonic()
    known = _accounts.get(uid)
    if known is not None and now - known[0] < ACCOUNT_TTL:
        return known[1]
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        account = None
    else:
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)) if me == 0 else tuple(os.getgroups())
        account = RunAs(uid, pw.pw_gid, groups, pw.pw_name, pw.pw_dir)
    _accounts[uid] = (now, account)
    return account


def private_group(uid: int) -> int | None:
    """The user's own group (a user private group, as Debian makes them), or None.

    A root daemon makes a member's task file and journal readable by this
    group, so that the member alone reads them. A primary group that other
    users share, or none, gives None: those files stay root's alone.
    """
    try:
        pw = pwd.getpwuid(uid)
        group = grp.getgrgid(pw.pw_gid)
    except KeyError:
        return None
    if group.gr_name != pw.pw_name or set(group.gr_mem) - {pw.pw_name}:
        return None
    return group.gr_gid
