"""The spool's layout: every path taskq reads or writes, and the protocol they keep.

    SPOOL/
      config.toml                  the operator's, optional: limits, users, the hook
      doorbell                     touched after each change; daemons watch it
      priorities                   made once a task asks for a --priority: due tasks' are read
      tmp/ID.task                  a submission being written
      tmp/permit-RANDOM/LEASE      a permit being taken, or given back (permits.py)
      waiting/NAME                 accepted; waits for the tasks it names (--after)
      deps/ID/NAME                 ... NAME waits for task ID,
      deps/ID/ended.STATE          ... which has ended so
      paused/QUEUE                 a paused queue
      pending/YYYYMMDDHHMM/NAME    accepted; due in that UTC minute
      claimed/NAME_PHASE_EXPIRY_PID_HOST   a daemon's, under a lease
      done/YYYYMMDD/NAME           succeeded, by the UTC day it ended
      failed/NAME  cancelled/NAME  ended otherwise
      corrupt/STAMP_ORIGINAL       set aside, with STAMP_ORIGINAL.reason
      logs/ID/journal              the task's history, JSON lines
      logs/ID/N.out  N.status      attempt N's output, and its exit status
      logs/ID/owner                the uid the id belongs to
      keys/UID-HASH                an idempotency key: the NAME it bound
      ids/XY/ID                    a hint: a symlink to RUN_AT_ATTEMPT_QUEUE
      ids/+MS/FIRST.COUNT.WIDTH    a batch's hints: a record for each id from FIRST
      run/HOST_PID.lock .probe .status   a daemon's lock, clock probe, health
      run/counts.tsv               taskq stats' cache of counts
      schedules/NAME/schedule.json state.json journal
      permits/KIND_NAME_I/LEASE    a cluster-wide limit's permit, held (permits.py)
      permits/wait_MUTEX_NAME      ... a task waiting for that mutex
      drop/ID.task  drop/RID.KIND  a shared spool's member's submission or request (drop.py)
      pickup/DROPNAME_EXPIRY_PID_HOST   ... taken by one daemon, being filed or carried out
      replies/DROPNAME             ... its answer, for the member to read

NAME is RUN_AT_ID_ATTEMPT_QUEUE (task.py). The rules:

- The directory is the state, the name is the index, the body is the request.
- A file is written where nothing reads it (tmp/, a dot-name), fsynced, then
  renamed into place; a file in place is never modified.
- Every transition is one rename of an exact name (transitions.py); a source
  that is gone (ENOENT) is a race lost to another process, never an error.
- A task's id is in the name of one file only, so no rename clobbers a task.
- Names beginning with '.' are never tasks (stray).
- Directories are 0700 and files 0600; in a shared spool a new directory
  takes its parent's group mode (fsutil.ensure_dir).

This module owns those paths: the Spool's directories and methods, and
the functions below for the files in a log directory and in run/.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from taskq.errors import CorruptFile
from taskq.spool import fsutil
from taskq.spool.faults import crash_point
from taskq.spool.task import MAX_BODY, ClaimName, TaskBody, TaskName, check_id
from taskq.times.timespec import format_compact

if TYPE_CHECKING:
    from taskq.spool.states import State  # (a type here: its enum is not made at start-up)

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
RANKED = "priorities"  # a due task's --priority is read once this file exists
CONFIG = "config.toml"
BODY_SUFFIX = ".task"  # tmp/ID.task
MARK = "ended."  # deps/ID/ended.STATE
JOURNAL = "journal"
OWNER = "owner"
SCHEDULE_FILE = "schedule.json"
CURSOR_FILE = "state.json"
COUNTS_CACHE = "counts.tsv"
LOCK, PROBE, RECORD = ".lock", ".probe", ".status"  # run/HOST_PID.*
DAEMON_FILES = (LOCK, RECORD, PROBE)
# run/HOST_PID.handling and run/HOST.suspects: the poison guard's (daemon/poison.py),
# read by the next daemon of the host, so never among a dead daemon's DAEMON_FILES.
HANDLING, SUSPECTS = ".handling", ".suspects"


def journal_path(log_dir: str) -> str:
    """logs/ID/journal (or a schedule's schedules/NAME/journal)."""
    return f"{log_dir}/{JOURNAL}"


def owner_path(log_dir: str) -> str:
    return f"{log_dir}/{OWNER}"


def out_path(log_dir: str, attempt: int) -> str:
    return f"{log_dir}/{attempt}.out"


def status_path(log_dir: str, attempt: int) -> str:
    return f"{log_dir}/{attempt}.status"


def output_attempt(entry: str) -> int | None:
    """The attempt whose output an entry of a log directory is (N.out), or None."""
    number, _, suffix = entry.partition(".")
    return int(number) if suffix == "out" and number.isascii() and number.isdigit() else None


def body_id(entry: str) -> str | None:
    """The id of a submission an entry of tmp/ holds (ID.task), or None."""
    return entry[: -len(BODY_SUFFIX)] if entry.endswith(BODY_SUFFIX) else None


def marker_path(dep_dir: str, state: str) -> str:
    return f"{dep_dir}/{MARK}{state}"


def daemon_file(run_dir: str, daemon: str, kind: str) -> str:
    """run/HOST_PID.lock, .probe or .status (kind: LOCK, PROBE, RECORD)."""
    return f"{run_dir}/{daemon}{kind}"


def reason_path(quarantined: str) -> str:
    """The .reason file beside a file set aside in corrupt/."""
    return f"{quarantined}.reason"


def _notice(message: str) -> None:
    from taskq.spool.notice import notice  # only when there is something to say

    notice(message)


def stray(entry: str) -> bool:
    """Whether a name in the spool is someone else's business, never a task.

    Dot-names: an NFS client's silly-renamed files (.nfsXXXX, left while an
    unlinked file is still open), a FUSE filesystem's .fuse_hiddenXXXX, an
    editor's or a copy tool's temporaries. taskq never writes such names
    outside tmp/ and run/, so they are ignored: never run, never quarantined.
    """
    return entry.startswith(".")


# What handles one spool file for the daemon, as a context (its poison guard,
# daemon/poison.py), given the kind, key, path and step: a file whose handling
# raises is quarantined there. The spool's own code runs without one.
Handling = Callable[[str, str, str, str], AbstractContextManager[object]]


def unguarded(kind: str, key: str, path: str, step: str) -> AbstractContextManager[object]:
    return nullcontext()


class Located:
    """A task found in the spool: its state, file path and parsed name (and claim, if claimed).

    Written out, neither a dataclass nor a NamedTuple: both compile their
    methods as the class is made, and every `taskq submit` imports this
    module (spool/record.py).
    """

    __slots__ = ("claim", "name", "path", "state")
    state: State
    path: str
    name: TaskName
    claim: ClaimName | None

    def __init__(
        self, state: State, path: str, name: TaskName, claim: ClaimName | None = None
    ) -> None:
        put = object.__setattr__
        put(self, "state", state)
        put(self, "path", path)
        put(self, "name", name)
        put(self, "claim", claim)

    def _key(self) -> tuple[State, str, TaskName, ClaimName | None]:
        return (self.state, self.path, self.name, self.claim)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Located is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Located is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Located):
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        state, path, name, claim = self._key()
        return f"Located(state={state!r}, path={path!r}, name={name!r}, claim={claim!r})"


class Spool:
    """A spool directory: the durable record of every task."""

    def __init__(self, root: str) -> None:
        # A spool given as a symlink (/var/spool/taskq -> /srv/taskq) is
        # resolved once, so every command and check sees the same directory.
        self.root = os.path.realpath(root)
        # Told once about each directory a lookup skips (see readable_entries); the
        # CLI prints it, a daemon logs it.
        self.warn: Callable[[str], None] = _notice
        self._warned: set[str] = set()
        for sub in (*SUBDIRS, *DROP_DIRS):
            setattr(self, sub, os.path.join(self.root, sub))
        self.doorbell = os.path.join(self.root, DOORBELL)
        # Exists once a task with a --priority was submitted: daemons then read
        # the priority of due tasks (otherwise their names say all they need).
        self.ranked = os.path.join(self.root, RANKED)
        self.config = os.path.join(self.root, CONFIG)

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
        if _whole(self):
            return
        os.makedirs(os.path.dirname(self.root), exist_ok=True)
        created = fsutil.ensure_dir(self.root, 0o700)
        for sub in SUBDIRS:
            fsutil.ensure_dir(os.path.join(self.root, sub), 0o700)
        if not os.path.exists(self.doorbell):
            self._create_doorbell()
        if created:
            fsutil.fsync_dir(self.root)
            fsutil.fsync_dir(os.path.dirname(self.root))

    # Paths are joined with f-strings, not os.path.join: a batch names each
    # task's paths several times (python bench/run.py --only submit).

    def bucket_dir(self, bucket: str) -> str:
        return f"{self.pending}/{bucket}"

    def pending_path(self, name: TaskName) -> str:
        return f"{self.pending}/{name.bucket}/{name}"

    def waiting_path(self, name: TaskName) -> str:
        return f"{self.waiting}/{name}"

    def claim_path(self, claim: ClaimName) -> str:
        return f"{self.claimed}/{claim}"

    def done_dir(self, day: str) -> str:
        return f"{self.done}/{day}"

    def tmp_body(self, task_id: str) -> str:
        """tmp/ID.task: a submission's body until it is published."""
        return f"{self.tmp}/{task_id}{BODY_SUFFIX}"

    @staticmethod
    def tmp_entry(task_id: str) -> str:
        """ID.task: tmp_body's name within tmp/ (a batch writes through tmp/'s descriptor)."""
        return f"{task_id}{BODY_SUFFIX}"

    def log_dir(self, task_id: str) -> str:
        return f"{self.logs}/{_checked_id(task_id)}"

    def dep_dir(self, task_id: str) -> str:
        """deps/ID: what waits for task ID, and how it ended."""
        return f"{self.deps}/{check_id(task_id)}"

    def hint_dir(self, task_id: str) -> str:
        """ids/XY: the id's last two characters, random, spread ids over 1,024 directories."""
        return f"{self.ids}/{task_id[-2:]}"

    def batch_hint_dir(self, task_id: str) -> str:
        """ids/+MS: the hint files of the batches whose ids begin with task_id's milliseconds."""
        return f"{self.ids}/+{task_id[:10]}"

    def hint_path(self, task_id: str) -> str:
        return f"{self.hint_dir(task_id)}/{task_id}"

    def pause_path(self, queue: str) -> str:
        return f"{self.paused}/{queue}"

    def key_path(self, entry: str) -> str:
        """keys/ENTRY (keys.py makes the entry: UID-HASH)."""
        return f"{self.keys}/{entry}"

    def schedule_dir(self, name: str) -> str:
        return f"{self.schedules}/{name}"

    def permit_path(self, entry: str) -> str:
        """permits/ENTRY: a permit (a directory holding its lease) or a mutex's ticket."""
        return f"{self.permits}/{entry}"

    def drop_path(self, entry: str) -> str:
        return f"{self.drop}/{entry}"

    def pickup_path(self, entry: str) -> str:
        return f"{self.pickup}/{entry}"

    def reply_path(self, entry: str) -> str:
        return f"{self.replies}/{entry}"

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
        from taskq.spool.runas import requester  # a reader's only: off submit's start-up

        data, owner = fsutil.read_spool_file_owned(path, MAX_BODY)
        body = TaskBody.from_json(data)
        return body, requester(body, owner)

    # -- lookup ---------------------------------------------------------

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
        from taskq.text.quote import quote  # (submit's start-up need not import it)

        # The name it had, quoted: corrupt/ shows what was refused, never a
        # newline or an escape sequence; cut to fit NAME_MAX with a suffix.
        named = f"{format_compact(now)}_{quote(os.path.basename(path))}"
        base = named.encode()[:200].decode(errors="ignore")
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
            # One line, whatever the name or the reason held.
            line = quote(f"{os.path.relpath(path, self.root)}: {reason}")
            # Written whole: a reader of corrupt/ never sees it empty. Staged in
            # tmp/, whose leftovers are cleaned, not in corrupt/, which is listed.
            staging = f"{self.tmp}/.reason.{os.getpid()}.{os.urandom(4).hex()}"
            fsutil.replace_file(
                reason_path(dest), f"{line}\n".encode(), sync=False, staging=staging
            )
            fsutil.fsync_dir(self.corrupt)
            return dest
        raise CorruptFile(f"cannot quarantine {path}: too many clashing names")


def _whole(spool: Spool) -> bool:
    """Whether a spool's layout is all there: its directories, none a link, and the doorbell.

    Every submit asks, so it costs one listing of the root (its entries'
    types come with the names), not a mkdir and a stat for each
    directory. Anything else (no root, a directory missing or a link,
    the doorbell not a file) is init's to make, or to refuse.
    """
    try:
        with os.scandir(spool.root) as entries:
            kinds = {e.name: e.is_dir(follow_symlinks=False) for e in entries}
    except OSError:
        return False
    if not all(kinds.get(sub) for sub in SUBDIRS) or kinds.get(DOORBELL) is not False:
        return False
    return os.path.isfile(spool.doorbell)  # (a link to a file will do, as for init)
