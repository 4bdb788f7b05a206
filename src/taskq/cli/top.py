"""`taskq top`'s lines: a live terminal view of a spool, as text, drawn by topapp.py.

The picture comes from observe.top (the spool read as `taskq stats` and
`taskq ls` read it); this module turns it into lines, and topapp.py (the
command and urwid's loop) redraws them every --interval, with keys to
filter by queue, to show a task and to cancel one. urwid, not rich or
textual: it reads keys and runs its own loop (rich only draws), and
Debian 12 packages it (python3-urwid 2.1.2), which its taskq package may
depend on; its textual is 0.1.13.

Everything a line shows that came from the spool (commands, queue and
host names, a daemon's record) passes through text.quote first: a command
holding terminal escapes must not repaint the operator's screen.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from taskq.cli.render import describe, detail
from taskq.errors import TaskqError
from taskq.observe.top import LATENESS_BARS, Picture, Task, running_for
from taskq.spool import byid, journal
from taskq.spool.layout import Spool
from taskq.text.quote import quote
from taskq.times.timespec import SECOND, format_duration, format_iso

Line = tuple[str, str, str | None]  # (style, text, task id it selects or None)
KEYS = "q quit  / filter by queue  up/down select  enter show  c cancel  r refresh"


def _bound(seconds: float) -> str:
    """A bar's bound: 1ms, 100ms, 10s, 1m."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s" if seconds < 60 else f"{seconds / 60:g}m"


_BAR_NAMES = [*(f"<{_bound(b)}" for b in LATENESS_BARS), f">={_bound(LATENESS_BARS[-1])}"]


def _safe(text: object) -> str:
    """Spool text for the terminal, as every taskq output shows it (text.quote)."""
    return quote(str(text))


def _command(task: Task) -> str:
    if task.command is None:
        return "?"
    return _safe(shlex.join(task.command))


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(round(seconds * SECOND))


def _instant(us: int) -> str:
    return format_iso(us)[:23] + "Z"  # to the millisecond


def header(spool_root: str, picture: Picture, queues: frozenset[str], took: float) -> str:
    shown = ",".join(sorted(queues)) if queues else "all"
    return (
        f"taskq top  {_safe(spool_root)}  {_instant(picture.now)}  queues: {_safe(shown)}"
        f"  refreshed in {took:.3f}s"
    )


def lines(picture: Picture) -> list[Line]:
    """The body of a frame, top to bottom."""
    out: list[Line] = []
    out += _daemon_lines(picture)
    out += _queue_lines(picture)
    out += _running_lines(picture)
    out += _due_lines(picture)
    out += _lateness_lines(picture)
    out += _failure_lines(picture)
    return out


def _daemon_lines(picture: Picture) -> list[Line]:
    out: list[Line] = [("head", f"DAEMONS {len(picture.daemons)}", None)]
    for r in picture.daemons:
        if r.get("alive") is False:
            state = "NOT running (stale record)"
        elif r.get("dispatching") is True:
            state = "dispatching"
        else:
            state = f"NOT dispatching ({_safe(r.get('reason'))})"
        style = "" if state == "dispatching" else "bad"
        text = (
            f"  {_safe(r.get('owner')):<24} {state}; clock uncertainty "
            f"{_number(r.get('uncertainty'))}s (max {_safe(r.get('max_uncertainty'))}s); "
            f"{_safe(r.get('busy'))}/{_safe(r.get('workers'))} busy; "
            f"updated {_safe(r.get('updated_at'))}"
        )
        out.append((style, text, None))
    for p in picture.paused:
        until = "until resumed" if p.get("until") is None else f"until {_safe(p.get('until'))}"
        out.append(("bad", f"  paused: queue {_safe(p.get('queue'))} {until}", None))
    return out


def _number(value: object) -> str:
    return f"{value:.6f}" if isinstance(value, int | float) else "?"


def _queue_lines(picture: Picture) -> list[Line]:
    out: list[Line] = [
        (
            "head",
            f"{'QUEUE':<20} {'PENDING':>9} {'OVERDUE':>9} {'OLDEST OVERDUE':>15} {'RUNNING':>8}",
            None,
        )
    ]
    for q in picture.queues:
        late = _ago(q.oldest_overdue) if q.overdue else "-"
        text = f"{_safe(q.name):<20} {q.pending:>9} {q.overdue:>9} {late:>15} {q.running:>8}"
        out.append(("bad" if q.overdue else "", text, None))
    if picture.counts_age:
        age = _ago(picture.counts_age)
        out.append(("", f"  (pending after this minute: counted up to {age} ago, in turns)", None))
    return out


def _running_lines(picture: Picture) -> list[Line]:
    more = picture.running_total - len(picture.running)
    title = f"RUNNING {picture.running_total}" + (f" ({more} not shown)" if more else "")
    out: list[Line] = [
        ("head", title, None),
        ("head", f"  {'ID':<26} {'STATE':<10} {'QUEUE':<12} {'FOR':>9} {'HOST':<16} COMMAND", None),
    ]
    for t in picture.running:
        took = running_for(t, picture.now)
        text = (
            f"  {t.id:<26} {t.state:<10} {_safe(t.queue):<12} {_ago(took):>9} "
            f"{_safe(t.host):<16} {_command(t)}"
        )
        out.append(("", text, t.id))
    return out


def _due_lines(picture: Picture) -> list[Line]:
    out: list[Line] = [
        ("head", f"DUE NEXT (overdue backlog: {picture.overdue_total})", None),
        ("head", f"  {'ID':<26} {'QUEUE':<12} {'RUN_AT':<24} {'IN':>9} COMMAND", None),
    ]
    for t in picture.due:
        wait = format_duration(max(0, t.run_at - picture.now))
        text = f"  {t.id:<26} {_safe(t.queue):<12} {_instant(t.run_at):<24} {wait:>9} "
        out.append(("", text + _command(t), t.id))
    return out


def _lateness_lines(picture: Picture) -> list[Line]:
    total = sum(picture.lateness)
    tasks = picture.lateness_tasks
    title = f"LATENESS of the last {tasks} done tasks' starts ({total})"
    out: list[Line] = [("head", title, None)]
    widest = max(picture.lateness, default=0) or 1
    for name, n in zip(_BAR_NAMES, picture.lateness, strict=True):
        bar = "#" * (round(40 * n / widest) if n else 0)
        out.append(("", f"  {name:>8} {bar:<40} {n}", None))
    return out


def _failure_lines(picture: Picture) -> list[Line]:
    out: list[Line] = [
        ("head", "RECENT FAILURES", None),
        ("head", f"  {'ID':<26} {'QUEUE':<12} {'RUN_AT':<24} {'EXIT':>4} COMMAND", None),
    ]
    for t in picture.failures:
        status = "?" if t.exit_status is None else str(t.exit_status)
        text = f"  {t.id:<26} {_safe(t.queue):<12} {_instant(t.run_at):<24} {status:>4} "
        out.append(("bad", text + _command(t), t.id))
    return out


def timed(gather: Callable[[], Picture]) -> tuple[Picture, float]:
    """A picture and the seconds it took to gather."""
    began = time.monotonic()
    picture = gather()
    return picture, time.monotonic() - began


def describe_task(spool: Spool, task_id: str) -> str:
    """What `taskq show ID` prints, for the show window (an error as one line)."""
    try:
        found, body = byid.load(spool, task_id)
        doc = detail(found, body, journal.read(spool.log_dir(found.name.id)))
        return "\n".join(_safe(line) for line in describe(doc).split("\n"))
    except (TaskqError, OSError) as e:
        return _safe(f"cannot show {task_id}: {e}")
