"""Waking `taskq wait` when tasks end: inotify on the end-state directories.

A task ends by a rename into done/DAY/, failed/ or cancelled/, and the new
name carries its id. An inotify watch (through watchdog) on those
directories hands the waiter the ids that arrived there on this host, so it
looks up only those at once. Ends made through another host's mount of a
shared filesystem are invisible to inotify, and a watch can miss a file
moved into a done/ day created a moment before; the waiter's periodic full
poll (every POLL_WATCHED, or POLL_UNWATCHED when no watch could be set)
finds those. A watch is a wake-up, never the answer: every id it names is
looked up before it is reported ended.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from taskq.spool.layout import Spool
from taskq.spool.task import TASK_NAME

POLL_WATCHED = 2.0  # seconds between full polls when inotify watches this host's ends
POLL_UNWATCHED = 0.5  # the longest pause between full polls without a watch


class EndWatch:
    """Ids seen arriving in an end state since the last take()."""

    def __init__(self, spool: Spool) -> None:
        self._arrived: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._observer: Any = None
        try:
            self._observer = self._start(spool)
        except (OSError, ImportError):
            self._observer = None

    @property
    def watching(self) -> bool:
        return self._observer is not None

    def _start(self, spool: Spool) -> Any:
        # watchdog only when a wait watches: not for ls, show or cancel (cli/tasks.py)
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        watch = self

        class Arrivals(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                path = getattr(event, "dest_path", "") or event.src_path
                watch.arrived(os.path.basename(os.fsdecode(path)))

        observer = Observer()
        observer.daemon = True
        for directory in (spool.failed, spool.cancelled):
            observer.schedule(Arrivals(), directory, recursive=False)
        observer.schedule(Arrivals(), spool.done, recursive=True)
        observer.start()
        return observer

    def arrived(self, entry: str) -> None:
        m = TASK_NAME.fullmatch(entry)
        if m is not None:
            with self._lock:
                self._arrived.add(m.group(2))
            self._wake.set()

    def take(self, timeout: float) -> set[str]:
        """Wait up to timeout for arrivals; return the ids that arrived (maybe none)."""
        self._wake.wait(timeout)
        with self._lock:
            self._wake.clear()
            ids, self._arrived = self._arrived, set()
        return ids

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
