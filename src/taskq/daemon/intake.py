"""What a drop file asks for, checked whole and carried out for its member.

A submission is filed as a task of the daemon's own writing (client/submit.py,
as any submit files one), root's file with the member recorded as its
submitter (the task runs as, and belongs to, the drop file's owner), under
the member's keys; a request (cancel, reschedule, retry) is carried out by
the operator's own operation (client/operations.py) if the task is the
member's. Everything decided here comes from the drop file's contents and
its owner, whom the kernel vouches for; each outcome is answered in
replies/ with the exit status the member's command exits with.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, NamedTuple

from taskq import errors
from taskq.client import operations
from taskq.client.submit import submit, submit_batch
from taskq.errors import CorruptFile, NotFound, TaskqError
from taskq.spool import byid, drop, fsutil, hints, journal, record
from taskq.spool import runas as security
from taskq.spool.drop import DropName, Request
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.task import TaskBody, TaskName
from taskq.times.timespec import format_iso

NOTHING, FILED, CHANGED, LATER = "nothing", "filed", "changed", "later"
DEFERRED = "deferred"  # kept in pickup/ for the next pass
EX_REFUSED = errors.EX_USAGE  # a drop file that is no valid request: as a bad one is refused


class Answer(NamedTuple):
    """What became of a drop file and what its member is told (None: nothing to tell)."""

    outcome: str
    doc: dict[str, Any] | None
    refused: bool = False


class Later(Exception):
    """The spool cannot take it now (full, read-only): leave the drop file for a later pass."""


def refusal(message: str, status: int) -> dict[str, Any]:
    return {"status": status, "message": message}


class Ready(NamedTuple):
    """A submission checked whole and bound to its member, to be filed (alone or in a group)."""

    name: DropName
    body: TaskBody
    uid: int
    group: int | None  # the member's private group, which may read its files


def handle(
    spool: Spool, name: DropName, data: bytes, uid: int, policy: security.UserRules, now: int
) -> Answer | Ready:
    """Check one drop file, and carry a request out; CorruptFile if it is not what its name says.

    A submission is only checked: the caller files it (file_one, file_group).
    """
    if name.kind == drop.SUBMISSION:
        return check_submission(spool, name, data, uid, policy)
    return carry_out(spool, drop.read_request(data, name.kind), uid)


def check_submission(
    spool: Spool, name: DropName, data: bytes, uid: int, policy: security.UserRules
) -> Answer | Ready:
    """A member's submission, checked and bound to the member; or the answer that ends it."""
    nonce, body = drop.read_submission(data, name)
    if not drop.bound_to(body.id, nonce, uid):
        raise CorruptFile(f"task id {body.id} was not made for uid {uid}")
    if body.submitter not in (None, uid):
        raise CorruptFile(f"names submitter uid {body.submitter}, not its owner uid {uid}")
    try:
        security.run_as(uid, policy)
    except ValueError as e:
        return Answer(NOTHING, refusal(f"refused: {e}", errors.EX_NOPERM), refused=True)
    body = record.replace(body, submitter=uid)
    known = _filed_before(spool, body)
    if known is not None:
        return known
    # A body in tmp/ under this id is what a daemon that died filing this
    # very drop file left (only it makes this id): filed again from the start.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(spool.tmp_body(body.id))
    return Ready(name, body, uid, security.private_group(uid))


def file_one(spool: Spool, ready: Ready, now: int) -> Answer:
    """File a checked submission as a task of the daemon's, the member its submitter."""
    body = ready.body
    try:
        filed, created = submit(spool, body, group=ready.group)
    except NotFound as e:  # an --after task that is gone, or not yet filed
        if any(drop.waiting(spool, DropName(dep, drop.SUBMISSION)) for dep in body.after):
            return Answer(DEFERRED, None)  # another daemon is filing it: the next pass
        return Answer(NOTHING, refusal(f"refused: {e}", e.exit_status), refused=True)
    except TaskqError as e:  # the spool's trouble, not the file's (its checks are passed)
        raise Later(str(e)) from None
    return _filed(spool, ready, filed, created, now)


def file_group(spool: Spool, group: list[Ready], now: int) -> list[Answer]:
    """File checked submissions (none with --after) under one sync barrier: submit_batch's.

    Later if the spool cannot take them now: none is filed, and each is
    tried again. Anything else: the caller files each alone (file_one).
    """
    try:
        results = submit_batch(spool, [r.body for r in group], [r.group for r in group])
    except TaskqError as e:
        raise Later(str(e)) from None
    return [_filed(spool, r, n, new, now) for r, (n, new) in zip(group, results, strict=True)]


def _filed(spool: Spool, ready: Ready, filed: TaskName, created: bool, now: int) -> Answer:
    """The answer for a submission filed (or answered by its key's first task); journalled."""
    body = ready.body
    if not created:
        doc = {"status": 0, "id": filed.id, "created": False, "key": body.key}
        doc["message"] = f"key {body.key} names task {filed.id}, submitted first"
        return Answer(NOTHING, doc)
    journal.begin(
        spool.log_dir(body.id),
        Event.FILED,
        now,
        ready.group,
        attempt=1,
        uid=ready.uid,
        via="drop",
        daemon_pid=os.getpid(),
    )
    return Answer(FILED, None)


def _filed_before(spool: Spool, body: TaskBody) -> Answer | None:
    """If a task has this id already (this very submission, filed before a crash): the answer.

    Only the member can make its ids (drop.bound_to), so such a task is the
    member's: the same request again, or another one reusing an id.
    """
    hint = hints.read_hint(spool, body.id)
    if hint is None:
        return None
    found = byid.probe(spool, body.id, byid.journal_names(spool, hint))
    if found is None:
        return None  # a hint written just before a crash, without its task: file it
    try:
        same = spool.read_body(found.path).to_json() == body.to_json()
    except (CorruptFile, OSError):
        same = False
    if same:
        return Answer(NOTHING, None)
    message = f"refused: task id {body.id} is taken by another task of yours"
    return Answer(NOTHING, refusal(message, errors.EX_CONFLICT), refused=True)


def carry_out(spool: Spool, request: Request, uid: int) -> Answer:
    """Cancel, reschedule or retry one of the member's tasks, as the operator's command does."""
    task_id = request.task_id
    try:
        if hints.read_hint(spool, task_id) is None:
            # Every task the daemon files has a hint; without one, no search
            # of the whole spool (a member's request must not cost that).
            raise NotFound(f"no task {task_id} in {spool.root}")
        found, _ = byid.load(spool, task_id)
        _, whose = spool.read_task(found.path)
        if uid not in (0, whose):
            message = f"task {task_id} is not yours"
            return Answer(NOTHING, refusal(message, errors.EX_NOPERM), refused=True)
        return Answer(CHANGED, _act(spool, request))
    except TaskqError as e:
        return Answer(NOTHING, refusal(str(e), e.exit_status))
    except OSError as e:
        failure = fsutil.as_taskq_error(e, f"cannot {request.kind} {task_id}")
        return Answer(NOTHING, refusal(str(failure), failure.exit_status))


def _act(spool: Spool, request: Request) -> dict[str, Any]:
    task_id = request.task_id
    if request.kind == "cancel":
        was = operations.cancel(spool, task_id)
        return {"status": 0, "id": task_id, "state": was.state}
    assert request.run_at is not None  # (read_request requires it)
    if request.kind == "reschedule":
        name = operations.reschedule(spool, task_id, request.run_at)
    else:
        name = operations.retry(spool, task_id, request.run_at)
    return {"status": 0, "id": task_id, "run_at": format_iso(name.run_at), "attempt": name.attempt}
