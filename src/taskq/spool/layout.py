"""The spool's layout and lookups: where each state lives and finding tasks.

The directory is the state, the name is the index, the body is the request.
This module owns the paths, creating the layout, locating a task by id,
listing tasks, reading bodies and quarantining what cannot be parsed. The
transitions between states live in transitions.py; submission in submit.py.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from typing import NamedTuple

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.faults import crash_point
from taskq.spool.states import PHASE_OF, STATES, State
from taskq.spool.task import MAX_BODY, ClaimName, TaskBody, TaskName, check_id, valid_bucket
from taskq.times.timespec import format_compact

# An attempt names its log directory a few times; its id is checked once.
_checked_id = functools.lru_cache(maxsize=4096)(check_id)

SUBDIRS = (
    "tmp",
    "waiting",
    "pending",
    "claimed",
    "done",
    "failed",
    "cancelled",
    "corrupt",
    "logs",
    "keys",
    "run",
    "schedules",
    "deps",
    "paused",
    "ids",
    "permits",
)
# A shared spool's (`taskq init --shared`; see drop.py): what members drop,
# what daemons picked up, and the answers for members to read.
DROP_DIRS = ("drop", "pickup", "replies")
DOORBELL = "doorbell"
RANKED = "priorities"


def _log_warning(message: str) -> None:
    """The daemon's warning; logging is imported on first use (the CLI sets its own warn)."""
    import logging

    logging.getLogger("taskq").warning(message)


def stray(entry: str) -> bool:
    """Whether a name in the spool is someone else's business, never a task.

    Dot-names: an NFS client's silly-renamed files (.nfsXXXX, left while an
    unlinked file is still open), a FUSE filesystem's .fuse_hiddenXXXX, an
    editor's or a copy tool's temporaries. taskq never writes such names
    outside tmp/ and run/, so they are ignored: never run, never quarantined.
    """
    return entry.startswith(".")


class Located(NamedTuple):  # not a dataclass: making one costs every `taskq` run start-up time
    """A task found in the spool: its state, file path and parsed name."""

    state: State
    path: str
    name: TaskName
    claim: ClaimName | None = None


class Spool:
    """A spool directory: the durable record of every task."""

    def __init__(self, root: str) -> None:
        # A spool given as a symlink (/var/spool/taskq -> /srv/taskq) is
        # resolved once, so every command and check sees the same directory.
        self.root = os.path.realpath(root)
        # Told once about each directory a lookup skips (see readable_entries); the
        # CLI prints it, a daemon logs it.
        self.warn: Callable[[str], None] = _log_warning
        self._warned: set[str] = set()
        for sub in (*SUBDIRS, *DROP_DIRS):
            setattr(self, sub, os.path.join(self.root, sub))
        self.doorbell = os.path.join(self.root, DOORBELL)
        # Exists once a task with a --priority was submitted: daemons then read
        # the priority of due tasks (otherwise their names say all they need).
        self.ranked = os.path.join(self.root, RANKED)

    tmp: str
    waiting: str
    pending: str
    claimed: str
    done: str
    failed: str
    cancelled: str
    corrupt: str
    logs: str
    keys: str
    run: str
    schedules: str
    deps: str
    paused: str
    ids: str
    permits: str
    drop: str
    pickup: str
    replies: str

    def shared(self) -> bool:
        """Whether members submit through a drop (drop/ is a directory, never a link)."""
        try:
            return stat.S_ISDIR(os.lstat(self.drop).st_mode)
        except OSError:
            return False

    def member(self) -> bool:
        """Whether this process is a member of a shared spool, not its owner: it may drop only."""
        return self.shared() and os.stat(self.root).st_uid != os.geteuid()

    def init(self) -> None:
        """Create the layout (idempotent), with permissions for one owner."""
        os.makedirs(os.path.dirname(self.root), exist_ok=True)
        created = fsutil.ensure_dir(self.root, 0o700)
        for sub in SUBDIRS:
            fsutil.ensure_dir(os.path.join(self.root, sub), 0o700)
        if not os.path.exists(self.doorbell):
            self._create_doorbell()
        if created:
            fsutil.fsync_dir(self.root)
            fsutil.fsync_dir(os.path.dirname(self.root))

    def bucket_dir(self, bucket: str) -> str:
        return f"{self.pending}/{bucket}"  # os.path.join's generality costs a batch

    def log_dir(self, task_id: str) -> str:
        return f"{self.logs}/{_checked_id(task_id)}"

    def ring(self) -> None:
        """Wake daemons watching the doorbell; best effort, never fails a caller."""
        try:
            os.utime(self.doorbell)
        except FileNotFoundError:
            try:
                self._create_doorbell()
            except OSError:
                pass
        except OSError:
            pass

    def mark_ranked(self) -> None:
        """Say that some task has a priority (before that task is published)."""
        if not os.path.exists(self.ranked):
            with contextlib.suppress(FileExistsError):  # another submitter made it
                fsutil.write_new(self.ranked, b"", sync=True)
            fsutil.fsync_dir(self.root)

    def _create_doorbell(self) -> None:
        os.close(
            os.open(self.doorbell, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        )

    def read_body(self, path: str) -> TaskBody:
        """Read and validate a task body; CorruptFile says why it is bad."""
        return self.read_task(path)[0]

    def read_task(self, path: str) -> tuple[TaskBody, int]:
        """Read and validate a task body; also return the uid whose request it is (runas)."""
        from taskq.spool.runas import requester

        data, owner = fsutil.read_spool_file_owned(path, MAX_BODY)
        body = TaskBody.from_json(data)
        return body, requester(body, owner)

    # -- lookup ---------------------------------------------------------

    def buckets(self) -> list[str]:
        """The pending buckets, oldest first (other names are ignored here)."""
        return [b for b in fsutil.listdir(self.pending) if valid_bucket(b)]

    def readable_entries(self, directory: str) -> list[str]:
        """List a bucket or a done/ day; one that cannot be read is skipped, with a warning.

        In a shared spool a member may make a bucket private, or a link to a
        directory others cannot read: that must not break everyone's lookups.
        (The directories of the layout are not skipped: a spool one cannot
        read is an error.)
        """
        try:
            if os.path.islink(directory):
                raise OSError(errno.ELOOP, "a symbolic link, never followed")
            return fsutil.listdir(directory)
        except OSError as e:
            if directory not in self._warned:
                self._warned.add(directory)
                self.warn(f"skipped {os.path.relpath(directory, self.root)}: {e.strerror}")
            return []

    def iter_state(self, state: State) -> Iterator[Located]:
        """Yield the tasks in one state; names that do not parse are skipped."""
        if state == State.PENDING:
            for bucket in self.buckets():
                yield from self._iter_flat(state, self.bucket_dir(bucket), skip=True)
        elif state in PHASE_OF:
            yield from self._iter_claimed(state)
        elif state == State.DONE:
            for day in fsutil.listdir(self.done):
                yield from self._iter_flat(state, os.path.join(self.done, day), skip=True)
        else:
            yield from self._iter_flat(state, getattr(self, state))

    def _iter_flat(self, state: State, directory: str, skip: bool = False) -> Iterator[Located]:
        for entry in self.readable_entries(directory) if skip else fsutil.listdir(directory):
            if stray(entry):
                continue
            try:
                name = TaskName.parse(entry)
            except ValueError:
                continue
            yield Located(state, os.path.join(directory, entry), name)

    def _iter_claimed(self, state: State) -> Iterator[Located]:
        phase = PHASE_OF[state]
        for entry in fsutil.listdir(self.claimed):
            try:
                claim = ClaimName.parse(entry)
            except ValueError:
                continue
            if claim.phase == phase:
                yield Located(state, os.path.join(self.claimed, entry), claim.task, claim)

    def iter_all(self) -> Iterator[Located]:
        """Yield every task in every state."""
        for state in STATES:
            yield from self.iter_state(state)

    def scan(self, ids: set[str]) -> dict[str, Located]:
        """Find tasks by listing every state; those that are nowhere are left out.

        A task may move while we look; searching the states in the order
        tasks move through them, then once more, finds it unless it is
        moving back and forth faster than we list.
        """
        found: dict[str, Located] = {}
        for _ in range(2):
            for state in STATES:
                for located in self.iter_state(state):
                    if located.name.id in ids and located.name.id not in found:
                        found[located.name.id] = located
                        if len(found) == len(ids):
                            return found
        return found

    # -- quarantine -----------------------------------------------------

    def _rename_aside(self, path: str, dest: str) -> None:
        """Rename path to dest through its directory as it is now, never through a link.

        A member could swap a bucket for a link between our look and this
        rename, to have root move a file of his choosing out of another
        directory. (The spool directory itself may be a link.)
        """
        parent = os.path.dirname(path)
        if parent == self.root:
            fsutil.rename_cas(path, dest)
            return
        fd = fsutil.open_dir(parent)
        try:
            fsutil.rename_cas(os.path.basename(path), dest, src_dir_fd=fd)
        finally:
            os.close(fd)

    def quarantine(self, path: str, reason: str, now: int) -> str | None:
        """Move a bad file to corrupt/ with a .reason file beside it.

        Returns the new path, or None when the file was already gone (another
        process moved it first).
        """
        base = f"{format_compact(now)}_{os.path.basename(path)}"[:200]
        for n in range(100):
            dest = os.path.join(self.corrupt, base if n == 0 else f"{base}.{n}")
            if os.path.lexists(dest):
                continue  # (renameat2 refuses a clash too, where it can)
            try:
                self._rename_aside(path, dest)
            except FileExistsError:
                continue
            except (FileNotFoundError, CorruptFile):
                return None  # gone; or its bucket is a link now, set aside on its own
            crash_point("daemon.quarantined")
            # One line, whatever the name held: escape newlines and the like.
            line = f"{os.path.relpath(path, self.root)}: {reason}"
            line = line.encode("unicode_escape", "backslashreplace").decode("ascii")
            fsutil.write_new(dest + ".reason", f"{line}\n".encode(), sync=False)
            fsutil.fsync_dir(self.corrupt)
            return dest
        raise CorruptFile(f"cannot quarantine {path}: too many clashing names")
