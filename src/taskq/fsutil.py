"""Filesystem primitives: durable create, compare-and-swap rename, fsync, safe open.

Everything that makes a spool transition atomic or durable lives here, so the
rest of taskq reads as a state machine. Paths are str; errors are OSError
except where a spool file is judged corrupt (CorruptFile).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat

from taskq.errors import CorruptFile, NoPermission, TaskqError, TempFail

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
_syncfs = getattr(_libc, "syncfs", None)
TEMPORARY_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EAGAIN, errno.EIO, errno.EBUSY}


def rename_cas(src: str, dst: str, unique: bool = False) -> None:
    """Move src to dst: a compare-and-swap on the source name, on any filesystem.

    FileNotFoundError means src is gone: someone else moved it first, which
    is how a lost race shows itself in the spool's transitions. Exactly one
    of several actors renaming one source wins, on every POSIX filesystem,
    NFS and FUSE included, because rename() itself is atomic there. The
    destination is guarded against clobbering by renameat2(RENAME_NOREPLACE)
    where the kernel and filesystem offer it; where they refuse it (NFS, most
    FUSE filesystems: EINVAL), a plain rename() is used, and taskq relies on
    destination names that no other file can have (task ids are unique, and
    a claim's name carries its owner, phase and lease). Never link()+unlink():
    two actors can both link one source to two names, and both "win".

    unique=True says dst is a name only this caller can produce (a claim
    name with our owner and lease in it). Then a FileNotFoundError with dst
    present and src gone is our own rename answered twice (an NFS client
    retransmitting it after a lost reply), and counts as a win.
    """
    try:
        _rename(src, dst)
    except FileNotFoundError:
        if unique and os.path.lexists(dst) and not os.path.lexists(src):
            return
        raise


def _rename(src: str, dst: str) -> None:
    if _renameat2 is not None:
        rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), src, None, dst)
    os.rename(src, dst)


def fsync_dir(path: str) -> None:
    """Make the entries of a directory (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def syncfs(path: str) -> None:
    """Flush the whole filesystem holding path: one call commits a batch."""
    if _syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


def write_new(path: str, data: bytes, mode: int = 0o600, sync: bool = True) -> None:
    """Create path exclusively, write data and (by default) fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):  # the write's error is the one to report
            os.unlink(path)
        raise
    os.close(fd)


def read_spool_file(path: str, limit: int) -> bytes:
    """Read a spool file, refusing symlinks, hard-linked and oversized files."""
    return read_spool_file_owned(path, limit)[0]


def read_spool_file_owned(path: str, limit: int) -> tuple[bytes, int]:
    """Read a spool file as read_spool_file does; also return its owner's uid."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CorruptFile("is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptFile("not a regular file")
        if st.st_nlink != 1:
            raise CorruptFile(f"has {st.st_nlink} hard links")
        if st.st_mode & 0o022:
            # Someone else could have rewritten the request: never run it.
            raise CorruptFile(f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")
        if st.st_size > limit:
            raise CorruptFile(f"too large ({st.st_size} bytes, limit {limit})")
        return os.read(fd, limit + 1), st.st_uid
    finally:
        os.close(fd)


def ensure_dir(path: str, mode: int = 0o700) -> bool:
    """Create a directory if missing; return True if this call created it.

    In a shared spool (directories open to a group and closed to others,
    like atd's 1770 spool) a new directory takes its parent's mode, setgid
    and sticky bits included, so that the group can use (or read) it as it
    can its parent, and no member can remove another's files.
    """
    for _ in range(100):
        try:
            os.mkdir(path, mode)
            break
        except FileExistsError:
            if os.path.isdir(path) and not os.path.islink(path):
                return False
            if os.path.lexists(path):
                raise CorruptFile(f"{path} exists and is not a directory") from None
            # Gone between mkdir and the look: a daemon removed an empty
            # bucket meanwhile (found under load by test_many_daemons).
    else:
        raise OSError(f"{path} keeps vanishing")
    parent = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
    if parent & 0o070 and not parent & 0o007:
        # A shared spool's directory: open to its group, closed to others
        # (/tmp is open to others, and a new spool made in it stays private).
        os.chmod(path, parent)  # mkdir's mode is cut by the umask; this is not
    return True


def listdir(path: str) -> list[str]:
    """List a directory, sorted; a missing one (or a file in its place) is empty."""
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def as_taskq_error(e: OSError, what: str) -> TaskqError:
    """Classify an OSError: transient (exit 75), permission, or plain failure."""
    reason = e.strerror or str(e)
    if e.errno in TEMPORARY_ERRNOS:
        return TempFail(f"{what}: {reason}")
    if e.errno in (errno.EACCES, errno.EPERM):
        return NoPermission(f"{what}: {reason}")
    return TaskqError(f"{what}: {reason}")
