"""The ids/ hints: where each task was put last, so that a lookup by id need not list the spool.

ids/XY/ID (XY: the id's last two characters, random bits that spread ids
evenly over at most 1,024 directories) is a symbolic link whose target is
the name of the file where the task was put last by a submit, an
operator's reschedule or retry, or a lookup that had to search, with the id
left out: RUN_AT_ATTEMPT_QUEUE. It is only ever a hint, and never
followed: byid.py reads it and probes where that name can be now.

So a hint costs a submit one symlink() (kept in the link's inode: no data
block) and no fsync (a batch's last syncfs makes it durable for free),
costs the daemon nothing, and cannot make a lookup wrong: a stale or
missing hint only makes it slower. `taskq fsck` rebuilds every hint from
the spool alone.

A batch writes one file for each run of its ids in a row instead (ids
drawn one after another, in one millisecond: a batch's own):
ids/+MS/FIRST.COUNT.WIDTH, where MS is the ids' first ten characters (their
milliseconds), FIRST the run's first id, and the file holds COUNT records
of WIDTH bytes, the Nth for the id FIRST + N: its target text as above,
padded with spaces and ended by a newline (all spaces: no hint of that
id, whose link, if any, says). A lookup reads an id's link, and only
without one its batch's record (one pread at N * WIDTH), so a hint written
later (a reschedule's, a lookup's) wins over the batch's. One file write
instead of a symlink() a task is most of what a long batch saves
(python bench/profile_batch.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator

from taskq.errors import TaskqError
from taskq.spool import fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import ClaimName, TaskName, decode_id, decode_ids, encode_id
from taskq.text.lazyre import Lazy
from taskq.times.timespec import format_compact

MIN_RUN = 16  # ids in a row that get a batch's file; fewer get a link each
MAX_GAP = 16  # ids left out between two of a run (a keyed line's): blank records
MAX_WIDTH = 128  # a record: a target (under 100 bytes: a queue is at most 64) and its padding
MAX_COUNT = 1 << 24
BATCH_FILE = Lazy(r"([0-9A-HJKMNP-TV-Z]{26})\.([1-9][0-9]{0,7})\.([1-9][0-9]{0,2})")


def point(spool: Spool, task_id: str, path: str) -> None:
    """Make the id's hint name the task file at path; best effort, never synced, never fails."""
    name = name_of(path)
    if name is not None and name.id == task_id:
        point_name(spool, name)


def name_of(path: str) -> TaskName | None:
    """The task name of a task file's path (in claimed/, its claim's task), if it has one."""
    base = os.path.basename(path)
    try:
        return TaskName.parse(base)
    except ValueError:
        try:
            return ClaimName.parse(base).task
        except ValueError:
            return None


def point_name(spool: Spool, name: TaskName) -> None:
    """Make the hint of name.id name the task: best effort, never synced, never fails.

    Its target is the task's name without the id (the link's own name):
    RUN_AT_ATTEMPT_QUEUE, short enough (under 60 bytes for a queue name of
    up to 33 characters and a one-digit attempt) for the filesystem to keep
    it in the link's inode,
    which halves what the link costs to create. A new hint is one
    symlink(); an existing one is replaced by a rename, so a reader sees
    the old target or the new one, never none.
    """
    directory = spool.hint_dir(name.id)
    link = f"{directory}/{name.id}"
    target = f"{format_compact(name.run_at)}_{name.attempt}_{name.queue}"
    with contextlib.suppress(OSError, TaskqError):
        for _ in range(3):
            try:
                os.symlink(target, link)
                return
            except FileExistsError:
                _replace(directory, name.id, target)
                return
            except FileNotFoundError:
                try:
                    fsutil.ensure_dir(directory)
                except FileNotFoundError:  # ids/ itself is gone: made, then the directory
                    fsutil.ensure_dir(spool.ids)


def point_names(spool: Spool, names: list[TaskName]) -> None:
    """point_name for each of a batch's new tasks: best effort, never synced, never fails.

    The common case, a new link in a directory that exists, costs one
    symlink(); the target is cut from the name's text (RUN_AT_ID_ATTEMPT_QUEUE),
    which the batch formats anyway to publish the task.
    """
    hint_path = spool.hint_path
    for name in names:
        run_at, _, rest = str(name).partition("_")
        target, link = run_at + rest[len(name.id) :], hint_path(name.id)
        try:
            os.symlink(target, link)
        except FileNotFoundError:  # the first hint of its directory: ids/ is there already
            try:
                fsutil.ensure_dir(spool.hint_dir(name.id))
                os.symlink(target, link)
            except (OSError, TaskqError):
                point_name(spool, name)
        except OSError:
            point_name(spool, name)  # an old link to replace


def point_batch(spool: Spool, names: list[TaskName]) -> None:
    """Hints for a batch's new tasks (in id order): a file for each long run of ids, else links.

    Best effort, never synced (the batch's last syncfs makes them durable),
    never fails.
    """
    for run in _runs(names):
        if len(run) < MIN_RUN or not _write_batch(spool, run):
            point_names(spool, [name for _, name in run])


def _runs(names: list[TaskName]) -> list[list[tuple[int, TaskName]]]:
    """names, with their ids' bits, cut where an id is not a little after the one before it
    or has other milliseconds."""
    values = decode_ids([name.id for name in names])
    if values and (values[-1] ^ values[0]) >> 80 == 0 and values == _counted(values):
        return [list(zip(values, names, strict=True))]  # one batch's ids, in a row: one run
    runs: list[list[tuple[int, TaskName]]] = []
    last = -1
    for value, name in zip(values, names, strict=True):
        if runs and 0 < value - last <= MAX_GAP + 1 and (value ^ last) >> 80 == 0:
            runs[-1].append((value, name))
        else:
            runs.append([(value, name)])
        last = value
    return runs


def _counted(values: list[int]) -> list[int]:
    """The values from the first, one after another, as many: a batch's ids in a row, in C."""
    return list(range(values[0], values[0] + len(values)))


def _write_batch(spool: Spool, run: list[tuple[int, TaskName]]) -> bool:
    """Write ids/+MS/FIRST.COUNT.WIDTH for a run; False if it could not be written."""
    first, head = run[0]
    cut = len(head.id)  # (every id is as long)
    targets = []
    for _, name in run:  # the target cut from the name's text, as point_names does
        run_at, _, rest = str(name).partition("_")  # (the text is kept for the name's rename)
        targets.append(run_at + rest[cut:])
    width = max(map(len, targets)) + 1
    count = run[-1][0] - first + 1
    if width > MAX_WIDTH:
        return False
    if len(targets) < count:  # ids left out (keyed lines'): a blank record each
        given = dict(zip([value - first for value, _ in run], targets, strict=True))
        blank = " " * (width - 1)
        targets = [given.get(i, blank) for i in range(count)]
    if min(map(len, targets)) < width - 1:
        targets = [target.ljust(width - 1) for target in targets]
    data = "\n".join(targets) + "\n"
    directory = spool.batch_hint_dir(head.id)
    try:
        fsutil.ensure_dir(spool.ids)
        fsutil.ensure_dir(directory)
        path = f"{directory}/{head.id}.{count}.{width}"
        fsutil.replace_file(path, data.encode(), sync=False, mode=0o644)
    except (OSError, TaskqError):
        return False
    return True


def _replace(directory: str, task_id: str, target: str) -> None:
    staging = os.path.join(directory, f".{task_id}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging)
    os.symlink(target, staging)
    os.replace(staging, os.path.join(directory, task_id))


def forget(spool: Spool, task_id: str) -> None:
    """Remove an id's hint (its task is gone for good); best effort."""
    with contextlib.suppress(OSError):
        os.unlink(spool.hint_path(task_id))


def read_hint(spool: Spool, task_id: str) -> TaskName | None:
    """The task name the hint gives, or None if there is no usable hint.

    A target is RUN_AT_ATTEMPT_QUEUE, or (as hints were first written) a
    path whose last component is the task file's name.
    """
    try:
        entry = os.path.basename(os.readlink(spool.hint_path(task_id)))
    except OSError:
        found = batch_record(spool, task_id)
        if found is None:
            return None
        entry = found
    run_at, sep, rest = entry.partition("_")
    for text in (f"{run_at}_{task_id}_{rest}" if sep else "", entry):
        try:
            name = TaskName.parse(text)
        except ValueError:
            try:
                name = ClaimName.parse(text).task
            except ValueError:
                continue
        return name if name.id == task_id else None
    return None


def batch_record(spool: Spool, task_id: str) -> str | None:
    """The target text a batch's file gives for task_id (the id left out), or None."""
    directory = spool.batch_hint_dir(task_id)
    try:
        entries = os.listdir(directory)
        value = decode_id(task_id)
    except (OSError, ValueError):
        return None
    for entry in entries:
        found = BATCH_FILE.fullmatch(entry)
        if found is None or found.group(1)[:10] != task_id[:10]:
            continue
        index = value - decode_id(found.group(1))
        count, width = int(found.group(2)), int(found.group(3))
        if 0 <= index < min(count, MAX_COUNT) and width <= MAX_WIDTH:
            return _record(f"{directory}/{entry}", index, width)
    return None


def _record(path: str, index: int, width: int) -> str | None:
    """Record index of a batch's file: its text, or None (blank, short, not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # a FIFO or a device planted there is never read
        data = os.pread(fd, width, index * width)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != width or not data.endswith(b"\n") or not data.isascii():
        return None
    return data[:-1].decode().rstrip(" ") or None


def batch_problems(directory: str, taken: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """The files of a batch's hint directory (ids/+MS) that should go, and why (for fsck).

    A file stays while one of its ids is taken (taken(id): a task has it,
    or a submission in flight); dot-names are left alone (stray).
    """
    for entry in fsutil.listdir(directory):
        path = f"{directory}/{entry}"
        found = BATCH_FILE.fullmatch(entry)
        if entry.startswith("."):
            continue
        if found is None or f"+{entry[:10]}" != os.path.basename(directory):
            yield path, "not a batch's hints"
        elif not stat.S_ISREG(os.lstat(path).st_mode):
            yield path, "a batch's hints must be a regular file"
        else:
            first, count = decode_id(found.group(1)), min(int(found.group(2)), MAX_COUNT)
            if not any(taken(encode_id(first + i)) for i in range(count)):
                yield path, "names no task that is left"
