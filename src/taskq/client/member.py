"""What a member of a shared spool does: submit and ask through the drop, read the answers.

A process that does not own the spool, in a spool with a drop/ (a shared
spool: `taskq init --shared`), may write nowhere else. Its submissions are
drop files (spool/drop.py) made durable before their ids are printed; its
cancel, reschedule and retry are requests that a daemon carries out if the
task is the member's, and answers in replies/; a lookup of a task that no
daemon has taken in yet finds it in drop/ or pickup/, or finds the answer
that refused it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from taskq import errors
from taskq.errors import CorruptFile, NotFound, TaskqError
from taskq.spool import drop, fsutil, record
from taskq.spool.drop import DropName, Request
from taskq.spool.keys import key_path, read_key
from taskq.spool.layout import Spool
from taskq.spool.task import TaskBody, TaskName, new_id
from taskq.times.clock import wall_us

T = TypeVar("T")
ASK_TIMEOUT = 10.0  # seconds a request waits for a daemon to take it, by default


def submit(spool: Spool, bodies: list[TaskBody]) -> list[tuple[TaskName, bool]]:
    """Put submissions in the drop, durably; return each one's name and whether it is new.

    A key that a daemon has bound already is answered here, as a private
    submit answers it, with the first task. The ids are the member's own
    (drop.member_id): a daemon files each task under the id given here.
    """
    uid, now = os.geteuid(), wall_us()
    results: list[tuple[TaskName, bool]] = []
    firsts: dict[str, TaskName] = {}  # a batch's key -> its first line's task
    todo: list[tuple[DropName, bytes]] = []
    for body in bodies:
        known = firsts.get(body.key) if body.key is not None else None
        if known is None and body.key is not None:
            known = key_bound(spool, body.key, uid)
        if known is not None:
            results.append((known, False))
            continue
        task_id, nonce = drop.member_id(uid, now)
        mine = record.replace(body, id=task_id, submitter=uid)
        name = TaskName(mine.run_at, task_id, 1, mine.queue)
        if mine.key is not None:
            firsts[mine.key] = name
        todo.append((DropName(task_id, drop.SUBMISSION), drop.encode_submission(nonce, mine)))
        results.append((name, True))
    _drop_durably(spool, todo)
    return results


def check_known(spool: Spool, ids: list[str]) -> None:
    """Refuse --after tasks that exist nowhere: neither in the spool nor in the drop."""
    from taskq.spool import deps  # only for --after: off a member's plain submit

    found = deps.states_of(spool, ids)
    missing = [i for i in ids if i not in found and unfiled(spool, i) is None]
    if missing:  # filed since the first look, or nowhere
        found = deps.states_of(spool, missing)
    for task_id in missing:
        if task_id not in found:
            raise NotFound(f"--after: no task {task_id} in {spool.root}")


def key_bound(spool: Spool, key: str, uid: int) -> TaskName | None:
    """The task a daemon bound this member's key to, if any (the key file is readable)."""
    with contextlib.suppress(OSError, ValueError, CorruptFile):
        return read_key(key_path(spool, key, uid), uid)
    return None


def _drop_durably(spool: Spool, files: list[tuple[DropName, bytes]]) -> None:
    """Write each drop file, flush them, hand them over, and make that durable.

    Two syncfs() for any number of files (a member cannot open drop/ to
    fsync it): one before the renames, so no daemon ever reads a file a crash
    cut short, one after, so the renames last. Nothing is handed over if a
    write fails.
    """
    if not files:
        return
    fd = -1
    try:
        for name, data in files:
            if fd >= 0:
                os.close(fd)
                fd = -1
            fd = drop.write_part(spool, name, data)
        drop.commit(fd, spool)
        for name, _ in files:
            drop.finish(spool, name)
        drop.commit(fd, spool)
    except OSError as e:
        for name, _ in files:
            drop.discard(spool, name)
        raise fsutil.as_taskq_error(e, f"cannot submit to {spool.root}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def ask(spool: Spool, request: Request, timeout: float = ASK_TIMEOUT) -> dict[str, Any]:
    """Have a daemon carry out a request; its answer, or the error it gave.

    If no daemon takes the request within timeout, it is withdrawn and
    nothing changed: TempFail (exit 75), try again. If one took it but does
    not answer within a second timeout, the outcome is unknown (exit 1):
    the request is still carried out once a daemon gets to it.
    """
    name = DropName(new_id(wall_us()), request.kind)
    try:
        fd = drop.write_part(spool, name, request.encode())
        os.close(fd)
        drop.finish(spool, name)
    except OSError as e:
        drop.discard(spool, name)
        raise fsutil.as_taskq_error(e, f"cannot ask a daemon of {spool.root}") from None
    answer = _answer(spool, name, timeout)
    if answer is None and drop.discard(spool, name):
        raise errors.TempFail(
            f"no daemon took the {request.kind} of {request.task_id} within {timeout:g}s; "
            "nothing was changed (is a daemon running on this spool?)"
        )
    answer = answer or _answer(spool, name, timeout)
    if answer is None:
        raise TaskqError(
            f"a daemon took the {request.kind} of {request.task_id} but gave no answer within "
            f"{timeout:g}s; `taskq show {request.task_id}` tells what became of the task"
        )
    return answered(answer)


def answered(doc: dict[str, Any]) -> dict[str, Any]:
    """An answer that says it succeeded; the error it names, raised, otherwise."""
    status = doc["status"]
    if status == errors.EX_OK:
        return doc
    message = str(doc.get("message", "refused"))
    raise errors.for_status(status, message)


def _answer(spool: Spool, name: DropName, timeout: float) -> dict[str, Any] | None:
    """Poll for the answer: every millisecond at first, backing off to 50 ms.

    replies/ may be searched, not read, so inotify cannot watch it for us.
    """
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        doc = drop.read_reply(spool, name)
        if doc is not None or time.monotonic() >= deadline:
            return doc
        time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
        pause = min(pause * 2, 0.05)


def unfiled(spool: Spool, task_id: str) -> dict[str, Any] | None:
    """A submission of this id that no task shows yet: waiting in the drop, or its answer.

    {"state": "submitted"} while it is in drop/ or being picked up; the
    daemon's answer once it was not filed (refused, or its key names
    another task); None if the spool knows nothing of it, or the task was
    filed since the caller looked (a daemon answers, or files the task,
    before it removes the drop file: so the drop is looked at first).
    """
    name = DropName(task_id, drop.SUBMISSION)
    if drop.waiting(spool, name):
        return {"status": errors.EX_OK, "state": "submitted", "id": task_id}
    return drop.read_reply(spool, name)


def settle(spool: Spool, task_id: str, lookup: Callable[[str], T], timeout: float | None) -> T:
    """lookup(task_id), waiting while the member's submission of it is still in the drop.

    NotFound once the spool knows nothing of it; its refusal, as the error
    it names, if it was refused; lookup of a key's first task if its answer
    was that task.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return lookup(task_id)
        except NotFound:
            doc = unfiled(spool, task_id)
            if doc is None:
                return lookup(task_id)  # filed since: found now, or the spool knows none
        if doc.get("state") != "submitted":
            first = answered(doc).get("id")
            if not isinstance(first, str) or first == task_id:
                raise NotFound(f"task {task_id} was not filed")
            return lookup(first)
        if deadline is not None and time.monotonic() >= deadline:
            raise errors.WaitTimeout(f"task {task_id} is still in the drop")
        time.sleep(0.01)
