"""Taking in a shared spool's drop: claim each drop file once, check it, act, answer, remove.

A member's submission or request (spool/drop.py) is claimed by one rename
out of drop/ into pickup/ under this daemon's name and a lease, so that of
all the daemons and hosts sharing the spool exactly one takes it; a claim
whose daemon died is taken over (at once on its host, by others once its
lease has run out). The claimed file is read once, whole (a regular file
with one link, not writable by others, within its size), and the reading
decides everything (intake.py): the member's file is never used again, and
it is removed once what it asked for is done and answered. A file that is
no drop file is quarantined; names being written (NAME.part) and strays are
left alone until they are abandoned. Anchor: Postfix's pickup(8), which
copies each maildrop file into a queue file of its own and deletes it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import NamedTuple

from taskq.daemon import intake
from taskq.daemon.crew import Crew, Part
from taskq.errors import CorruptFile
from taskq.spool import drop, fsutil, rundir
from taskq.spool import runas as security
from taskq.spool.drop import Claimed, DropName
from taskq.spool.layout import stray
from taskq.text.quote import quote
from taskq.times.timespec import MS

log = logging.getLogger("taskq")

PASS_BUDGET = 50 * MS  # at most this long per pass; the loop comes back for the rest
PASS_FILES = 1000


class Took(NamedTuple):
    """What one pass did: tasks filed, other changes made (requests), whether files remain."""

    filed: int
    changed: int
    more: bool


class Pickup(Part):
    """The daemon's intake of members' drop files."""

    def __init__(self, crew: Crew, policy: security.UserRules, stale_age: int) -> None:
        super().__init__(crew)
        self.policy = policy
        self.stale_age = stale_age  # µs after which a NAME.part or a stray is abandoned
        self._deferred: set[DropName] = set()  # told once that the spool could not take them

    def run(self, now: int) -> Took:
        """Take in what is in drop/ (and claims left by dead daemons), within one pass's budget."""
        began = self.clock.mono()
        filed = changed = taken = 0
        todo = self._todo(now)
        while True:
            if taken >= PASS_FILES or (taken and self.clock.mono() - began > PASS_BUDGET):
                more = next(todo, None) is not None  # (claimed: the next pass takes it over)
                return Took(filed, changed, more)
            item = next(todo, None)
            if item is None:
                break
            outcome = self._take(*item, now)
            taken += 1
            if outcome == intake.LATER:
                break  # the spool is full or read-only: no use trying the others now
            filed += outcome == intake.FILED
            changed += outcome == intake.CHANGED
        if taken:
            fsutil.fsync_dir(self.spool.pickup)  # removals: a crash before redoes them, no harm
        return Took(filed, changed, False)

    def _todo(self, now: int) -> Iterator[tuple[Claimed, str]]:
        """Claims of dead daemons, taken over; then drop/'s files, each claimed in its turn."""
        yield from self._left_over(now)
        for entry in fsutil.listdir(self.spool.drop):
            name = drop.parse_name(entry)
            if name is None:
                self._unfinished(entry, now)
                continue
            claimed = Claimed(name, self.expiry(now), self.daemon.pid, self.daemon.host)
            try:
                path = drop.claim(self.spool, self.spool.drop_path(entry), claimed)
            except FileNotFoundError:
                continue  # another daemon's now, or withdrawn by its member
            yield claimed, path

    def _unfinished(self, entry: str, now: int) -> None:
        """A name that is no finished drop file: being written, abandoned, or junk."""
        path = self.spool.drop_path(entry)
        if stray(entry) or (entry.endswith(drop.PART) and drop.parse_name(entry[:-5])):
            try:
                if os.lstat(path).st_mtime * 1e6 < now - self.stale_age:
                    os.unlink(path)  # abandoned by its writer
            except OSError:
                pass
            return
        self.settler.quarantine(path, "not a drop file name", now)

    def _left_over(self, now: int) -> list[tuple[Claimed, str]]:
        """Claims in pickup/ whose daemon died before it finished them, taken over."""
        out = []
        for entry in fsutil.listdir(self.spool.pickup):
            old = drop.parse_claim(entry)
            path = self.spool.pickup_path(entry)
            if old is None:
                if not stray(entry):
                    self.settler.quarantine(path, "not a pickup claim name", now)
                continue
            if not self._abandoned(old, now):
                continue
            new = old._replace(expiry=self.expiry(now), pid=self.daemon.pid, host=self.daemon.host)
            try:
                out.append((new, drop.claim(self.spool, path, new)))
            except FileNotFoundError:
                continue
            log.info("took over pickup of %s from %s", old.name, old.daemon)
        return out

    def _abandoned(self, old: Claimed, now: int) -> bool:
        if old.host == self.daemon.host:
            return old.pid == self.daemon.pid or not rundir.daemon_alive(self.spool.run, old.daemon)
        return self.clock.may_start(old.expiry, now)

    def _take(self, claimed: Claimed, path: str, now: int) -> str:
        """Read one claimed drop file, act on it and answer; remove it. Its outcome."""
        name = claimed.name
        try:
            limit = drop.SUBMISSION_LIMIT if name.kind == drop.SUBMISSION else drop.REQUEST_LIMIT
            data, uid = fsutil.read_spool_file_owned(path, limit)
        except FileNotFoundError:
            return intake.NOTHING
        except CorruptFile as e:
            self._refuse_file(claimed, path, os.lstat(path).st_uid, str(e), now)
            return intake.NOTHING
        try:
            answer = intake.handle(self.spool, name, data, uid, self.policy, now)
        except CorruptFile as e:
            self._refuse_file(claimed, path, uid, str(e), now)
            return intake.NOTHING
        except (ValueError, TypeError, ArithmeticError, RecursionError, LookupError) as e:
            # A value the reading let through and later code refused: the file
            # is bad, whatever it is, and must not stop the daemon.
            self._refuse_file(claimed, path, uid, f"cannot be used: {type(e).__name__}: {e}", now)
            return intake.NOTHING
        except intake.Later as e:  # kept in pickup/, ours: the next pass tries again
            if name not in self._deferred:
                self._deferred.add(name)
                log.error("cannot file drop/%s yet: %s", name, quote(str(e)))
            return intake.LATER
        self._deferred.discard(name)
        if answer.outcome == intake.DEFERRED:
            return answer.outcome  # kept in pickup/, ours: the next pass tries it again
        if answer.doc is not None:
            drop.reply(self.spool, name, uid, answer.doc)
        if answer.refused and answer.doc is not None:
            message = quote(str(answer.doc["message"]))
            log.warning("refused drop/%s from uid %d: %s", name, uid, message)
        os.unlink(path)
        return answer.outcome

    def _refuse_file(self, claimed: Claimed, path: str, uid: int, reason: str, now: int) -> None:
        """A drop file that is not what its name says: quarantined, its member told why."""
        self.settler.quarantine(path, f"from uid {uid}: {reason}", now)
        doc = intake.refusal(f"refused: {reason}", intake.EX_REFUSED)
        try:
            drop.reply(self.spool, claimed.name, uid, doc)
        except OSError as e:
            log.warning("cannot answer drop/%s: %s", claimed.name, quote(str(e)))
