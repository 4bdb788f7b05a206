"""Check a spool's structure and permissions; repair what is safe to repair.

Missing directories are created and loose permissions tightened; files that
are not what their place says (bad names, unreadable or foreign bodies,
symlinks, hard links, group- or world-writable task files) are quarantined
in corrupt/ with a reason; stale tmp/ files and key files naming no task are
removed. Every task's ids/ hint is rebuilt from where the task is, and hints
of no task are removed. Duplicate tasks and orphaned logs are reported for
the operator.
With dry_run nothing changes. Safe beside running daemons: every repair is a
rename or unlink that loses quietly if a daemon moved the file first.
"""

from __future__ import annotations

import collections
import contextlib
import os
import stat
from dataclasses import dataclass, field

from taskq.errors import BadInput, CorruptFile, NotFound
from taskq.spool import byid, fsutil, hints, retention, sharing, walk
from taskq.spool.keys import ForeignKey, key_owner, read_key
from taskq.spool.layout import (
    CONFIG,
    DOORBELL,
    DROP_DIRS,
    RANKED,
    SUBDIRS,
    Spool,
    journal_path,
    stray,
)
from taskq.spool.states import State
from taskq.spool.task import MAX_BODY, ClaimName, TaskBody, TaskName, valid_id

# Every directory that holds tasks, claimed/ once for its three phases.
CHECKED = (State.PENDING, State.CLAIMED, State.DONE, State.WAITING, State.FAILED, State.CANCELLED)


@dataclass
class Report:
    """What fsck found: each line says what and whether it was fixed."""

    lines: list[str] = field(default_factory=list)
    problems: int = 0
    fixed: int = 0

    def found(self, text: str, fixed: bool) -> None:
        self.problems += 1
        self.fixed += fixed
        self.lines.append(text)


class Checker:
    def __init__(self, spool: Spool, now: int, dry_run: bool) -> None:
        self.spool = spool
        self.now = now
        self.dry = dry_run
        self.report = Report()
        self.seen: dict[str, list[str]] = collections.defaultdict(list)
        self.moved: set[str] = set()

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.spool.root)

    def fix(self, text: str, action: str) -> bool:
        """Record a problem and whether it was (or, dry, would be) fixed."""
        self.report.found(f"{text}: {'would be ' if self.dry else ''}{action}", not self.dry)
        return not self.dry

    def run(self) -> Report:
        self.layout()
        for place in walk.places(self.spool, CHECKED, bad=self.quarantine):
            self.tasks(place.directory, claimed=place.state == State.CLAIMED)
        self.duplicates()
        self.stale_tmp()
        self.hints()  # first: the lookups of keys() and orphaned_logs() use them
        self.keys()
        self.orphaned_logs()
        return self.report

    def layout(self) -> None:
        try:
            shared = bool(os.stat(self.spool.root).st_mode & 0o020)
        except OSError:
            shared = False
        modes = sharing.expected(self.spool)
        for sub in (".", *SUBDIRS, *(DROP_DIRS if modes else ())):
            path = os.path.normpath(os.path.join(self.spool.root, sub))
            if self.layout_dir(path, shared) and modes is not None:
                self.shared_mode(path, *modes[sub])
        known = {*SUBDIRS, *DROP_DIRS, DOORBELL, RANKED, CONFIG}
        for entry in fsutil.listdir(self.spool.root, follow=True):
            if entry not in known and not stray(entry):
                self.quarantine(os.path.join(self.spool.root, entry), "not part of a spool")

    def layout_dir(self, path: str, shared: bool) -> bool:
        """Check one directory of the layout: there, a directory (never a link), its mode.

        What stands in its place (a symbolic link, a file) is set aside in
        corrupt/, never followed: a link planted where ids/ was would have
        fsck change the mode of whatever it points at. False if the
        directory is not there (even after a repair, with --dry-run).
        """
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if self.fix(f"{self.rel(path)}/ is missing", "created"):
                fsutil.ensure_dir(path)  # (in a shared spool, as its parent; shared_mode sets it)
            return not self.dry
        if not stat.S_ISDIR(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            self.quarantine(path, f"{what} where a directory of the layout should be")
            if not self.dry and not os.path.lexists(path):
                fsutil.ensure_dir(path)
            return not self.dry
        if sharing.expected(self.spool) is not None:
            return True  # a shared spool's modes are its table's (shared_mode)
        mode = stat.S_IMODE(st.st_mode)
        # A shared spool (its root group-writable) keeps its group bits;
        # no spool directory may be writable by others.
        loose = 0o007 if shared else 0o077
        fixed = (mode & ~loose) & 0o7777
        if mode & loose and self.fix(
            f"{self.rel(path)}/ has mode {mode:04o}", f"set to {fixed:04o}"
        ):
            fd = fsutil.open_dir(path)  # the directory looked at, never a link put there since
            try:
                os.fchmod(fd, fixed)
            finally:
                os.close(fd)
        return True

    def shared_mode(self, path: str, mode: int, gid: int) -> None:
        """A shared spool's directory has its mode and group from the table (sharing.py)."""
        fd = fsutil.open_dir(path)
        try:
            st = os.fstat(fd)
            was = stat.S_IMODE(st.st_mode)
            if (was, st.st_gid) == (mode, gid):
                return
            text = f"{self.rel(path)}/ has mode {was:04o} and group {st.st_gid}"
            if self.fix(text, f"set to {mode:04o} and group {gid} (a shared spool's)"):
                os.fchown(fd, -1, gid)
                os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def quarantine(self, path: str, reason: str) -> None:
        if self.fix(f"{self.rel(path)}: {reason}", "quarantined in corrupt/"):
            self.spool.quarantine(path, reason, self.now)

    def remove(self, path: str, text: str) -> None:
        if self.fix(text, "removed"):
            with contextlib.suppress(FileNotFoundError):  # someone removed it meanwhile
                os.unlink(path)

    def tasks(self, directory: str, claimed: bool) -> None:
        for entry in fsutil.listdir(directory):
            if stray(entry):
                continue
            path = os.path.join(directory, entry)
            try:
                name = ClaimName.parse(entry).task if claimed else TaskName.parse(entry)
            except ValueError:
                self.quarantine(path, "not a task file name")
                continue
            reason = self.bad_file(path, name)
            if reason is not None:
                self.quarantine(path, reason)
            elif os.path.lexists(path):
                self.seen[name.id].append(self.rel(path))
            else:
                self.moved.add(name.id)  # a daemon moved it meanwhile: it exists

    def bad_file(self, path: str, name: TaskName) -> str | None:
        """Why a task file is bad, or None if it is sound."""
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o022:
                return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
            body = TaskBody.from_json(fsutil.read_spool_file(path, MAX_BODY))
        except CorruptFile as e:
            return str(e)
        except FileNotFoundError:
            return None  # moved on by a daemon meanwhile: not ours to judge
        except OSError as e:
            return f"unreadable: {e.strerror}"
        if body.id != name.id:
            return f"body id {body.id} does not match the file name"
        return None

    def duplicates(self) -> None:
        for task_id, places in sorted(self.seen.items()):
            if len(places) > 1:
                self.report.found(
                    f"task {task_id} is in {len(places)} places: "
                    f"{', '.join(places)}; left for the operator",
                    False,
                )

    def stale_tmp(self) -> None:
        """Abandoned submissions, by the daemon's own rule (retention.abandoned)."""
        for entry in retention.abandoned(self.spool, self.now):
            if self.fix(f"tmp/{entry}: abandoned submission", "removed"):
                with contextlib.suppress(FileNotFoundError):  # someone removed it meanwhile
                    retention.forget_abandoned(self.spool, entry)

    def keys(self) -> None:
        for entry in fsutil.listdir(self.spool.keys):
            path = os.path.join(self.spool.keys, entry)
            if entry.startswith("."):
                continue  # staging files: stale_tmp's rule applies via the daemon
            try:
                name = read_key(path, key_owner(entry))
            except ForeignKey as e:
                self.remove(path, f"keys/{entry}: {e} (a squat)")
                continue
            except (OSError, ValueError, CorruptFile):
                self.remove(path, f"keys/{entry}: not a key file")
                continue
            if not self.gone(name.id):
                continue
            if os.path.exists(self.spool.tmp_body(name.id)):
                continue  # a submission in flight: the key comes before its task
            self.remove(path, f"keys/{entry}: names task {name.id}, which is gone")

    def gone(self, task_id: str) -> bool:
        """Whether no task has this id, looking again for one that moved meanwhile."""
        if task_id in self.seen or task_id in self.moved:
            return False
        try:
            byid.locate(self.spool, task_id)
        except (NotFound, BadInput):
            return True
        return False

    def hints(self) -> None:
        """Make every task's ids/ hint point at its file; remove hints of no task.

        A hint left behind by a move the daemon made (it never updates them)
        is rewritten quietly: that is normal. A missing one is a problem, as
        is a hint of no task, or a file in ids/ that is no hint.
        """
        for task_id, places in sorted(self.seen.items()):
            if len(places) != 1:
                continue
            path = os.path.join(self.spool.root, places[0])
            hint = hints.read_hint(self.spool, task_id)
            if hint is None and not os.path.lexists(self.spool.hint_path(task_id)):
                if self.fix(f"task {task_id} has no hint in ids/", "written"):
                    hints.point(self.spool, task_id, path)
                continue
            if not self.dry and (hint is None or hints.name_of(path) != hint):
                hints.point(self.spool, task_id, path)  # rewritten (in the current form)
        for shard in fsutil.listdir(self.spool.ids):
            directory = os.path.join(self.spool.ids, shard)
            if shard.startswith("+"):  # a batch's hints: kept while one of its ids is a task's
                for path, why in hints.batch_problems(directory, self.taken):
                    self.remove(path, f"{self.rel(path)}: {why}")
                continue
            for entry in fsutil.listdir(directory):
                if not stray(entry):
                    self.hint(directory, entry)

    def taken(self, task_id: str) -> bool:  # a task's id, or a submission's in flight
        return task_id in self.seen or task_id in self.moved or in_flight(self.spool, task_id)

    def hint(self, directory: str, entry: str) -> None:
        path = os.path.join(directory, entry)
        if not valid_id(entry) or entry[-2:] != os.path.basename(directory):
            self.remove(path, f"{self.rel(path)}: not a task id's hint")
            return
        if not os.path.islink(path):
            self.remove(path, f"{self.rel(path)}: a hint must be a symbolic link")
            return
        if self.taken(entry):
            return
        hint = hints.read_hint(self.spool, entry)
        if hint is None:
            self.remove(path, f"{self.rel(path)}: does not point at a task file")
        elif byid.probe(self.spool, entry, byid.journal_names(self.spool, hint)) is None:
            self.remove(path, f"{self.rel(path)}: names task {entry}, which is gone")

    def orphaned_logs(self) -> None:
        for entry in fsutil.listdir(self.spool.logs):
            self.journal(journal_path(os.path.join(self.spool.logs, entry)))
            if self.gone(entry):
                self.report.found(
                    f"logs/{entry}: no task with this id; left for the operator", False
                )

    def journal(self, path: str) -> None:
        """A journal must be a regular file: anything else reads as none, and blocks appends."""
        try:
            st = os.lstat(path)
        except OSError:
            return  # none (yet), or no directory around it
        if not stat.S_ISREG(st.st_mode):
            self.quarantine(path, "a journal that is not a regular file")


def in_flight(spool: Spool, task_id: str) -> bool:
    """Whether a submission of this id is in flight: its hint comes before its task."""
    return os.path.exists(spool.tmp_body(task_id))


def check(spool: Spool, now: int, dry_run: bool = False) -> Report:
    """Check (and unless dry_run, repair) the spool; return the report."""
    return Checker(spool, now, dry_run).run()
