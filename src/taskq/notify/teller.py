"""Telling people that tasks ended: the [notify] hook and mail, in a thread of its own.

The daemon hands each ended task to the teller once its end is durable
(after the group commit), so each outcome is told once, never once per
retry. The teller reads the body and journal, builds the event, runs the
hook with the event on standard input and sends mail with `sendmail -t`,
each bounded by a timeout (the hook's process group is killed when it
runs out). A hook or MTA that fails or hangs is logged and costs only this
thread's time; the loop never waits for it. Tasks that end while the
teller is behind wait in a bounded queue; past it, their telling is
dropped and logged.
"""

from __future__ import annotations

import logging
import os
import queue
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from taskq.client.request import mail_problem
from taskq.errors import CorruptFile
from taskq.notify import event, mail
from taskq.notify.event import Ended
from taskq.spool import journal
from taskq.spool.config import Notify
from taskq.spool.journal import Event
from taskq.spool.layout import Spool
from taskq.spool.runas import requester
from taskq.spool.task import TaskBody
from taskq.times.timespec import SECOND, format_duration

log = logging.getLogger("taskq")

BACKLOG = 10_000  # ended tasks waiting to be told, at most
TAIL = 4096  # bytes of a hook's (or sendmail's) output kept: its last line is what is told
MAIL_TIMEOUT = 30 * SECOND  # when [notify] sets none
# The hook's own stdout goes to its stderr: the wrapper's stdout carries only
# the exit status, which the daemon's loop (it reaps with waitpid(-1)) may
# otherwise take from subprocess.
_WRAPPER = '"$@" >&2; echo "$?"'


class Teller:
    """A thread that runs the notify hook and sends mail for each ended task."""

    def __init__(self, spool: Spool, notify: Notify | None, wall: Callable[[], int]) -> None:
        self.spool = spool
        self.notify = notify
        self.wall = wall
        self._queue: queue.Queue[Ended | tuple[dict[str, Any], TaskBody] | None] = queue.Queue(
            BACKLOG
        )
        self.thread = threading.Thread(target=self._run, name="taskq-teller", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # a daemon thread: it ends with the process

    def tell(self, ended: Ended) -> None:
        try:
            self._queue.put_nowait(ended)
        except queue.Full:
            log.warning("notify backlog full: not telling that %s %s", ended.name.id, ended.state)

    def tell_schedule(self, doc: dict[str, Any], template: TaskBody) -> None:
        """Tell of a schedule event (paused by its failures), as a failure of its task is told."""
        try:
            self._queue.put_nowait((doc, template))
        except queue.Full:
            log.warning("notify backlog full: not telling of schedule %s", doc.get("schedule"))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                if isinstance(item, Ended):
                    self.one(item)
                else:
                    self.schedule_event(*item)
            except Exception as e:  # one bad telling must not end the others
                log.warning("cannot tell %s: %s", item, e)

    def schedule_event(self, doc: dict[str, Any], template: TaskBody) -> None:
        """Run the hook (if it is told of failures) and mail whom the template's failures go to."""
        if self.notify is not None and "failed" in self.notify.on:
            self._hook(self.notify, doc)
        to = mail.recipient(template, "failed", None, os.getuid)
        if to is not None and (sendmail := find_sendmail()) is not None:
            msg = mail.schedule_message(doc, to)
            outcome = run_bounded([sendmail, "-t"], msg, MAIL_TIMEOUT)
            if outcome != "exit 0":
                log.warning("mail to %s about schedule %s: %s", to, doc["schedule"], outcome)

    def one(self, ended: Ended) -> None:
        """Run the hook and send mail for one ended task, as configured and asked."""
        body = ended.body or self._body(ended.path)
        to = (
            None
            if body is None
            else mail.recipient(
                body, ended.state, ended.reason, lambda: requester(body, _owner(ended.path))
            )
        )
        hook = self.notify if self.notify and ended.state in self.notify.on else None
        if to is None and hook is None:
            return
        log_dir = self.spool.log_dir(ended.name.id)
        now = self.wall()
        doc = event.build(ended, body, journal.read(log_dir), log_dir, now)
        told: dict[str, str] = {}
        if hook is not None:
            told["hook"] = self._hook(hook, doc)
        if to is not None:
            told["mail"] = self._mail(to, doc, hook.timeout if hook else MAIL_TIMEOUT)
        journal.append(log_dir, Event.TOLD, self.wall(), attempt=ended.name.attempt, **told)

    def _body(self, path: str) -> TaskBody | None:
        try:
            return self.spool.read_body(path)
        except (CorruptFile, OSError):
            return None  # moved on (retried, pruned): tell what we know

    def _hook(self, hook: Notify, doc: dict[str, Any]) -> str:
        data = (event.json_line(doc)).encode()
        outcome = run_bounded(list(hook.command), data, hook.timeout)
        if outcome != "exit 0":
            log.warning("notify hook for %s: %s", doc.get("id") or doc.get("schedule"), outcome)
        return outcome

    def _mail(self, to: str, doc: dict[str, object], timeout: int) -> str:
        problem = mail_problem(to)  # a body written by hand: submit refuses such a MAILTO
        if problem is not None:
            log.warning("not mailing about %s: MAILTO %s", doc["id"], problem)
            return f"not sent: MAILTO {problem}"
        sendmail = find_sendmail()
        if sendmail is None:
            log.warning("cannot mail %s about %s: no sendmail", to, doc["id"])
            return f"to {to}: no sendmail"
        msg = mail.message(doc, to, event.summary(doc))
        outcome = run_bounded([sendmail, "-t"], msg, timeout)
        if outcome != "exit 0":
            log.warning("mail to %s about %s: sendmail %s", to, doc["id"], outcome)
        return f"to {to}: {outcome}"


def _owner(path: str) -> int:
    """The uid that owns a task file; ours if it is gone."""
    try:
        return os.stat(path).st_uid
    except OSError:
        return os.getuid()


def find_sendmail() -> str | None:
    """The first sendmail on the daemon's PATH, else where MTAs put it."""
    path = os.environ.get("PATH", os.defpath) + ":/usr/sbin:/usr/lib"
    return shutil.which("sendmail", path=path)


def run_bounded(argv: list[str], data: bytes, timeout: int) -> str:
    """Run argv with data on stdin in a new session; kill the session after timeout.

    Returns "exit N", "killed by signal N", "timed out after D (killed)" or
    "cannot run: ...", with the last line of its output when it failed.
    """
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", _WRAPPER, "taskq-notify", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd="/",
        )
    except OSError as e:
        return f"cannot run: {e}"
    outputs = _exchange(proc, data, time.monotonic() + timeout / SECOND)
    if outputs is None:
        _kill_session(proc)
        return f"timed out after {format_duration(timeout)} (killed)"
    out, err = outputs
    _reap(proc)
    status = out.decode(errors="replace").strip()
    result = f"exit {status}" if status.isdigit() else "killed"
    last = err.decode(errors="replace").strip().splitlines()[-1:]
    return result if result == "exit 0" or not last else f"{result}: {last[0][:200]}"


def _exchange(
    proc: subprocess.Popen[bytes], data: bytes, deadline: float
) -> tuple[bytes, bytes] | None:
    """Feed data to stdin; keep the last TAIL bytes of stdout and stderr; None at the deadline.

    communicate() would keep all of it: a hook that wrote 400 MB took the
    daemon from 31 MB to 2.6 GB, for a last line.
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    tails = {proc.stdout.fileno(): b"", proc.stderr.fileno(): b""}
    view, stdin = memoryview(data), proc.stdin.fileno()
    with selectors.DefaultSelector() as sel:
        for fd in tails:
            sel.register(fd, selectors.EVENT_READ)
        if view:
            os.set_blocking(stdin, False)
            sel.register(stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for key, _ in sel.select(left):
                fd = key.fd
                if fd == stdin:
                    view = _feed(stdin, view)
                    if not view:
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    tails[fd] = (tails[fd] + chunk)[-TAIL:]
                else:
                    sel.unregister(fd)
    return tails[proc.stdout.fileno()], tails[proc.stderr.fileno()]


def _feed(fd: int, view: memoryview) -> memoryview:
    """Write what the pipe takes now; all is written (or the hook stopped reading): empty."""
    try:
        return view[os.write(fd, view) :]
    except BlockingIOError:
        return view
    except OSError:  # EPIPE: the hook does not read its event; its status still counts
        return view[:0]


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    _reap(proc)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for the wrapper; the loop may have reaped it first (its waitpid(-1))."""
    try:
        proc.wait(5)
    except (subprocess.TimeoutExpired, ChildProcessError):
        pass
