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
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

from taskq.daemon import intake, poison
from taskq.daemon.crew import Crew, Part
from taskq.errors import CorruptFile
from taskq.spool import drop, fsutil, rundir
from taskq.spool import runas as security
from taskq.spool.drop import Claimed, DropName
from taskq.spool.faults import crash_point
from taskq.spool.layout import stray
from taskq.text.quote import quote
from taskq.times.timespec import MS

log = logging.getLogger("taskq")
T = TypeVar("T")
_END = object()

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
        self._group: list[tuple[Claimed, str, intake.Ready]] = []  # checked, to be filed together
        self.poison.sets_aside("drop", self._set_aside)

    def run(self, now: int) -> Took:
        """Take in what is in drop/ (and claims left by dead daemons), within one pass's budget.

        Submissions are checked one by one and filed together under one
        sync barrier (intake.file_group), before anything that may name
        one of them is handled: a request, a submission with --after, the
        end of the pass. Until then each stays in pickup/, claimed: a crash
        before its task is durable leaves it there to be filed again.
        """
        began = self.clock.mono()
        outcomes: list[str] = []
        todo = self._todo(now)
        taken = 0  # drop files claimed, and junk set aside: each counts against the budget
        more = False
        for item in todo:
            if item is not None:
                outcomes += self._take(*item, now)
            taken += 1
            if intake.LATER in outcomes:
                break  # the spool is full or read-only: no use trying the others now
            if taken >= PASS_FILES or self.clock.mono() - began > PASS_BUDGET:
                more = next(todo, _END) is not _END  # (claimed: the next pass takes it over)
                break
        if intake.LATER not in outcomes:
            outcomes += self._flush(now)
        self._group.clear()  # (left claimed in pickup/ after a LATER: the next pass)
        if taken:
            fsutil.fsync_dir(self.spool.pickup)  # removals: a crash before redoes them, no harm
        return Took(outcomes.count(intake.FILED), outcomes.count(intake.CHANGED), more)

    def _todo(self, now: int) -> Iterator[tuple[Claimed, str] | None]:
        """Claims of dead daemons, taken over; then drop/'s files, each claimed in its turn.

        None for a name set aside or left alone (junk costs a pass's budget too).
        """
        yield from self._left_over(now)
        for entry in fsutil.listdir(self.spool.drop):
            name = drop.parse_name(entry)
            if name is None:
                if self._unfinished(entry, now):
                    yield None
                continue
            claimed = Claimed(name, self.expiry(now), self.daemon.pid, self.daemon.host)
            try:
                path = drop.claim(self.spool, self.spool.drop_path(entry), claimed)
            except FileNotFoundError:
                continue  # another daemon's now, or withdrawn by its member
            yield claimed, path

    def _unfinished(self, entry: str, now: int) -> bool:
        """A name that is no finished drop file: being written, abandoned, or junk.

        Whether it was removed or set aside (what costs the pass a sync).
        """
        path = self.spool.drop_path(entry)
        if stray(entry) or (entry.endswith(drop.PART) and drop.parse_name(entry[:-5])):
            try:
                if os.lstat(path).st_mtime * 1e6 < now - self.stale_age:
                    os.unlink(path)  # abandoned by its writer
                    return True
            except OSError:
                pass
            return False
        self.settler.quarantine(path, "not a drop file name", now)
        return True

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
            if old.daemon != new.daemon:  # (not one of ours left for this pass)
                log.info("took over pickup of %s from %s", old.name, old.daemon)
        return out

    def _abandoned(self, old: Claimed, now: int) -> bool:
        if old.host == self.daemon.host:
            return old.pid == self.daemon.pid or not rundir.daemon_alive(self.spool.run, old.daemon)
        return self.clock.may_start(old.expiry, now)

    def _take(self, claimed: Claimed, path: str, now: int) -> list[str]:
        """Check one claimed drop file; file it with the group, or act and answer now.

        Its outcomes, the group's first where the group had to be filed before it.
        """
        ahead = [] if claimed.name.kind == drop.SUBMISSION else self._flush(now)
        if intake.LATER in ahead:
            return ahead
        checked = self._guarded(claimed, path, now, "pickup", lambda: self._check(path, claimed))
        if checked is None:
            return [*ahead, intake.NOTHING]  # gone, or quarantined
        uid, got = checked
        if isinstance(got, intake.Ready):
            if not got.body.after:
                self._group.append((claimed, path, got))
                return ahead
            ahead += self._flush(now)  # a task it waits for may be one of the group
            if intake.LATER in ahead:
                return ahead
            return [*ahead, self._file_alone(claimed, path, got, now)]
        return [*ahead, self._answer(claimed, path, uid, got)]

    def _check(
        self, path: str, claimed: Claimed
    ) -> tuple[int, intake.Answer | intake.Ready] | None:
        """Read a claimed drop file whole and check it (a request: carry it out); its owner."""
        name = claimed.name
        limit = drop.SUBMISSION_LIMIT if name.kind == drop.SUBMISSION else drop.REQUEST_LIMIT
        try:
            data, uid = fsutil.read_spool_file_owned(path, limit)
        except FileNotFoundError:
            return None
        crash_point("pickup.read")
        return uid, intake.handle(self.spool, name, data, uid, self.policy, self.clock.now())

    def _flush(self, now: int) -> list[str]:
        """File the group's submissions together; their outcomes."""
        group, self._group = self._group, []
        if len(group) < 2:  # one alone: a submit's fsyncs, not syncfs, which flushes everyone's
            return [self._file_alone(*group[0], now)] if group else []
        try:
            answers = intake.file_group(self.spool, [ready for _, _, ready in group], now)
        except intake.Later as e:
            self._later(group[0][0].name, e)
            return [intake.LATER]  # all kept in pickup/, ours: the next pass files them
        except Exception as e:
            if poison.transient(e):
                raise
            log.warning("cannot file %d submissions together (%s); each alone", len(group), e)
            return [self._file_alone(c, p, ready, now) for c, p, ready in group]
        return [self._answer(c, p, r.uid, a) for (c, p, r), a in zip(group, answers, strict=True)]

    def _file_alone(self, claimed: Claimed, path: str, ready: intake.Ready, now: int) -> str:
        try:
            got = self._guarded(
                claimed, path, now, "file", lambda: intake.file_one(self.spool, ready, now)
            )
        except intake.Later as e:
            self._later(claimed.name, e)
            return intake.LATER
        return intake.NOTHING if got is None else self._answer(claimed, path, ready.uid, got)

    def _guarded(
        self, claimed: Claimed, path: str, now: int, step: str, do: Callable[[], T]
    ) -> T | None:
        """do(), the handling of one drop file, under the poison guard.

        None if it raised: a file that is not what its name says, or whose
        handling raised anything unexpected, is quarantined and its member
        told. intake.Later (the spool cannot take it now) goes on to the
        caller; a transient error of the spool or the host, to the loop.
        """
        later = None
        with self.poison.handling("drop", str(claimed.name), path, step):
            try:
                return do()
            except intake.Later as e:
                later = e
            except CorruptFile as e:
                self._refuse(claimed.name, path, str(e), now)
                return None
            except Exception as e:
                if poison.transient(e):
                    raise
                told = f"cannot be taken in: {step} failed: {type(e).__name__}"
                self._refuse(
                    claimed.name, path, f"{step} failed: {type(e).__name__}: {e}", now, told
                )
                return None
        assert later is not None  # (every other way out of the handling returns)
        raise later

    def _later(self, name: DropName, e: intake.Later) -> None:
        if name not in self._deferred:
            self._deferred.add(name)
            log.error("cannot file drop/%s yet: %s", name, quote(str(e)))

    def _answer(self, claimed: Claimed, path: str, uid: int, answer: intake.Answer) -> str:
        """Tell the member what became of a drop file and remove it; its outcome."""
        name = claimed.name
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

    def _set_aside(self, path: str, reason: str) -> None:
        """The poison guard's quarantine of a claimed drop file (two daemons died on it)."""
        claimed = drop.parse_claim(os.path.basename(path))
        if claimed is not None:
            self._refuse(claimed.name, path, reason, self.clock.now(), "cannot be taken in")

    def _refuse(
        self, name: DropName, path: str, reason: str, now: int, told: str | None = None
    ) -> None:
        """Quarantine a drop file, and tell its member why (told: what the member may read).

        The answer is not written where it would replace another user's.
        """
        try:
            uid = os.lstat(path).st_uid
        except FileNotFoundError:
            return
        self.settler.quarantine(path, f"from uid {uid}: {reason}", now)
        try:
            if os.lstat(self.spool.reply_path(str(name))).st_uid != uid:
                return
        except FileNotFoundError:
            pass
        doc = intake.refusal(f"refused: {told or reason}", intake.EX_REFUSED)
        try:
            drop.reply(self.spool, name, uid, doc)
        except OSError as e:
            log.warning("cannot answer drop/%s: %s", name, quote(str(e)))
