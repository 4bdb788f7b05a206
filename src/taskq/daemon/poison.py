"""The poison-file guard: no file can stop the daemon.

While the daemon handles one file (prepares a claim, starts it, settles
its end, takes a claim over, expires a paused task, materialises a
schedule, resolves a waiting task, takes a member's drop file in),
anything unexpected that escapes is
caught here: that file is quarantined in corrupt/ with the exception named
in its reason, the daemon logs one line, and the loop goes on. A transient
failure of the spool or the host (disk full, I/O error, no memory or no
descriptors left) is no file's fault: it goes on to the loop, which pauses
and retries, and the file is handled again.

A file could also kill the daemon outright, where no except clause runs
(the interpreter's stack overflows, a library crashes, the kernel kills a
daemon that ran out of memory). So before each handling the guard writes
what it handles into the daemon's marker, run/HOST_PID.handling (one slot
per thread, overwritten in place: no file is created on the hot path), and
clears it after. A daemon starting on the same host reads the markers that
dead daemons left: a file a daemon died handling becomes a suspect
(run/HOST.suspects); if a daemon dies handling it again, with no handling
of it completed in between, the next daemon quarantines it before it does
anything else. One death is never enough: a kill -9, a power cut or an OOM
kill that merely happened while a good file was handled must cost that
file nothing, and recovery settles what the dead daemon left half done.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Callable
from types import TracebackType

from taskq.errors import BadInput, CorruptFile, NotFound
from taskq.spool import byid, drop, fields, fsutil
from taskq.spool import rundir as status
from taskq.spool.layout import HANDLING, SUSPECTS, Spool, daemon_file
from taskq.spool.states import END_STATES
from taskq.spool.task import valid_id
from taskq.text.quote import quote

log = logging.getLogger("taskq")

SLOT = 512  # bytes of the marker per thread
LOOP, RESOLVER = 0, 1  # the threads that handle files, by slot
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR} | fsutil.TEMPORARY_ERRNOS


def transient(e: BaseException) -> bool:
    """Whether an exception is the spool's or the host's passing trouble, not a file's fault."""
    return isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno in _TRANSIENT)


class PoisonGuard:
    """The daemon's guard over the handling of each file (see the module docstring)."""

    def __init__(self, spool: Spool, host: str, pid: int, now: Callable[[], int]) -> None:
        self.spool = spool
        self.host = host
        self.now = now
        self.owner = f"{host}_{pid}"
        self.marker = daemon_file(spool.run, self.owner, HANDLING)
        self.suspects_path = os.path.join(spool.run, host + SUSPECTS)
        self.suspects: dict[str, str] = {}  # "KIND KEY" -> the step a daemon died in
        self._fd = -1
        self._slots = [Handling(self, LOOP), Handling(self, RESOLVER)]
        self._aside: dict[str, Callable[[str, str], None]] = {}

    def sets_aside(self, kind: str, how: Callable[[str, str], None]) -> None:
        """Have the files of one kind quarantined by how(path, reason), which logs it.

        The pickup's own way also answers the member whose drop file it was.
        """
        self._aside[kind] = how

    # -- start-up ----------------------------------------------------------

    def start(self) -> None:
        """Judge the markers of this host's dead daemons, then open our own."""
        self.suspects = self._read_suspects()
        before = dict(self.suspects)
        for key, step in self._deaths():
            if key in self.suspects:
                del self.suspects[key]
                self._quarantine(key, f"the daemon died twice while handling it ({step})")
            else:
                self.suspects[key] = step
                log.warning(
                    "a daemon died while handling %s (%s); a second death sets it aside", key, step
                )
        for key in list(self.suspects):  # a suspect that has ended, or is gone, is forgotten
            target = self._target(key, None)
            if target is None or not os.path.lexists(target):
                del self.suspects[key]
        if self.suspects != before:
            self._save_suspects()
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            self._fd = os.open(self.marker, flags, 0o600)
        except OSError as e:  # then only the second-death rule is lost
            log.warning("cannot open the poison guard's marker %s: %s", self.marker, e)

    def stop(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self.marker)

    def _deaths(self) -> list[tuple[str, str]]:
        """What the dead daemons of this host were handling when they died (each read once)."""
        out = []
        for entry in fsutil.listdir(self.spool.run):
            owner = entry[: -len(HANDLING)]
            if not entry.endswith(HANDLING) or owner == self.owner:
                continue
            if owner.rpartition("_")[0] != self.host or status.daemon_alive(self.spool.run, owner):
                continue
            mine = os.path.join(self.spool.run, f".{entry}.{self.owner}")
            try:
                os.rename(os.path.join(self.spool.run, entry), mine)  # only one reader wins
                data = fsutil.read_small(mine, SLOT * len(self._slots))[0]
            except (OSError, CorruptFile):
                continue
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(mine)
            out += _records(data)
        return out

    def _read_suspects(self) -> dict[str, str]:
        try:
            doc = fields.document(fsutil.read_small(self.suspects_path, 64 << 10)[0])
        except (OSError, CorruptFile, BadInput):
            return {}
        return {k: v for k, v in doc.items() if type(v) is str and _key_ok(k)}

    def _save_suspects(self) -> None:
        data = (json.dumps(self.suspects) + "\n").encode()
        staging = f"{self.suspects_path}.{self.owner}.tmp"  # a crashed predecessor's is removed
        try:
            fsutil.replace_file(self.suspects_path, data, sync=False, staging=staging, umask=True)
        except OSError as e:
            log.warning("cannot record the suspects of poisoning: %s", e)

    # -- handling ------------------------------------------------------------

    def handling(self, kind: str, key: str, path: str, step: str, slot: int = LOOP) -> Handling:
        """A context for handling one file: marked, and quarantined if anything escapes.

        kind is "task" (key: its id; path: where it is now), "schedule"
        (key: its name), "drop" (key: a drop file's name, which its claim
        in pickup/ keeps whichever daemon holds it) or "file" (key: its
        path in the spool).
        """
        return self._slots[slot].begin(kind, key, path, step)

    def resolving(self, kind: str, key: str, path: str, step: str) -> Handling:
        """handling() on the resolver's thread (its own slot of the marker)."""
        return self.handling(kind, key, path, step, slot=RESOLVER)

    def _mark(self, slot: int, record: bytes) -> None:
        if self._fd >= 0:
            try:
                os.pwrite(self._fd, record, slot * SLOT)
            except OSError:
                pass  # a marker lost costs only the second-death rule for this file

    def handled(self, key: str) -> None:
        """A suspect was handled to the end: it is cleared."""
        if self.suspects.pop(key, None) is not None:
            self._save_suspects()

    def poisoned(self, kind: str, key: str, path: str, step: str, e: BaseException) -> None:
        """Something escaped while handling a file: quarantine it (unless it has ended)."""
        reason = f"{step} failed: {type(e).__name__}: {e}"
        log.debug("while handling %s %s", kind, key, exc_info=e)  # the traceback, if asked for
        self._quarantine(f"{kind} {key}", reason, path)

    def _quarantine(self, key: str, reason: str, path: str | None = None) -> None:
        target = self._target(key, path)
        if target is None:
            log.warning("%s: %s; it has moved on, and is left where it is", key, reason)
            return
        how = self._aside.get(key.partition(" ")[0])
        if how is not None:
            how(target, reason)  # (which logs what it did)
        elif self.spool.quarantine(target, reason, self.now()):
            log.warning("quarantined %s: %s", os.path.relpath(target, self.spool.root), reason)
        self.suspects.pop(key, None)

    def _target(self, key: str, path: str | None) -> str | None:
        """Where the file handled is now: as named, or (a task) found by its id.

        A task that has ended is left in place: it is never handled again.
        """
        kind, _, name = key.partition(" ")
        if path is not None and os.path.lexists(path):
            return path
        if kind == "schedule":
            return os.path.join(self.spool.schedules, name, "schedule.json")
        if kind == "file":
            return os.path.join(self.spool.root, name)
        if kind == "drop":
            prefix = f"{name}_"  # its claim, under whichever daemon's name
            held = [e for e in fsutil.listdir(self.spool.pickup) if e.startswith(prefix)]
            return self.spool.pickup_path(held[0]) if held else None
        try:
            found = byid.locate(self.spool, name)
        except (NotFound, BadInput):
            return None
        return None if found.state in END_STATES else found.path


class Handling:
    """The guard's context for one thread's handling of one file (reused: one per slot)."""

    __slots__ = ("depth", "guard", "key", "kind", "path", "slot", "step")

    def __init__(self, guard: PoisonGuard, slot: int) -> None:
        self.guard, self.slot, self.depth = guard, slot, 0
        self.kind = self.key = self.path = self.step = ""

    def begin(self, kind: str, key: str, path: str, step: str) -> Handling:
        if self.depth == 0:  # a handling within one (a takeover settles its end) adds nothing
            self.kind, self.key, self.path, self.step = kind, key, path, step
        return self

    def __enter__(self) -> Handling:
        self.depth += 1
        if self.depth == 1:
            self.guard._mark(self.slot, _record(self.kind, self.key, self.step))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self.depth -= 1
        if self.depth:
            return False  # the outermost handling judges
        self.guard._mark(self.slot, b"\n")
        if e is None:
            if self.guard.suspects:
                self.guard.handled(f"{self.kind} {self.key}")
            return False
        if not isinstance(e, Exception) or transient(e):
            return False
        self.guard.poisoned(self.kind, self.key, self.path, self.step, e)
        return True


def _record(kind: str, key: str, step: str) -> bytes:
    text = f"{kind} {quote(key)}\t{quote(step)}"
    return text.encode()[: SLOT - 1] + b"\n"


def _records(data: bytes) -> list[tuple[str, str]]:
    """The (key, step) pairs a marker's slots hold; empty slots, and what is no record, skipped."""
    out = []
    for start in range(0, len(data), SLOT):
        line = data[start : start + SLOT].partition(b"\n")[0]
        key, tab, step = line.decode(errors="replace").partition("\t")
        if tab and _key_ok(key):
            out.append((key, step))
    return out


def _key_ok(key: str) -> bool:
    """Whether a marker's key names a file this guard would handle: a task id, a schedule."""
    kind, _, name = key.partition(" ")
    if kind == "task":
        return valid_id(name)
    if kind == "schedule":
        return bool(name) and "/" not in name and not name.startswith(".")
    if kind == "file":
        return bool(name) and ".." not in name.split("/") and not name.startswith("/")
    if kind == "drop":
        return drop.parse_name(name) is not None
    return False
