"""`taskq top` through a real terminal: tmux runs it, send-keys types, capture-pane reads.

What the screen says is checked against `taskq ls --json` and
`taskq stats --json` of the same spool. Each test runs its own tmux server
(a socket in tmp_path) and kills only that server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, until, wait_for

from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]
TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux (Debian package tmux) is missing")
ID = r"[0-9A-HJKMNP-TV-Z]{26}"


class Screen:
    """taskq top in a detached tmux session of our own server."""

    def __init__(self, tmp_path: Path, tq: Taskq, *args: str, height: int = 60) -> None:
        self.socket = str(tmp_path / "tmux.sock")
        argv = shlex.join(["env", f"TASKQ_SPOOL={tq.spool}", *TASKQ, "top", *args])
        # The session ends with top; the shell after it keeps the last screen readable.
        command = (
            f"{argv} 2>{shlex.quote(str(tmp_path / 'top.err'))}; echo top-exited-$?; sleep 600"
        )
        self.tmux("new-session", "-d", "-x", "160", "-y", str(height), command)

    def tmux(self, *args: str) -> str:
        assert TMUX is not None
        done = subprocess.run(
            [TMUX, "-S", self.socket, *args], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def text(self) -> str:
        return self.tmux("capture-pane", "-p")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def wait(self, predicate: Callable[[str], bool], what: str, timeout: float = 30) -> str:
        def seen() -> str | None:
            text = self.text()
            return text if predicate(text) else None

        return str(wait_for(seen, timeout, what))

    def frame_after(self, stamp: str, timeout: float = 60) -> str:
        """The first whole frame drawn after the one whose header says stamp.

        Whole: the same in two captures in a row, so that no capture made while
        tmux was still drawing it (rows half rewritten on a loaded machine)
        is read as the frame.
        """

        def settled() -> str | None:
            text = self.text()
            if _header_time(text) in ("", stamp) or "RECENT FAILURES" not in text:
                return None
            return text if self.text() == text else None

        return str(wait_for(settled, timeout, "a redraw"))

    def close(self) -> None:
        subprocess.run([str(TMUX), "-S", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def screens(tmp_path: Path) -> Iterator[list[Screen]]:
    made: list[Screen] = []
    yield made
    for screen in made:
        screen.close()


def _header_time(text: str) -> str:
    m = re.search(r"taskq top .* (\d{4}-\d\d-\d\dT[\d:.]+Z)", text)
    return m.group(1) if m else ""


def _epoch(iso: str) -> float:
    return parse_when(iso, 0) / 1e6


def section(text: str, title: str) -> list[str]:
    """The lines of a section, from its title to the next title (a line with no indent)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    out = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):
            break
        out.append(line)
    return out


def ids_in(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := re.match(rf"\s+({ID})\s", line))]


def ls_json(tq: Taskq, *args: str) -> list[dict[str, object]]:
    out = tq.run("ls", "--json", *args).stdout.decode()
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.slow
def test_top_shows_running_due_backlog_and_failures_as_ls_does(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path, screens: list[Screen]
) -> None:
    gate = tmp_path / "gate"
    start_daemon("--workers", "2")
    tq.wait_state(tq.submit("--", "true"), ("done",))
    failed = tq.submit("--max-attempts", "1", "--", "sh", "-c", "exit 7")
    tq.wait_state(failed, ("failed",))
    running = [tq.submit("--queue", "slow", "--", "sh", "-c", f"true {until(gate)}") for _ in "ab"]
    for task_id in running:
        tq.wait_state(task_id, ("running",))
    behind = [tq.submit("--queue", "mail", "--", "printf", "\x1b[2J") for _ in range(3)]
    later = [tq.submit("--in", f"{n}h", "--", "echo", str(n)) for n in (1, 2)]

    screen = Screen(tmp_path, tq)
    screens.append(screen)
    text = screen.wait(lambda t: "RECENT FAILURES" in t and failed in t, "the first frame")
    assert sorted(ids_in(section(text, "RUNNING"))) == sorted(
        str(r["id"]) for r in ls_json(tq, "--state", "running")
    )
    assert sorted(ids_in(section(text, "RUNNING"))) == sorted(running)
    assert "DUE NEXT (overdue backlog: 3)" in text
    assert ids_in(section(text, "DUE NEXT")) == later  # by run_at
    assert re.search(r"^mail\s+3\s+3\s", text, re.M), text
    assert re.search(rf"^\s+{failed}\s+default\s+\S+\s+7\s+sh -c 'exit 7'", text, re.M), text
    assert "\x1b" not in text and not any(b in text for b in behind)  # overdue: counted only
    # The done task's start; the failed one is not done, so its start is not counted.
    assert "LATENESS of the last 1 done tasks' starts (1)" in text
    assert re.search(r"dispatching; clock uncertainty", text)
    gate.touch()


@pytest.mark.slow
def test_keys_filter_show_and_cancel(tq: Taskq, tmp_path: Path, screens: list[Screen]) -> None:
    mail = tq.submit("--queue", "mail", "--in", "1h", "--", "echo", "mail")
    other = tq.submit("--in", "2h", "--", "echo", "other")
    screen = Screen(tmp_path, tq, "--interval", "500ms")
    screens.append(screen)
    screen.wait(lambda t: mail in t and other in t, "both tasks")

    screen.keys("/")
    screen.wait(lambda t: "queues (space between; empty: all):" in t, "the filter prompt")
    screen.keys("mail", "Enter")
    text = screen.wait(lambda t: "queues: mail" in t and other not in t, "the filtered view")
    assert mail in text

    screen.keys("Enter")  # the selected line: the first task shown, mail's
    text = screen.wait(lambda t: "command:   echo mail" in t, "the show window")
    assert f"id:        {mail}" in text
    screen.keys("Escape")
    screen.wait(lambda t: "command:   echo mail" not in t, "the view again")

    screen.keys("c")
    screen.wait(lambda t: f"cancel {mail}? y/n" in t, "the question")
    screen.keys("y")
    screen.wait(lambda t: f"cancelled {mail}" in t, "the answer")
    # Its bucket, one after now's minute, is counted again (livecounts): mail waits no more.
    screen.wait(lambda t: re.search(r"^mail\s+0\s+0\s", t, re.M) is not None, "mail's count")
    assert tq.state(mail) == "cancelled"
    assert tq.state(other) == "pending"

    screen.keys("q")
    screen.wait(lambda t: "top-exited-0" in t, "top to quit")


@pytest.mark.slow
def test_top_refuses_without_a_terminal(tq: Taskq) -> None:
    tq.run("submit", "--", "true")
    done = tq.run("top", input=b"", check=False)
    assert done.returncode == 2
    assert done.stderr.decode() == (
        "taskq: taskq top needs a terminal (try taskq stats or taskq ls)\n"
    )


@pytest.mark.slow
def test_a_hundred_thousand_pending_and_sixteen_running(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path, screens: list[Screen]
) -> None:
    gate = tmp_path / "gate"
    start_daemon("--workers", "16")
    line = json.dumps({"command": ["sh", "-c", f"true {until(gate)}"]}) + "\n"
    running = tq.run("submit", "--batch", "-", input=(line * 16).encode()).stdout.decode().split()
    wait_for(lambda: {tq.states()[t] for t in running} == {"running"}, 60, "16 running")
    now = time.time()
    # 5,000 overdue (the 16 workers are busy, so they stay so), 95,000 over the next days,
    # from an hour on: the submission may take many minutes on a loaded machine.
    lines = [
        json.dumps({"command": ["true"], "run_at": f"@{now - 3600 + n * 0.5:.3f}"})
        for n in range(5000)
    ] + [
        json.dumps({"command": ["true"], "queue": f"q{n % 4}", "run_at": f"@{now + 3600 + n * 3}"})
        for n in range(95_000)
    ]
    batch = tmp_path / "batch"
    batch.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    # Not Taskq.run: its minute is too short for 100,000 tasks on a loaded machine.
    ids = subprocess.run([*TASKQ, "submit", "--batch", str(batch)], env=env, check=True,
                         capture_output=True, timeout=900).stdout.decode().split()  # fmt: skip
    buckets = list((tq.spool / "pending").iterdir())
    assert len(ids) == sum(len(os.listdir(b)) for b in buckets) == 100_000

    screen = Screen(tmp_path, tq, "--interval", "1s")
    screens.append(screen)
    first = screen.wait(lambda t: "RECENT FAILURES" in t, "the first frame", timeout=120)
    text = screen.frame_after(_header_time(first))  # the cache of counts is warm now
    shown = _header_time(text)
    assert sorted(ids_in(section(text, "RUNNING"))) == sorted(
        str(r["id"]) for r in ls_json(tq, "--state", "running")
    )
    assert sorted(ids_in(section(text, "RUNNING"))) == sorted(running)
    # The lines' run times rise with their order: the first 5,000 are past, then an hour off.
    assert now - 3600 + 5000 * 0.5 < _epoch(shown) < now + 3600
    assert "DUE NEXT (overdue backlog: 5000)" in text
    assert ids_in(section(text, "DUE NEXT")) == ids[5000:5010]
    assert re.search(r"^q0\s+23750\s+0\s", text, re.M), text
    took = re.search(r"refreshed in (\d+\.\d+)s", text)
    assert took is not None  # the figure itself is bench/top.py's to judge
    gate.touch()
