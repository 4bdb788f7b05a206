"""`taskq top`: the command, and its urwid application (the frame, the keys, the redraw timer).

Only widgets and calls that urwid has had since 2.1 (Debian 12's
python3-urwid) are used. A redraw keeps the selected task selected if it
is still shown; the show window and the cancel question stay up across
redraws.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import urwid

from taskq.cli.params import POSITIVE_DURATION, PlainHelp
from taskq.cli.top import KEYS, Line, describe_task, header, lines, timed
from taskq.client import operations
from taskq.errors import BadInput, TaskqError
from taskq.observe.livecounts import LiveCounts
from taskq.observe.top import Picture, gather
from taskq.spool.defaults import default_host_id
from taskq.spool.layout import Spool
from taskq.spool.states import State
from taskq.spool.task import check_queue
from taskq.times.clock import wall_us
from taskq.times.timespec import SECOND

# A redraw waits at least this many times as long as the last gathering took,
# so top spends at most a fifth of a core on a spool too large to count in
# a fraction of --interval (bench/top.py: 0.3 s at 100,000 tasks, seconds at
# a million on a loaded machine).
PACE = 4


def next_redraw(interval: float, took: float) -> float:
    """Seconds until the next redraw: --interval, or longer after a slow gathering."""
    return max(interval, PACE * took)


PALETTE = [
    ("head", "bold", ""),
    ("bad", "light red", ""),
    ("focus", "standout", ""),
    ("title", "standout", ""),
]


class _Row(urwid.Text):
    """A line that can be selected (it names a task)."""

    _selectable = True

    def keypress(self, size: tuple[()] | tuple[int] | tuple[int, int], key: str) -> str | None:
        return key


class TopApp:
    """One `taskq top` session on one spool."""

    def __init__(self, spool: Spool, queues: frozenset[str], interval: float) -> None:
        self.spool, self.queues, self.interval = spool, queues, interval
        self.live = LiveCounts(spool)
        self.host = default_host_id()
        self.title = urwid.Text("")
        self.walker: Any = urwid.SimpleFocusListWalker([])
        self.body = urwid.ListBox(self.walker)
        self.status = urwid.Text(KEYS)
        self.prompt = urwid.Edit("queues (space between; empty: all): ")
        self.frame: urwid.Frame[Any, Any, Any] = urwid.Frame(
            self.body, header=urwid.AttrMap(self.title, "title"), footer=self.status
        )
        self.mode = "view"  # or "filter", "confirm" (a cancel), "show"
        self.pending_cancel: str | None = None
        self.ids: list[str | None] = []  # the task each line names, by line
        self.loop = urwid.MainLoop(self.frame, PALETTE, unhandled_input=self.key)
        self.took = 0.0  # how long the last gathering took (s)

    def run(self) -> None:
        self.refresh()
        self.loop.set_alarm_in(next_redraw(self.interval, self.took), self._tick)
        self.loop.run()

    def _tick(self, loop: Any, _data: Any) -> None:
        self.refresh()
        loop.set_alarm_in(next_redraw(self.interval, self.took), self._tick)

    # -- drawing -------------------------------------------------------

    def picture(self) -> Picture:
        return gather(self.spool, wall_us(), self.host, self.queues, self.live)

    def refresh(self) -> None:
        """Gather the spool again and rebuild the lines, keeping the selection."""
        picture, took = timed(self.picture)
        self.took = took
        self.title.set_text(header(self.spool.root, picture, self.queues, took))
        selected = self._selected()
        drawn = lines(picture)
        self.ids = [task_id for _, _, task_id in drawn]
        self.walker[:] = [self._widget(line) for line in drawn]
        if selected in self.ids:
            self.walker.set_focus(self.ids.index(selected))
        elif (first := next((i for i, t in enumerate(self.ids) if t), None)) is not None:
            self.walker.set_focus(first)

    def _widget(self, line: Line) -> urwid.Widget:
        style, text, task_id = line
        if task_id is None:
            return urwid.AttrMap(urwid.Text(text, wrap="clip"), style or None)
        return urwid.AttrMap(_Row(text, wrap="clip"), style or None, focus_map="focus")

    def _selected(self) -> str | None:
        """The id of the selected line's task, if it names one."""
        if not self.ids:
            return None
        _, position = self.walker.get_focus()
        return self.ids[position] if isinstance(position, int) else None

    def say(self, text: str) -> None:
        self.status.set_text(text)

    # -- keys ------------------------------------------------------------

    def key(self, key: Any) -> None:
        if not isinstance(key, str):
            return  # a mouse event
        handler = {"filter": self._filter_key, "confirm": self._confirm_key}.get(self.mode)
        if handler is not None:
            handler(key)
        elif self.mode == "show":
            if key in ("esc", "q", "enter", " "):
                self.loop.widget, self.mode = self.frame, "view"
        else:
            self._view_key(key)

    def _view_key(self, key: str) -> None:
        if key in ("q", "Q"):
            raise urwid.ExitMainLoop()
        if key == "r":
            self.refresh()
        elif key in ("/", "f"):
            self.mode = "filter"
            shown = " ".join(sorted(self.queues))
            self.prompt.set_edit_text(shown)
            self.frame.footer = self.prompt
            self.frame.focus_position = "footer"
        elif key == "enter" and (task_id := self._selected()) is not None:
            self._show(task_id)
        elif key == "c" and (task_id := self._selected()) is not None:
            self.mode, self.pending_cancel = "confirm", task_id
            self.say(f"cancel {task_id}? y/n")

    def _filter_key(self, key: str) -> None:
        if key not in ("enter", "esc"):
            return
        self.frame.footer, self.mode = self.status, "view"
        self.frame.focus_position = "body"
        if key == "esc":
            return
        try:
            self.queues = frozenset(check_queue(q) for q in self.prompt.get_edit_text().split())
        except TaskqError as e:
            self.say(f"{e}  ({KEYS})")
            return
        self.say(KEYS)
        self.refresh()

    def _confirm_key(self, key: str) -> None:
        task_id, self.pending_cancel, self.mode = self.pending_cancel, None, "view"
        if key not in ("y", "Y") or task_id is None:
            self.say(KEYS)
            return
        try:
            found = operations.cancel(self.spool, task_id)
        except (TaskqError, OSError) as e:
            self.say(f"cannot cancel {task_id}: {e}")
            return
        running = found.state in (State.RUNNING, State.CANCELLING)
        self.say(f"{'cancelling' if running else 'cancelled'} {found.name.id}")
        self.refresh()

    def _show(self, task_id: str) -> None:
        text = describe_task(self.spool, task_id) + "\n\n(esc, q or enter: back)"
        window = urwid.LineBox(urwid.Filler(urwid.Text(text), valign="top"), title=task_id)
        self.loop.widget = urwid.Overlay(
            window, self.frame, "center", ("relative", 90), "middle", ("relative", 80)
        )
        self.mode = "show"


@click.command(cls=PlainHelp, name="top")
@click.option(
    "--interval",
    type=POSITIVE_DURATION,
    default="2s",
    show_default=True,
    metavar="DURATION",
    help="Redraw this often (or less often: at least 4 times the last redraw's time).",
)
@click.option("--queue", "queues", multiple=True, help="Show only this queue's tasks (repeatable).")
@click.pass_context
def top_command(ctx: click.Context, interval: int, queues: tuple[str, ...]) -> None:
    """A live view: running attempts, what is due next, queues, lateness, daemons, failures."""
    if sys.stdin is None or sys.stdout is None or not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput("taskq top needs a terminal (try taskq stats or taskq ls)")
    spool = Spool(ctx.obj["spool"])
    if not os.path.isdir(spool.root):
        raise BadInput(f"no spool at {spool.root}")
    TopApp(spool, frozenset(check_queue(q) for q in queues), interval / SECOND).run()
