"""The task body and the spool's file names: parse and format, no I/O.

A file's name carries what the scheduler sorts and compares without opening
it (run_at, id, attempt and, in claimed/, the phase, lease expiry and daemon);
its body is the submitted request, immutable JSON. Every parser here rejects
anything it did not produce, so a foreign file can be quarantined.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any, ClassVar, Self

from taskq.errors import BadInput, CorruptFile
from taskq.spool import fields, resources
from taskq.spool.fields import MAX_EXEC, MAX_EXEC_STRING
from taskq.spool.memo import LastOf
from taskq.spool.record import Frozen, field, names, record
from taskq.spool.resources import Resources
from taskq.text.lazyre import Lazy
from taskq.times.timespec import (
    MINUTE,
    SECOND,
    format_compact,
    format_iso,
    parse_compact,
)

if TYPE_CHECKING:
    from taskq.spool.states import Phase  # at run time only where a claim is parsed

__all__ = ["MAX_EXEC", "MAX_EXEC_STRING"]  # (re-exported: request.py's limits too)

FORMAT_VERSION = 1
DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
MAX_PRIORITY = 1000  # --priority is -1000 to 1000
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
MAX_STDIN = 1 << 20  # bytes of --stdin payload a task may carry
MAX_BODY = 4 << 20  # a larger file in the spool is corrupt by definition
MAX_ATTEMPTS = 1000  # the most attempts a task may be given
MAIL_MODES = ("failure", "always", "never")
MAX_AFTER = 100  # dependencies one task may name
# The last attempt number a task can have: its TASKQ_FENCE (attempt * 10**13
# + a lease expiry in ms, client/fence.py) must fit a signed 64-bit integer.
MAX_ATTEMPT = 922_336

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # 10 bits -> two digits
_ID = Lazy(r"[0-9A-HJKMNP-TV-Z]{26}")
_TOKEN = Lazy(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_QUEUE = Lazy(r"[A-Za-z0-9][A-Za-z0-9.-]{0,63}")  # no '_': it separates name fields
_COMPACT = r"\d{8}T\d{6}\.\d{6}Z"
_TASK_NAME = Lazy(
    rf"({_COMPACT})_([0-9A-HJKMNP-TV-Z]{{26}})_([1-9]\d{{0,5}})_([A-Za-z0-9][A-Za-z0-9.-]{{0,63}})"
)


def _claim_name() -> str:
    from taskq.spool.states import Phase  # its enum is not made at a plain submit's start-up

    phases = "|".join(Phase)
    return rf"({_COMPACT}_[0-9A-Z]{{26}}_\d+_[^_]+)_({phases})_({_COMPACT})_([1-9]\d{{0,9}})_(.+)"


_CLAIM_NAME = Lazy(_claim_name)

TASK_NAME = _TASK_NAME  # groups: run_at (compact), id, attempt, queue
CLAIM_NAME = _CLAIM_NAME  # groups: task name, phase, expiry, pid, host


_last_id = 0


def _base64() -> Any:
    """The base64 module, imported for the rare task with a payload."""
    import base64  # off submit's start-up: few tasks carry a payload

    return base64


def new_id(now_us: int) -> str:
    """Make a ULID-style id: 48 bits of milliseconds, 80 random bits, base32.

    Ids made by one process only ever increase: within a millisecond (or
    after the clock stepped back) an id is the previous one plus one, so
    the tasks of a batch keep their input order and draw no randomness but
    the first's.
    """
    global _last_id
    ms = now_us // 1000
    if ms <= _last_id >> 80:
        value = _last_id + 1
    else:
        value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    _last_id = value
    return encode_id(value)


def encode_id(value: int) -> str:
    """The 26 characters of an id's 128 bits (48 of milliseconds, 80 more)."""
    return _id_head(value >> 10) + _PAIRS[value & 1023]


@functools.lru_cache(maxsize=16)  # a batch's ids follow one another: a thousand share a head
def _id_head(high: int) -> str:
    """The first 24 characters of an id, from all but its last 10 bits."""
    p = _PAIRS
    return (
        _time_digits(high >> 70)
        + p[(high >> 60) & 1023]
        + p[(high >> 50) & 1023]
        + p[(high >> 40) & 1023]
        + p[(high >> 30) & 1023]
        + p[(high >> 20) & 1023]
        + p[(high >> 10) & 1023]
        + p[high & 1023]
    )


@functools.lru_cache(maxsize=64)  # a batch's ids share their milliseconds
def _time_digits(ms: int) -> str:
    """The first ten characters of an id: its 48 bits of milliseconds."""
    return "".join([_PAIRS[(ms >> shift) & 1023] for shift in range(40, -1, -10)])


def decode_id(task_id: str) -> int:
    """The bits of a well-formed id (check_id's), as encode_id took them; ValueError if not one."""
    if not valid_id(task_id):
        raise ValueError(f"not a task id: {task_id!r}")
    return int(task_id.translate(_AS_BASE32), 32)


def decode_ids(ids: list[str]) -> list[int]:
    """decode_id of each id, checked and converted in one pass: a batch's thousands."""
    joined = "/".join(ids)
    if not ids:
        return []
    if len(_IDS.compiled().findall(joined)) != len(ids):
        return [decode_id(task_id) for task_id in ids]  # to raise at the first bad one
    return [int(digits, 32) for digits in joined.translate(_AS_BASE32).split("/")]


# valid_id's rule over ids joined by "/", which no id holds.
_IDS = Lazy(r"(?<![^/])[0-9A-HJKMNP-TV-Z]{26}(?![^/])")
_AS_BASE32 = str.maketrans(_CROCKFORD, "0123456789ABCDEFGHIJKLMNOPQRSTUV")  # int()'s digits


def valid_id(text: str) -> bool:
    """Tell whether text is a well-formed task id (safe to put in a path)."""
    return _ID.fullmatch(text) is not None


def check_id(text: str) -> str:
    """Return a normalised task id or raise BadInput naming the problem."""
    upper = text.strip().upper()
    if not valid_id(upper):
        raise BadInput(f"bad task id {text!r}: expected 26 characters of Crockford base32")
    return upper


def check_token(kind: str, text: str) -> str:
    """Validate a host id: letters, digits, '.', '_', '-'; at most 64."""
    if _TOKEN.fullmatch(text) is None:
        raise BadInput(f"bad {kind} {text!r}: use letters, digits, '.', '_' or '-' (max 64)")
    return text


def check_queue(text: str, kind: str = "queue") -> str:
    """Validate a queue (or mutex) name: letters, digits, '.', '-'; at most 64."""
    if text != DEFAULT_QUEUE and _QUEUE.fullmatch(text) is None:  # (no pattern for the default)
        raise BadInput(f"bad {kind} {text!r}: use letters, digits, '.' or '-' (max 64)")
    return text


def check_mutex(text: str) -> str:
    """Validate a mutex name (--mutex): as a queue name, since permit files carry it."""
    return check_queue(text, "mutex")


def bucket_of(run_at: int) -> str:
    """Name the pending bucket of an instant: its UTC minute, YYYYMMDDHHMM."""
    return _bucket_of_minute(run_at // MINUTE)


@functools.lru_cache(maxsize=4096)  # a batch's thousand tasks of an hour fall in sixty buckets
def _bucket_of_minute(minute: int) -> str:
    compact = format_compact(minute * MINUTE)
    return compact[:8] + compact[9:13]


def valid_bucket(name: str) -> bool:
    """Tell whether a directory name in pending/ is a bucket: twelve ASCII digits."""
    return len(name) == 12 and name.isascii() and name.isdigit()  # no pattern: 43,200 a month


# valid_bucket's rule over names joined by "/", which no name holds: one pass in C.
_BUCKETS = Lazy(r"(?<![^/])[0-9]{12}(?![^/])")


def valid_buckets(names: list[str]) -> list[str]:
    """The names that are buckets (valid_bucket), in their order: a month's 43,200 at C speed."""
    return _BUCKETS.compiled().findall("/".join(names))


def bucket_start(name: str) -> int:
    """The first instant of a bucket."""
    return parse_compact(f"{name[:8]}T{name[8:12]}00.000000Z")


def day_of(instant: int) -> str:
    """Name the done/ directory of an instant: YYYYMMDD."""
    return format_compact(instant)[:8]


class _Name:
    """An immutable file name's fields, compared and hashed as the tuple of them.

    Written out rather than made by @dataclass, whose generated methods
    every `taskq` run would compile at start-up (python bench/run.py --only
    submit, one `taskq submit` process). Its text is formatted once and
    kept (`_text`).
    """

    __slots__ = ("_text",)
    _text: str | None
    _FIELDS: ClassVar[tuple[str, ...]]  # in the order of _key, __init__ and repr

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _set(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_text", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._key() == other._key()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={v!r}" for n, v in zip(self._FIELDS, self._key(), strict=True))
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[type[Self], tuple[Any, ...]]:
        return type(self), self._key()  # copy and pickle make it anew, not by setattr

    def with_(self, **changes: Any) -> Self:
        """Return a copy with some fields replaced."""
        fields = dict(zip(self._FIELDS, self._key(), strict=True))
        fields.update(changes)
        return type(self)(**fields)


class TaskName(_Name):
    """The name of a task file outside claimed/: run_at, id, attempt, queue.

    Sorting names sorts by run_at, then id (submission order): dispatch order.
    """

    __slots__ = ("attempt", "id", "queue", "run_at")
    _FIELDS = ("run_at", "id", "attempt", "queue")
    run_at: int
    id: str
    attempt: int
    queue: str

    def __init__(self, run_at: int, id: str, attempt: int, queue: str = DEFAULT_QUEUE) -> None:
        put = object.__setattr__  # not _set(**fields): a batch and a rescan make thousands
        put(self, "run_at", run_at)
        put(self, "id", id)
        put(self, "attempt", attempt)
        put(self, "queue", queue)
        put(self, "_text", None)

    def _key(self) -> tuple[int, str, int, str]:
        return (self.run_at, self.id, self.attempt, self.queue)

    def __lt__(self, other: TaskName) -> bool:
        return self._key() < other._key()

    def __le__(self, other: TaskName) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: TaskName) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: TaskName) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        text: str | None = self._text
        if text is None:  # a name is formatted many times on the daemon's path: once here
            text = f"{format_compact(self.run_at)}_{self.id}_{self.attempt}_{self.queue}"
            object.__setattr__(self, "_text", text)
        return text

    @classmethod
    def parse(cls, name: str) -> TaskName:
        """Parse a task file name; raise ValueError if it is not one."""
        m = _TASK_NAME.fullmatch(name)
        if not m:
            raise ValueError(f"not a task file name: {name!r}")
        attempt = int(m.group(3))
        if attempt > MAX_ATTEMPT:
            raise ValueError(f"attempt {attempt} is past the last, {MAX_ATTEMPT}: {name!r}")
        return cls(parse_compact(m.group(1)), m.group(2), attempt, m.group(4))

    @property
    def bucket(self) -> str:
        return bucket_of(self.run_at)


class ClaimName(_Name):
    """The name of a file in claimed/: the task name, phase, lease and the daemon holding it."""

    __slots__ = ("expiry", "host", "phase", "pid", "task")
    _FIELDS = ("task", "phase", "expiry", "pid", "host")
    task: TaskName
    phase: Phase
    expiry: int
    pid: int
    host: str

    def __init__(self, task: TaskName, phase: Phase, expiry: int, pid: int, host: str) -> None:
        self._set(task=task, phase=phase, expiry=expiry, pid=pid, host=host)

    def _key(self) -> tuple[TaskName, Phase, int, int, str]:
        return (self.task, self.phase, self.expiry, self.pid, self.host)

    def __str__(self) -> str:
        text: str | None = self._text
        if text is None:
            exp = format_compact(self.expiry)
            text = f"{self.task}_{self.phase}_{exp}_{self.pid}_{self.host}"
            object.__setattr__(self, "_text", text)
        return text

    @classmethod
    def parse(cls, name: str) -> ClaimName:
        """Parse a claimed/ file name; raise ValueError if it is not one."""
        m = _CLAIM_NAME.fullmatch(name)
        if not m or _TOKEN.fullmatch(m.group(5)) is None:
            raise ValueError(f"not a claim file name: {name!r}")
        from taskq.spool.states import Phase  # (imported by the match already)

        task = TaskName.parse(m.group(1))
        return cls(task, Phase(m.group(2)), parse_compact(m.group(3)), int(m.group(4)), m.group(5))

    @property
    def daemon(self) -> str:
        """The daemon that holds the claim, as named in run/: HOST_PID."""
        return f"{self.host}_{self.pid}"


# layout() writes json.dumps(indent=1)'s bytes with json's C parts, since
# indent makes json use its pure-Python encoder and a batch encodes every
# body (python bench/run.py --only submit, the --batch rows). No JSON string
# holds a raw newline, so the separators below appear nowhere else. A plain
# body (strings, whole numbers, its env) needs only json's C string escaper:
# json itself, its decoder's patterns among it, stays off submit's start-up.
try:
    from _json import encode_basestring as _STR
except ImportError:  # an interpreter without json's C part
    from json.encoder import py_encode_basestring as _STR


@functools.cache
def _json_inner() -> Any:
    import json  # for floats and nested values only: off a plain submit's start-up

    return json.JSONEncoder(ensure_ascii=False, separators=(",\n  ", ": ")).encode


def _inner(value: Any) -> str:
    """value's compact JSON, members separated as layout() nests them."""
    text: str = _json_inner()(value)
    return text


_SCALARS = {None: "null", True: "true", False: "false"}
_JUST_STR = {str}


def layout(doc: dict[str, Any]) -> bytes:
    """doc as json.dumps(doc, indent=1) lays it out, newline-terminated; values nest once at most.

    Each top-level key starts a line with one space, and only they do
    (listing.command_of relies on it); a list's or object's members take a
    line each, indented by two.
    """
    parts = [_part(key, value) for key, value in doc.items()]
    return ("{\n " + ",\n ".join(parts) + "\n}\n").encode() if parts else b"{}\n"


def _part(key: str, value: Any) -> str:
    """One top-level member of layout()'s text, without its separator."""
    return f"{_STR(key)}: {_value(value)}"


_PRIORITY_KEY = b'\n "priority": '


def priority_of(data: bytes) -> int:
    """A body's priority, read from its file without parsing the rest; 0 if it has none.

    As layout() writes a body, each top-level key starts a line with one
    space and no string holds a raw newline, so the key's line is found by
    a search; a body laid out otherwise (written by hand) is parsed whole.
    A priority out of range, or a body that does not parse, ranks 0.
    """
    at = data.find(_PRIORITY_KEY)
    if at < 0:
        if b'"priority"' not in data:
            return 0
        try:
            return TaskBody.from_json(data).priority
        except CorruptFile:
            return 0
    start = at + len(_PRIORITY_KEY)
    end = start
    while end < len(data) and data[end] in b"-0123456789" and end - start < 6:
        end += 1
    try:
        value = int(data[start:end])
    except ValueError:
        return 0
    return value if abs(value) <= MAX_PRIORITY else 0


def _value(value: Any) -> str:
    kind = type(value)
    if kind is list and value and {*map(type, value)} == _JUST_STR:
        return "[\n  " + ",\n  ".join(map(_STR, value)) + "\n ]"  # a command: strings
    if kind is str:
        return _STR(value)
    if value is None or value is True or value is False:
        return _SCALARS[value]
    if kind is int:
        return int.__repr__(value)  # as json writes an int
    if kind is dict and value:
        return _object(value)
    if kind is list and value:
        return _members(_inner(value))
    return _inner(value)  # floats, empty containers, and what json makes of anything else


def _members(text: str) -> str:
    """A list's or object's compact encoding with each member on a line of its own."""
    return f"{text[0]}\n  {text[1:-1]}\n {text[-1]}"


def _encoded_object(value: dict[str, Any]) -> str:
    if value and all(type(k) is str and type(v) is str for k, v in value.items()):
        # An env: as json would write it, each member on its own line.
        return "{\n  " + ",\n  ".join(f"{_STR(k)}: {_STR(v)}" for k, v in value.items()) + "\n }"
    return _members(_inner(value))


_object = LastOf(_encoded_object)  # a batch's bodies share one env: encoded once


@record
class Request(Frozen):
    """Everything a submission asks for but its command: the fields a body keeps of it.

    A request becomes a body (client.request.body) with a fresh id, its
    command and when it was submitted; a batch line's request is the
    command line's with some fields replaced.
    """

    run_at: int
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=lambda: {"PATH": DEFAULT_PATH})
    queue: str = DEFAULT_QUEUE
    key: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: int | None = None  # microseconds
    expires: int | None = None  # microseconds after run_at
    stdin: bytes | None = None
    umask: int | None = None  # the submitter's; None: the daemon's
    env_recorded: bool = False  # env holds the submitter's environment (not --no-env)
    after: list[str] = field(default_factory=list)  # ids of tasks it waits for (--after)
    after_any: bool = False  # run however they ended (--after-any), not only if all are done
    mail: str | None = None  # --mail: failure, always or never; None: as MAILTO says
    mutex: str | None = None  # --mutex: at most one attempt holding it runs, cluster-wide
    # The uid the task is the request of, where its file cannot say (a root
    # daemon filed it from a member's drop file); None: its file's owner.
    submitter: int | None = None
    priority: int = 0  # --priority: higher first among the due tasks of its queue
    limits: Resources | None = None  # --memory-max and the rest: each attempt in a cgroup


REQUESTED = names(Request)  # what a body keeps of its request


@record
class TaskBody(Request):
    """The submitted request, written once and never modified: its id, command and submission."""

    id: str
    argv: list[str]
    submitted_at: int

    @classmethod
    def of(cls, values: dict[str, Any]) -> TaskBody:
        """The body with these values, one for each field: as __init__ makes it, only faster.

        A batch makes thousands of bodies; the record's __init__ sets
        each of its twenty-two fields in turn, with its default (python
        bench/profile_batch.py). There is nothing else to skip.
        """
        if values.keys() != _BODY_FIELDS:
            missing = sorted(_BODY_FIELDS - values.keys()) or sorted(values.keys() - _BODY_FIELDS)
            raise TypeError(f"TaskBody.of: not one value for each field ({missing[0]})")
        made = object.__new__(cls)
        made.__dict__.update(values)
        return made

    def to_json(self) -> bytes:
        """Serialise to the on-disk JSON form (documented in taskq-spool(5)), once.

        A body is never modified, so its file is encoded once and kept: a
        submission checks the file's size, then writes the same bytes.
        """
        data: bytes | None = self.__dict__.get("_file")  # (None: not encoded yet)
        if data is None:
            data = self._encode()
            object.__setattr__(self, "_file", data)
        return data

    def _encode(self) -> bytes:
        """layout(self.document()), with the members a batch's bodies share laid out once."""
        d = self.__dict__
        if _whole(d):  # rare: a payload, dependencies or limits
            return layout(self.document())
        at = format_iso(d["submitted_at"])
        return _lay(_shared_parts(self), d["id"], d["argv"], d["run_at"], at)

    def document(self) -> dict[str, Any]:
        """The body as its file's JSON object: every member, in the order of the file."""
        doc: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "id": self.id,
            "argv": self.argv,
            "cwd": self.cwd,
            "env": self.env,
            "queue": self.queue,
            "key": self.key,
            "max_attempts": self.max_attempts,
            "timeout": _secs(self.timeout),
            "expires": _secs(self.expires),
            "run_at": format_iso(self.run_at),
            "submitted_at": format_iso(self.submitted_at),
            "stdin": None if self.stdin is None else _base64().b64encode(self.stdin).decode(),
            "umask": None if self.umask is None else f"{self.umask:04o}",
            "env_recorded": self.env_recorded,
        }
        if self.after:  # written only when given, so older readers see the same bodies
            doc["after"] = self.after
            doc["after_mode"] = "any" if self.after_any else "ok"
        if self.mail is not None:
            doc["mail"] = self.mail
        if self.mutex is not None:
            doc["mutex"] = self.mutex
        if self.submitter is not None:
            doc["submitter"] = self.submitter
        if self.priority:
            doc["priority"] = self.priority
        if self.limits is not None:
            doc["limits"] = self.limits.to_doc()
        return doc

    @classmethod
    def from_json(cls, data: bytes) -> TaskBody:
        """Parse and check a body whoever wrote it; CorruptFile says, in one line, why it is bad.

        Every field is checked to what later code needs (fields.py): spawn,
        the expiry arithmetic and the journal never see a value they refuse.
        """
        try:
            doc = fields.document(data)
        except BadInput as e:
            raise CorruptFile(f"bad task body: {e}") from None
        return cls.from_doc(doc)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> TaskBody:
        """from_json's checks of a document already decoded (a schedule's template)."""
        try:
            return cls._from_doc(doc)
        except KeyError as e:
            raise CorruptFile(f"bad task body: no {e}") from None
        except (BadInput, ValueError, TypeError, OverflowError) as e:  # a check's, or a parse's
            raise CorruptFile(f"bad task body: {e}") from None

    @classmethod
    def _from_doc(cls, doc: dict[str, Any]) -> TaskBody:
        if doc.get("version") != FORMAT_VERSION:
            raise BadInput(f"unknown version {repr(doc.get('version'))[:40]}")
        argv, exec_bytes = fields.command(doc["argv"])
        env, env_bytes = fields.environment(doc.get("env") or {})
        if exec_bytes + env_bytes > MAX_EXEC:
            raise BadInput(f"the command and its variables take over {MAX_EXEC} bytes of exec()")
        get = doc.get
        stdin = get("stdin")
        return cls(
            id=check_id(fields.text("id", doc["id"])),
            argv=argv,
            cwd=fields.absolute_path("cwd", doc["cwd"]),
            env=env,
            queue=check_queue(fields.text("queue", doc["queue"])),
            key=None if get("key") is None else fields.text("key", get("key")),
            max_attempts=fields.whole("max_attempts", doc["max_attempts"], 1, MAX_ATTEMPTS),
            timeout=None if get("timeout") is None else fields.seconds("timeout", get("timeout")),
            expires=None if get("expires") is None else fields.seconds("expires", get("expires")),
            run_at=fields.instant("run_at", doc["run_at"]),
            submitted_at=fields.instant("submitted_at", doc["submitted_at"]),
            stdin=None if stdin is None else _payload(stdin),
            umask=_umask(get("umask")),
            env_recorded=_recorded(get("env_recorded")),
            after=_after(get("after")),
            after_any=fields.choice("after_mode", get("after_mode", "ok"), ("ok", "any")) == "any",
            mail=None if get("mail") is None else fields.choice("mail", get("mail"), MAIL_MODES),
            mutex=None if get("mutex") is None else check_mutex(fields.text("mutex", get("mutex"))),
            submitter=_submitter(get("submitter")),
            priority=fields.whole("priority", get("priority", 0), -MAX_PRIORITY, MAX_PRIORITY),
            limits=resources.from_body(get("limits")),
        )


_BODY_FIELDS = frozenset(names(TaskBody))
_OWN = ("version", "id", "argv", "run_at", "submitted_at")  # each body's own members
# The members a body takes from its request, laid out, by their values (the
# environment by identity: shared, never modified); a batch's bodies share them.
_SHARED: dict[tuple[Any, ...], tuple[str, str, object]] = {}


def _shared_parts(body: TaskBody) -> tuple[str, str]:
    """The members of body's file other than its own (_OWN): those before run_at, those after.

    Only for a body without stdin, after or limits, whose members are
    scalars and its env. Types are in the key where equal values lay out differently
    (True and 1).
    """
    d = body.__dict__
    key: tuple[Any, ...] = (d["cwd"], id(d["env"]), d["queue"], d["key"], d["max_attempts"])
    key += (d["timeout"], d["expires"], d["umask"], d["env_recorded"], d["mail"], d["mutex"])
    key += (d["submitter"], d["priority"], type(d["max_attempts"]), type(d["env_recorded"]))
    key += (type(d["submitter"]), type(d["priority"]))
    hit = _SHARED.get(key)
    if hit is None:
        doc = body.document()
        before = list(doc).index("run_at")
        parts = [(i < before, _part(k, v)) for i, (k, v) in enumerate(doc.items()) if k not in _OWN]
        head = ",\n ".join(p for early, p in parts if early)
        tail = ",\n ".join(p for early, p in parts if not early)
        if len(_SHARED) >= 64:
            _SHARED.clear()
        hit = _SHARED[key] = (head, tail, d["env"])  # the env kept: its id is not reused
    return hit[0], hit[1]


_HEAD = f'{{\n "version": {FORMAT_VERSION},\n "id": '  # every body's file begins so


def _lay(shared: tuple[str, str], task_id: str, argv: list[str], run_at: int, at: str) -> bytes:
    """A body's file from its shared members (_shared_parts) and its own: id, argv, run_at.

    at: the body's submitted_at as format_iso writes it.
    """
    # The instants' text is digits and -:.TZ, which JSON takes as they are.
    return (
        f"{_HEAD}{_STR(task_id)},\n"
        f' "argv": {_value(argv)},\n {shared[0]},\n'
        f' "run_at": "{format_iso(run_at)}",\n'
        f' "submitted_at": "{at}",\n {shared[1]}\n}}\n'
    ).encode()


class Bodies:
    """Bodies alike in every field but their id, command and run time, made and encoded at speed.

    A batch's lines that give only their command and time differ in
    nothing else, so what a body shares with the others is laid out once
    (_shared_parts, as to_json lays out any body) and each body's file is
    made as the body is: the same bytes to_json would make of it.
    """

    __slots__ = ("_at", "_shared", "_values")

    def __init__(self, values: dict[str, Any]) -> None:
        """values: a body's, one for each field but id and argv (run_at: a default)."""
        like = TaskBody.of({**values, "id": "", "argv": []})
        # Each body's fields are a copy of these, its own three set in place:
        # a copy of a dict that holds every key is made whole, never grown.
        self._values = {**like.__dict__, "_file": None}
        self._shared = None if _whole(values) else _shared_parts(like)
        self._at = format_iso(values["submitted_at"])

    def make(self, task_id: str, argv: list[str], run_at: int) -> TaskBody:
        """The body of these values with this id, command and run time, its file encoded."""
        d = self._values.copy()
        d["id"] = task_id
        d["argv"] = argv
        d["run_at"] = run_at
        if self._shared is not None:
            d["_file"] = _lay(self._shared, task_id, argv, run_at, self._at)
        made: TaskBody = object.__new__(TaskBody)
        object.__setattr__(made, "__dict__", d)
        return made


def _whole(d: dict[str, Any]) -> bool:
    """Whether a body of these values is laid out whole, its members shared with no other's."""
    return d["stdin"] is not None or bool(d["after"]) or d["limits"] is not None


def _recorded(value: object) -> bool:
    return value is not None and fields.flag("env_recorded", value)


def _submitter(value: object) -> int | None:
    """The uid a root-owned body records as its member's (runas.requester), if any."""
    return None if value is None else fields.uid("submitter", value)


def _payload(value: object) -> bytes:
    """The --stdin payload: base64 text of at most MAX_STDIN bytes."""
    data: bytes = _base64().b64decode(fields.text("stdin", value), validate=True)
    if len(data) > MAX_STDIN:
        raise BadInput(f"stdin is {len(data)} bytes, over the limit of {MAX_STDIN}")
    return data


def _umask(value: object) -> int | None:
    """The recorded umask: absent, null, or octal text such as "0022"."""
    if value is None:
        return None
    if type(value) is not str or not _UMASK.fullmatch(value):
        raise BadInput(f"umask {repr(value)[:20]} is not an octal mask")
    return int(value, 8)


_UMASK = Lazy(r"0?[0-7]{1,3}")


def _after(value: object) -> list[str]:
    """The ids a task waits for (--after): at most MAX_AFTER."""
    if value is None or value == []:
        return []
    if type(value) is not list or len(value) > MAX_AFTER or not set(map(type, value)) <= {str}:
        raise BadInput(f"after must be a list of at most {MAX_AFTER} task ids")
    return [check_id(v) for v in value]


def _secs(us: int | None) -> float | None:
    return None if us is None else us / SECOND
