"""Filesystem primitives: durable create, compare-and-swap rename, fsync, safe open.

Everything that makes a spool transition atomic or durable lives here, so the
rest of taskq reads as a state machine. Paths are str; errors are OSError
except where a spool file is judged corrupt (CorruptFile).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Callable
from typing import Any

from taskq.errors import CorruptFile, NoPermission, TaskqError, TempFail

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
TEMPORARY_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EAGAIN, errno.EIO, errno.EBUSY}


@functools.cache
def _libc(name: str) -> Any:
    """A libc function through ctypes, or None; ctypes is loaded here, off submit's path."""
    import ctypes  # off submit's start-up (its budget: tests/e2e/test_submit.py)

    return getattr(ctypes.CDLL(None, use_errno=True), name, None)


def _errno() -> int:
    import ctypes  # as in _libc

    return ctypes.get_errno()


def rename_cas(
    src: str,
    dst: str,
    unique: bool = False,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
) -> None:
    """Move src to dst: a compare-and-swap on the source name, on any filesystem.

    FileNotFoundError means src is gone: someone else moved it first, which
    is how a lost race shows itself in the spool's transitions. Exactly one
    of several actors renaming one source wins, on every POSIX filesystem,
    NFS and FUSE included, because rename() itself is atomic there. The
    destination is guarded against clobbering by renameat2(RENAME_NOREPLACE)
    where the kernel and filesystem offer it; where they refuse it (NFS, most
    FUSE filesystems: EINVAL), a plain rename() is used, and taskq relies on
    destination names that no other file can have (task ids are unique, and
    a claim's name carries its daemon, phase and lease). Never link()+unlink():
    two actors can both link one source to two names, and both "win".

    unique=True says dst is a name only this caller can produce (a claim
    name with our daemon's name and lease in it). Then a FileNotFoundError with dst
    present and src gone is our own rename answered twice (an NFS client
    retransmitting it after a lost reply), and counts as a win.

    With src_dir_fd or dst_dir_fd, that name is relative to an open
    directory (see open_dir): a directory a spool member may replace with a
    symbolic link between our look and our rename is opened once, without
    following links, and the rename happens in what was opened.
    """
    try:
        _rename(src, dst, src_dir_fd, dst_dir_fd)
    except FileNotFoundError:
        if unique and _lexists(dst, dst_dir_fd) and not _lexists(src, src_dir_fd):
            return
        raise


def rename_fresh(src: str, dst: str) -> None:
    """Move a file of our own to a name that only we can have made: plain rename(2).

    For publishing a new task: its name holds an id drawn now, so nothing
    can stand at dst but a forgery of that id, and replacing a forgery with
    the real task is right. No RENAME_NOREPLACE: its ctypes stays off
    submit's path (tests/e2e/test_submit.py's import budget). FileNotFoundError:
    src is gone.
    """
    os.rename(src, dst)


def _lexists(path: str, dir_fd: int | None) -> bool:
    try:
        os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _rename(src: str, dst: str, src_dir_fd: int | None, dst_dir_fd: int | None) -> None:
    renameat2 = _libc("renameat2")
    if renameat2 is not None:
        rc = renameat2(
            _AT_FDCWD if src_dir_fd is None else src_dir_fd,
            os.fsencode(src),
            _AT_FDCWD if dst_dir_fd is None else dst_dir_fd,
            os.fsencode(dst),
            _RENAME_NOREPLACE,
        )
        if rc == 0:
            return
        err = _errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), src, None, dst)
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def open_dir(path: str) -> int:
    """Open a spool directory, never through a symbolic link in its last component.

    CorruptFile says the name is a link or not a directory (a spool member
    made it so); FileNotFoundError, that it is gone.
    """
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    if stat.S_ISLNK(os.lstat(path).st_mode):  # (O_DIRECTORY makes a link ENOTDIR)
        raise CorruptFile("is a symbolic link")
    raise CorruptFile("is not a directory")


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(path: str) -> None:
    """Make the entries of a directory (creations, renames) durable.

    A directory that is gone (an emptied bucket a daemon removed right
    after our rename) has nothing left to keep but its removal, which is an
    entry of its parent: the parent is synced instead. A command must not
    report failure for a change it made because of that race.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        fd = os.open(os.path.dirname(path.rstrip("/")), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def syncfs(path: str) -> None:
    """Flush the whole filesystem holding path: one call commits a batch."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        syncfs_fd(fd, path)
    finally:
        os.close(fd)


def syncfs_fd(fd: int, what: str) -> None:
    """Flush the whole filesystem that holds an open file: its data and every entry made.

    For a file in a directory that one may write but not read (a shared
    spool's drop/), which cannot be opened to fsync its entries.
    """
    sync = _libc("syncfs")
    if sync is None:
        os.sync()
        return
    if sync(fd) != 0:
        err = _errno()
        raise OSError(err, os.strerror(err), what)


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_new(
    path: str,
    data: bytes,
    mode: int = 0o600,
    sync: bool = True,
    owner: int | None = None,
    group: int | None = None,
    exact_mode: bool = False,
    dir_fd: int | None = None,
) -> None:
    """Create path exclusively, write data and (by default) fsync it.

    Its mode is `mode` less the umask, or exactly `mode` with exact_mode.
    An owner or group given is set on the new file's descriptor before it
    holds anything (a root daemon's file for one member to read). With
    dir_fd, path is relative to that open directory (a batch's tmp/).
    """
    fd = os.open(path, _NEW, mode, dir_fd=dir_fd)
    try:
        if owner is not None or group is not None:
            os.fchown(fd, -1 if owner is None else owner, -1 if group is None else group)
            os.fchmod(fd, mode)  # (chown drops setgid and the like; mode is what was asked)
        elif exact_mode:
            os.fchmod(fd, mode)
        written = os.write(fd, data)  # all of it, but for a signal or a full disk
        if written < len(data):
            _write_rest(fd, data, written)
        if sync:
            os.fsync(fd)
    except BaseException:
        _discard(fd, path, dir_fd)
        raise
    os.close(fd)


def _write_rest(fd: int, data: bytes, written: int) -> None:
    """Write what one write() left of data (a signal, or the disk filling)."""
    view = memoryview(data)[written:]
    while view:
        view = view[os.write(fd, view) :]


def _discard(fd: int, path: str, dir_fd: int | None) -> None:
    """Close and remove a new file whose writing failed (its error is the one to report)."""
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path, dir_fd=dir_fd)


def write_all_new(dir_fd: int, files: list[tuple[str, bytes]], mode: int = 0o600) -> None:
    """write_new of each (name, data) in the directory open as dir_fd, unsynced: a batch's bodies.

    One loop of three calls a file (create, write, close) with nothing
    around them, for the thousands of a batch, whose one syncfs makes them
    durable. A file that cannot be written whole is removed, and the error
    raised; the files written before it are the caller's to remove.
    """
    for name, data in files:
        fd = os.open(name, _NEW, mode, dir_fd=dir_fd)
        try:
            written = os.write(fd, data)  # all of it, but for a signal or a full disk
            if written < len(data):
                _write_rest(fd, data, written)
        except BaseException:
            _discard(fd, name, dir_fd)
            raise
        os.close(fd)


def replace_file(
    path: str,
    data: bytes,
    *,
    sync: bool = True,
    staging: str | None = None,
    mode: int = 0o600,
    umask: bool = False,
    owner: int | None = None,
    check: Callable[[str], None] | None = None,
) -> None:
    """Replace path whole with data: write it under a staging name, then rename it over path.

    A reader sees the old file or the new one, never part of either. The
    staging name is unique beside path (a dot-name with the pid and random
    bits: hosts may share the directory) unless `staging` names one, which
    a killed predecessor may have left behind. With sync the data is
    fsynced before the rename; the directory is the caller's to sync, once
    for all it replaced. The file gets exactly `mode`, or `mode` less the
    umask with umask=True; an owner given owns it (a root daemon's file for
    one member to read). `check`, if given, is called with the staging name
    right before the rename, and what it raises stops the replacement (the
    staged file is removed): the last look of a file the daemon writes where
    an operator says (--pidfile, --metrics-file), which must never replace
    a device, FIFO or link put there since the option was checked.
    """
    if staging is None:
        base = os.path.basename(path)
        staging = f"{os.path.dirname(path) or '.'}/.{base}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
    write_new(staging, data, mode, sync, owner=owner, exact_mode=not umask)
    try:
        if check is not None:
            check(staging)
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise


def read_spool_file(path: str, limit: int) -> bytes:
    """Read a spool file, refusing symlinks, hard-linked and oversized files."""
    return read_spool_file_owned(path, limit)[0]


def read_spool_file_owned(path: str, limit: int) -> tuple[bytes, int]:
    """Read a spool file as read_spool_file does; also return its owner's uid."""
    data, st = read_small(path, limit)
    if st.st_nlink != 1:
        raise CorruptFile(f"has {st.st_nlink} hard links")
    if st.st_mode & 0o022:
        # Someone else could have rewritten the request: never run it.
        raise CorruptFile(f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")
    return data, st.st_uid


def ensure_dir(path: str, mode: int = 0o700, parent_mode: int | None = None) -> bool:
    """Create a directory if missing; return True if this call created it.

    In a shared spool (directories open to a group and closed to others,
    like atd's 1770 spool) a new directory takes its parent's mode, setgid
    and sticky bits included, so that the group can use (or read) it as it
    can its parent, and no member can remove another's files. parent_mode:
    the parent's (stat's st_mode), if the caller has it (a batch making a
    bucket a minute).
    """
    for _ in range(100):
        try:
            os.mkdir(path, mode)
            break
        except FileExistsError:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # removed meanwhile (a daemon removes emptied buckets): make it
            if not stat.S_ISDIR(st.st_mode):
                raise CorruptFile(f"{path} exists and is not a directory") from None
            return False
    else:
        raise OSError(f"{path} keeps vanishing")
    if parent_mode is None:
        parent_mode = os.stat(os.path.dirname(path)).st_mode
    parent = stat.S_IMODE(parent_mode)
    if parent & 0o070 and not parent & 0o007:
        # A shared spool's directory: open to its group, closed to others
        # (/tmp is open to others, and a new spool made in it stays private).
        os.chmod(path, parent)  # mkdir's mode is cut by the umask; this is not
    return True


def listdir(path: str, follow: bool = False) -> list[str]:
    """List a directory, sorted; a missing one (or a file in its place) is empty.

    A symbolic link in the last component is not followed (it lists as
    empty) unless follow=True: a member of a shared spool must not point a
    daemon's listing at a directory of his choosing.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        if e.errno == errno.ELOOP:
            return []
        raise
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISSOCK, "a socket"),
)


def kind(mode: int) -> str:
    """What a file of this st_mode is, for a message: "a FIFO", "a regular file"..."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def not_regular(path: str) -> str | None:
    """What stands at path when it is not a regular file ("a FIFO"...); None if one, or nothing.

    A symbolic link counts as what it is, a link: the daemon's own files
    (pidfile, log, metrics) are never written through one.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    return None if stat.S_ISREG(mode) else kind(mode)


class NotRegularFile(OSError):
    """A device, FIFO, socket, directory or link where taskq writes a file of its own."""


def must_be_regular(path: str) -> None:
    """NotRegularFile unless path is a regular file or nothing (a link counts as a link)."""
    found = not_regular(path)
    if found is not None:
        raise NotRegularFile(errno.EINVAL, f"{found}, not a regular file", path)


def open_append(path: str, mode: int = 0o644) -> int:
    """Open a regular file to append to, creating it: never through a link, never blocking.

    O_NONBLOCK keeps a FIFO with no reader from stopping the daemon in
    open() (where SIGTERM's handler can only set a flag); anything but a
    regular file is NotRegularFile, and nothing was written to it.
    """
    must_be_regular(path)  # before open(): opening a device can do things (a tape rewinds)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        found = not_regular(path) if e.errno in (errno.ELOOP, errno.ENXIO) else None
        if found is None:
            raise
        raise NotRegularFile(errno.EINVAL, f"{found}, not a regular file", path) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, f"{kind(st.st_mode)}, not a regular file", path)
    return fd


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """A descriptor of a regular file at path and its status: never blocks, never follows.

    A FIFO, a device or a symbolic link there is CorruptFile (an open() of a
    FIFO without O_NONBLOCK would block for good).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CorruptFile("is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CorruptFile("not a regular file")
    return fd, st


def read_small(path: str, limit: int) -> tuple[bytes, os.stat_result]:
    """Read a small spool file that anyone may have planted: never block, never follow.

    A FIFO, a device or a symbolic link in its place is CorruptFile (an
    open() of a FIFO would block for good); so is a file over limit bytes.
    Returns the contents and the file's status (owner, mode).
    """
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            raise CorruptFile(f"too large ({st.st_size} bytes, limit {limit})")
        # A buffer of the file's size, not of the limit: os.read allocates what
        # it is asked for, and 4 MiB for a 2 KiB body was most of a body's read.
        want = st.st_size + 1
        data = os.read(fd, want)
        if len(data) == want:  # it grew since fstat: read on, up to the limit
            data += os.read(fd, limit + 1 - len(data))
        return data, st
    finally:
        os.close(fd)


def read_tail(path: str, limit: int) -> bytes:
    """The last `limit` bytes of a regular file (all of a smaller one): never block, never follow.

    For files that grow (journals, attempts' output): a FIFO, a device or
    a link in their place is CorruptFile, as in read_small.
    """
    fd, st = _open_regular(path)
    try:
        return os.pread(fd, limit, max(0, st.st_size - limit))
    finally:
        os.close(fd)


def as_taskq_error(e: OSError, what: str) -> TaskqError:
    """Classify an OSError: transient (exit 75), permission, or plain failure."""
    reason = e.strerror or str(e)
    if e.errno in TEMPORARY_ERRNOS:
        return TempFail(f"{what}: {reason}")
    if e.errno in (errno.EACCES, errno.EPERM):
        return NoPermission(f"{what}: {reason}")
    return TaskqError(f"{what}: {reason}")
