"""What wakes the daemon's loop: signals, the doorbell, the drop, children, and time.

Signal handlers only set flags and write to a self-pipe (Python's wakeup
fd); the loop does the work. Submitters on this host touch the doorbell,
and members of a shared spool put files in drop/ (they may not touch the
doorbell); inotify (through watchdog) turns either into a byte on a pipe.
Submitters on other hosts of a shared filesystem are invisible to inotify,
so the loop also stats the doorbell and drop/ every `poll` interval and
treats a changed stamp as a ring: a stat or two, not a rescan, per
interval. A filesystem that stamps whole seconds (MooseFS) shows no change
for a second ring within the second of the first, so for a second (and
STAMP_LAG) after a whole-second stamp is first seen, every poll counts as
a ring. Other
descriptors (pidfds of adopted attempts) can be registered to wake the
loop too.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
from collections.abc import Callable
from typing import Any

import watchdog.events
from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from taskq.times.clock import STAMP_LAG
from taskq.times.timespec import SECOND

_Stamp = tuple[tuple[int, int, int] | None, ...]

log = logging.getLogger("taskq")


class Wakeups:
    """The loop's one place to sleep, and the flags that signals set."""

    def __init__(
        self, doorbell: str, poll: int, mono: Callable[[], int], drop: str | None = None
    ) -> None:
        self.doorbell = doorbell
        self.drop = drop  # a shared spool's drop/, watched and polled as the doorbell is
        self.poll = poll  # µs between doorbell stats; 0 turns polling off
        self.mono = mono
        self.stop_requested = False
        self.hup = False
        self.continued = 0  # SIGCONTs seen: the process was stopped, then let go on
        self.sel = selectors.DefaultSelector()
        self._bell_w = -1
        self._stamp = self._bell_stamp()
        self._seen = mono()  # when the stamp was first seen
        self._next_poll = 0
        self._observer: Any = None

    def install(self) -> None:
        """Route signals and the doorbell to the selector."""
        sig_r, sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        bell_r, self._bell_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(sig_w, warn_on_full_buffer=False)
        self.sel.register(sig_r, selectors.EVENT_READ, "signal")
        self.sel.register(bell_r, selectors.EVENT_READ, "doorbell")
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        signal.signal(signal.SIGCONT, self._on_cont)
        self._observer = _watch(self.doorbell, self._bell_w, self.drop)

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()

    def rewatch(self) -> None:
        """Watch the doorbell's directory afresh: the spool was made again, the old one is gone."""
        self.close()
        self._observer = _watch(self.doorbell, self._bell_w, self.drop)

    def _on_hup(self, signum: int, _frame: Any) -> None:
        self.hup = True

    def _on_cont(self, signum: int, _frame: Any) -> None:
        self.continued += 1

    def _on_stop(self, signum: int, _frame: Any) -> None:
        self.stop_requested = True

    def watch(self, fd: int, key: object) -> None:
        """Wake the loop when fd becomes readable (a pidfd: its process ended)."""
        self.sel.register(fd, selectors.EVENT_READ, key)

    def unwatch(self, fd: int) -> None:
        self.sel.unregister(fd)

    def wait(self, timeout: float) -> tuple[bool, list[object]]:
        """Sleep up to timeout seconds; return (doorbell rang, other keys ready).

        Polls of the doorbell that find it unchanged do not end the sleep, so
        an idle daemon costs one open() and fstat() per poll, not a loop turn.
        """
        began = self.mono()
        deadline = began + round(timeout * SECOND)
        while True:
            left = max(0, deadline - self.mono())
            if self.poll > 0:
                left = min(left, max(0, self._next_poll - self.mono()))
            rang, ready = self._select(left / SECOND)
            rang = self._polled() or rang
            now = self.mono()
            # A monotonic clock that went back (it must not; libfaketime and some
            # VMs do) ends the sleep too: the loop re-arms its timers.
            if rang or ready or self.stop_requested or self.hup or not began <= now < deadline:
                return rang, ready

    def _select(self, timeout: float) -> tuple[bool, list[object]]:
        rang, ready, woke = False, [], False
        for key, _ in self.sel.select(timeout):
            woke = True
            if key.data == "doorbell" or key.data == "signal":
                _drain(key.fd)
                rang = rang or key.data == "doorbell"
            else:
                ready.append(key.data)
        if woke and not (rang or ready):
            ready.append("signal")  # a signal (SIGCHLD): the loop has work
        return rang, ready

    def _polled(self) -> bool:
        """Stat the doorbell if it is time: another host's submitter may have rung it."""
        if self.poll <= 0 or self.mono() < self._next_poll:
            return False
        self._next_poll = self.mono() + self.poll
        stamp = self._bell_stamp()
        if stamp != self._stamp:
            self._stamp, self._seen = stamp, self.mono()
            return True
        # Rings later in the second of a whole-second stamp leave it as it is; that
        # second ends within a second (and the stamp's lag) of our first sight of it.
        return _whole_seconds(stamp) and self.mono() < self._seen + SECOND + STAMP_LAG

    def _bell_stamp(self) -> _Stamp:
        if self.drop is None:
            return (_stamp(self.doorbell),)
        return _stamp(self.doorbell), _stamp(self.drop)


def _stamp(path: str) -> tuple[int, int, int] | None:
    """A file's or directory's identity and change times (a new entry changes a directory's).

    open()+fstat() rather than stat(): an NFS client revalidates its cached
    attributes on open (close-to-open consistency).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _whole_seconds(stamp: _Stamp) -> bool:
    found = [s for s in stamp if s is not None]
    return bool(found) and all(s[1] % 10**9 == 0 and s[2] % 10**9 == 0 for s in found)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


_NOT_A_RING = frozenset({"opened", "closed", "closed_no_write"})


def _schedule(observer: Any, handler: Any, directory: str, events: list[Any]) -> None:
    """Watch a directory for these events only, where watchdog can filter (4.0 and later)."""
    try:
        observer.schedule(handler, directory, recursive=False, event_filter=events)
    except TypeError:  # watchdog before 4.0 (Debian 12 has 2.2) has no event_filter
        observer.schedule(handler, directory, recursive=False)


def _watch(bell: str, wake_fd: int, drop: str | None) -> Any:
    """Write to wake_fd when the doorbell is touched, or a drop file is put, on this host.

    (inotify, via watchdog.) In drop/ a member's file arrives by a rename
    from NAME.part, which is what counts; the .part's creation does not.
    """

    def ring() -> None:
        try:
            os.write(wake_fd, b"!")
        except BlockingIOError:
            pass  # the loop has a wake-up pending already

    class Bell(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            # Opening and closing it (our own polling does) is not a ring.
            if event.event_type not in _NOT_A_RING and os.fsdecode(event.src_path) == bell:
                ring()

    class Drop(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            arrived = os.fsdecode(getattr(event, "dest_path", "") or event.src_path)
            if event.event_type in ("created", "moved") and not arrived.endswith(".part"):
                ring()

    observer = Observer()
    observer.daemon = True
    # Only what a ring does: created, touched (attrib or modified), moved in.
    # Without the filter inotify would also report opens and closes, and our
    # own doorbell polling would cost the watching thread a wake-up each time.
    rings: list[type[FileSystemEvent]] = [
        FileCreatedEvent,
        FileModifiedEvent,
        FileMovedEvent,
        FileClosedEvent,
    ]
    if (attrib := getattr(watchdog.events, "FileAttribEvent", None)) is not None:
        rings.append(attrib)  # touch(1), utime(): watchdog 5 and later report them so
    _schedule(observer, Bell(), os.path.dirname(bell), rings)
    if drop is not None:
        try:
            _schedule(observer, Drop(), drop, [FileCreatedEvent, FileMovedEvent])
        except OSError as e:
            log.warning("cannot watch %s (%s); relying on polling and rescans", drop, e)
    try:
        observer.start()
    except OSError as e:
        log.warning("cannot watch the doorbell (%s); relying on polling and rescans", e)
        return None
    return observer
