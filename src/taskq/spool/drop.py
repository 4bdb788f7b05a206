"""The drop: how members of a shared spool hand their submissions and requests to daemons.

In a shared spool (`taskq init --shared GROUP`) the members create files in
one directory only, drop/ (mode 1730, the spool's group: they may create
files there and open those whose names they know, never list it nor touch
another's), as Postfix's postdrop writes into maildrop. Every other
directory is written by root (the daemons) alone. A daemon picks each drop
file up, checks it whole, writes what it asks for itself, and removes it;
it never acts on the member's file (a member can keep writing a file through
a descriptor after it is moved).

  drop/NAME.part        being written by its member; never read by a daemon
  drop/ID.task          a submission: the id's nonce on a line, then a task body
  drop/RID.cancel       a request about one task: {"version": 1, "id": ID}, and
  drop/RID.reschedule   "run_at" for reschedule and retry; RID is a fresh id,
  drop/RID.retry        the name of its answer
  pickup/NAME_EXPIRY_PID_HOST   claimed by one daemon (renamed out of drop/)
  replies/NAME          the answer to NAME: a JSON object with the exit status
                        the member's command exits with; the member's (0400),
                        in a directory members may search, not list

A member's task id is bound to the member: its 80 low bits are a hash of
the member's uid, its 48 bits of milliseconds and a nonce the drop file
carries. A daemon computes it again from the drop file's owner, which the
kernel vouches for, so no member can file a task under an id another user's
task has: that would take a preimage of an 80-bit hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any, NamedTuple

from taskq.errors import BadInput, CorruptFile
from taskq.spool import fields, fsutil
from taskq.spool.layout import Spool
from taskq.spool.task import MAX_BODY, TaskBody, check_id, decode_id, encode_id
from taskq.text.lazyre import Lazy
from taskq.times.timespec import DAY, format_compact, format_iso, parse_compact

SUBMISSION = "task"
REQUESTS = ("cancel", "reschedule", "retry")
PART = ".part"
SUBMISSION_LIMIT = MAX_BODY + 64  # a nonce's line, then a body
REQUEST_LIMIT = 4096
REPLY_LIMIT = 64 << 10
REPLY_TTL = DAY  # answers are removed this long after they were written
FORMAT_VERSION = 1

_ID = r"[0-9A-HJKMNP-TV-Z]{26}"
_NAME = Lazy(rf"({_ID})\.(task|cancel|reschedule|retry)")
_COMPACT = r"\d{8}T\d{6}\.\d{6}Z"
_HOST = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_CLAIM = Lazy(rf"({_ID}\.[a-z]+)_({_COMPACT})_([1-9]\d{{0,9}})_({_HOST})")
_NONCE = Lazy(r"[0-9a-f]{32}")
_LOW80 = (1 << 80) - 1


class DropName(NamedTuple):
    """A finished drop file's name: a token (the task's or the request's id) and a kind."""

    token: str
    kind: str

    def __str__(self) -> str:
        return f"{self.token}.{self.kind}"


def parse_name(entry: str) -> DropName | None:
    """The name of a finished drop file, or None for anything else."""
    m = _NAME.fullmatch(entry)
    return None if m is None else DropName(m.group(1), m.group(2))


# -- ids bound to their member -------------------------------------------------

_last_ms = 0


def member_id(uid: int, now_us: int) -> tuple[str, str]:
    """A fresh task id bound to uid, and its nonce.

    One process's ids increase (a later one gets a later millisecond), so a
    batch's tasks keep their order, as new_id's do.
    """
    global _last_ms
    ms = max(now_us // 1000, _last_ms + 1)
    _last_ms = ms
    nonce = os.urandom(16).hex()
    return encode_id((ms << 80) | _bound_bits(uid, ms, nonce)), nonce


def bound_to(task_id: str, nonce: str, uid: int) -> bool:
    """Whether a member's id was made for uid with this nonce."""
    value = decode_id(task_id)
    return value & _LOW80 == _bound_bits(uid, value >> 80, nonce)


def _bound_bits(uid: int, ms: int, nonce: str) -> int:
    digest = hashlib.sha256(f"taskq member id\0{uid}\0{ms}\0{nonce}".encode()).digest()
    return int.from_bytes(digest[:10], "big")


# -- what a drop file holds ------------------------------------------------------


def encode_submission(nonce: str, body: TaskBody) -> bytes:
    return nonce.encode() + b"\n" + body.to_json()


def read_submission(data: bytes, name: DropName) -> tuple[str, TaskBody]:
    """A submission's nonce and body, checked whole; CorruptFile says why not."""
    line, sep, rest = data.partition(b"\n")
    nonce = line.decode("ascii", "replace")
    if not sep or _NONCE.fullmatch(nonce) is None:
        raise CorruptFile("bad submission: no nonce line")
    body = read_body(rest)
    if body.id != name.token:
        raise CorruptFile(f"bad submission: body id {body.id} is not the name's {name.token}")
    return nonce, body


def read_body(data: bytes) -> TaskBody:
    """The task body of a drop file, through the one total reader of bodies."""
    return TaskBody.from_json(data)


class Request(NamedTuple):
    """A member's cancel, reschedule or retry of one task."""

    kind: str
    task_id: str
    run_at: int | None = None  # reschedule and retry

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"version": FORMAT_VERSION, "id": self.task_id}
        if self.run_at is not None:
            doc["run_at"] = format_iso(self.run_at)
        return (json.dumps(doc) + "\n").encode()


def read_request(data: bytes, kind: str) -> Request:
    """A request of the kind its name says, checked whole (fields.py); CorruptFile says why not."""
    try:
        doc = fields.document(data)
        if doc.get("version") != FORMAT_VERSION:
            raise BadInput(f"unknown version {repr(doc.get('version'))[:40]}")
        task_id = check_id(fields.text("id", doc["id"]))
        if kind == "cancel":
            return Request(kind, task_id)
        return Request(kind, task_id, fields.instant("run_at", doc["run_at"]))
    except KeyError as e:
        raise CorruptFile(f"bad request: no {e}") from None
    except BadInput as e:
        raise CorruptFile(f"bad request: {e}") from None


# -- the member's side -----------------------------------------------------------


def write_part(spool: Spool, name: DropName, data: bytes) -> int:
    """Write a drop file as NAME.part (no daemon reads it yet); return its open descriptor."""
    part = spool.drop_path(f"{name}{PART}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(part, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise
    return fd


def finish(spool: Spool, name: DropName) -> None:
    """Hand a written drop file over: NAME.part renamed to NAME, which daemons take."""
    os.rename(spool.drop_path(f"{name}{PART}"), spool.drop_path(str(name)))


def discard(spool: Spool, name: DropName) -> bool:
    """Remove one's own drop file, finished or not; False if a daemon took it already."""
    gone = False
    for path in (spool.drop_path(f"{name}{PART}"), spool.drop_path(str(name))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            gone = True
    return gone


def commit(fd: int, spool: Spool) -> None:
    """Make every drop file written so far durable: syncfs() on one's descriptor.

    On a local journalling filesystem syncfs() commits the journal, the new
    entries in drop/ with it; on NFS each create and rename is already
    stable on the server when it returns (and syncfs() writes and commits
    the data). See docs/design.md §11 for why this is enough.
    """
    fsutil.syncfs_fd(fd, spool.drop)


def read_reply(spool: Spool, name: DropName) -> dict[str, Any] | None:
    """The daemon's answer to a drop file, or None while there is none.

    Only an answer the reader or root owns counts (replies/ is root's to
    write; this is the check that it stays so).
    """
    try:
        data, st = fsutil.read_small(spool.reply_path(str(name)), REPLY_LIMIT)
    except (FileNotFoundError, CorruptFile):
        return None
    if st.st_uid not in (0, os.geteuid()):
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if type(doc) is dict and type(doc.get("status")) is int else None


def waiting(spool: Spool, name: DropName) -> bool:
    """Whether a drop file is still there or being picked up (not yet answered or filed)."""
    if os.path.lexists(spool.drop_path(str(name))):
        return True
    prefix = f"{name}_"
    return any(e.startswith(prefix) for e in fsutil.listdir(spool.pickup))


# -- the daemon's side -----------------------------------------------------------


class Claimed(NamedTuple):
    """A drop file in pickup/, held by one daemon until it is filed or refused."""

    name: DropName
    expiry: int
    pid: int
    host: str

    def __str__(self) -> str:
        return f"{self.name}_{format_compact(self.expiry)}_{self.pid}_{self.host}"

    @property
    def daemon(self) -> str:
        return f"{self.host}_{self.pid}"


def parse_claim(entry: str) -> Claimed | None:
    m = _CLAIM.fullmatch(entry)
    if m is None:
        return None
    name = parse_name(m.group(1))
    if name is None:
        return None
    return Claimed(name, parse_compact(m.group(2)), int(m.group(3)), m.group(4))


def claim(spool: Spool, src: str, new: Claimed) -> str:
    """Take a drop file (or another daemon's stale claim of one) by one rename.

    FileNotFoundError: another daemon took it first (or its member withdrew it).
    """
    dest = spool.pickup_path(str(new))
    fsutil.rename_cas(src, dest, unique=True)
    return dest


def reply(spool: Spool, name: DropName, uid: int, doc: dict[str, Any]) -> None:
    """Answer a drop file: replies/NAME, the member's to read and no one else's.

    Written unsynced: an answer lost in a crash leaves its asker without
    one (its command says so), never a change undone.
    """
    data = (json.dumps(doc) + "\n").encode()
    staging = spool.reply_path(f".{name}.{os.getpid()}")
    fsutil.replace_file(
        spool.reply_path(str(name)), data, sync=False, staging=staging, mode=0o400, owner=uid
    )


def old_replies(spool: Spool, now: int) -> list[str]:
    """Answers older than REPLY_TTL, to be removed."""
    cutoff = (now - REPLY_TTL) / 1e6
    out = []
    for entry in fsutil.listdir(spool.replies):
        path = spool.reply_path(entry)
        try:
            if os.lstat(path).st_mtime < cutoff:
                out.append(path)
        except FileNotFoundError:
            continue
    return out
