"""The second hostile test: commands that never harm the host, never lie and never hang.

Regression tests for issue 29's findings, each through the real CLI or a
real daemon, in the issue's order. The daemon's path options (--pidfile,
--metrics-file, --log-file, the spool) are tests/faults/test_daemon_paths.py;
standard streams closed or full, tests/faults/test_fuzz_stdio.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, kill_all, kill_left, until, wait_for

from taskq.spool.task import TaskName, bucket_of
from taskq.times.timespec import MINUTE
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]


def one_line_error(proc: subprocess.CompletedProcess[bytes], status: int) -> str:
    text = proc.stderr.decode()
    assert proc.returncode == status, text
    assert text.startswith("taskq: ") and text.count("\n") == 1, text
    return text


# -- 6. only submit and daemon make a spool -----------------------------------


@pytest.mark.parametrize("argv", [["pause", "q1"], ["resume", "q1"]], ids=str)
def test_a_mistyped_spool_is_not_made_by_pause_or_resume(tmp_path: Path, argv: list[str]) -> None:
    tq = Taskq(tmp_path / "typo" / "spool")
    proc = tq.run(*argv, check=False)
    assert "no spool at" in one_line_error(proc, 3)
    assert not (tmp_path / "typo").exists()


# -- 15. standard input closed -------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["submit", "--stdin", "--", "cat"], ["submit", "--batch", "-"], ["at", "now"], ["batch"]],
    ids=str,
)
def test_a_closed_stdin_is_bad_input_not_a_traceback(tq: Taskq, argv: list[str]) -> None:
    tq.submit("--in", "1h", "--", "true")
    before = sorted(p.name for p in (tq.spool / "pending").rglob("*"))
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *TASKQ, *argv],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert "standard input is closed" in one_line_error(proc, 2)
    assert sorted(p.name for p in (tq.spool / "pending").rglob("*")) == before


def test_top_with_a_closed_stdin_is_bad_input_not_a_traceback(tq: Taskq) -> None:
    tq.submit("--in", "1h", "--", "true")
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *TASKQ, "top"], capture_output=True, env=env, timeout=60
    )
    assert "needs a terminal" in one_line_error(proc, 2)


def test_a_batch_without_newlines_is_refused_not_read_for_ever(tq: Taskq) -> None:
    """A stream with no end and no newline (a device, a runaway pipe) cannot fill memory."""
    proc = subprocess.Popen(
        [*TASKQ, "submit", "--batch", "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TASKQ_SPOOL": str(tq.spool)},
    )
    assert proc.stdin is not None and proc.stderr is not None
    chunk = b" " * (1 << 20)
    with contextlib.suppress(BrokenPipeError):  # it stopped reading: refused
        for _ in range(64):  # 64 MiB, past the longest line a task file can come from
            proc.stdin.write(chunk)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    with proc.stderr:
        assert b"batch line 1: longer than" in proc.stderr.read()
    assert proc.wait(60) == 2


# -- 13. wait ends for a task that can never end --------------------------------


def _waiting(tq: Taskq, task_id: str) -> subprocess.Popen[bytes]:
    """A `taskq wait` that has looked once and is watching for the task's end."""
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    waiter = subprocess.Popen(
        [*TASKQ, "wait", task_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )

    def watching() -> bool:  # its inotify watch is set up after its first look
        assert waiter.poll() is None, waiter.communicate()
        links = []
        for fd in Path(f"/proc/{waiter.pid}/fd").iterdir():
            try:
                links.append(os.readlink(fd))
            except FileNotFoundError:
                continue  # closed between the listing and the look
        return any("inotify" in link for link in links)

    wait_for(watching, 30, "the wait to begin")
    return waiter


@pytest.mark.slow
def test_a_wait_begun_before_its_task_is_quarantined_ends(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    task_id = tq.submit("--", "true")
    (path,) = (tq.spool / "pending").rglob(f"*{task_id}*")
    path.chmod(0o666)  # others could have rewritten it: the daemon must not run it
    waiter = _waiting(tq, task_id)
    try:
        start_daemon()
        out, err = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 3, err
    assert out.decode().startswith(f"{task_id} gone (quarantined: "), out
    assert "writable by group or others" in out.decode()
    fresh = tq.run("wait", task_id, check=False)
    assert fresh.returncode == 3  # as a wait begun after


@pytest.mark.slow
def test_a_wait_begun_before_its_task_is_removed_by_hand_ends(tq: Taskq) -> None:
    task_id = tq.submit("--in", "1h", "--", "true")
    (path,) = (tq.spool / "pending").rglob(f"*{task_id}*")
    waiter = _waiting(tq, task_id)
    try:
        path.unlink()
        out, err = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 3, err
    assert out.decode() == f"{task_id} gone (removed)\n"


# -- 11. no attempt past the last whose fencing token fits 64 bits --------------

LAST_ATTEMPT = 922_336


@pytest.mark.slow
def test_no_attempt_past_the_last_fencing_token_that_fits(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    fences = tmp_path / "fences"
    task_id = tq.submit(
        "--max-attempts", "2", "--", "sh", "-c", f'echo "$TASKQ_FENCE" >> {fences}; exit 1'
    )
    start_daemon("--retry-delay", "0")
    tq.wait_state(task_id, ("failed",), timeout=60)
    (path,) = (tq.spool / "failed").glob(f"*_{task_id}_2_*")
    path.rename(path.with_name(path.name.replace(f"_{task_id}_2_", f"_{task_id}_922335_")))
    proc = tq.run("retry", task_id)  # a fresh budget of 2, of which only one can be had
    assert f"as attempt {LAST_ATTEMPT} " in proc.stdout.decode()
    doc = wait_for(
        lambda: (d := tq.show(task_id))["state"] == "failed" and d["attempt"] == LAST_ATTEMPT and d,
        60,
        "the last attempt to fail",
    )
    dead = [r for r in doc["attempts"] if r["event"] == "dead"]
    assert dead[-1]["reason"] == f"attempt {LAST_ATTEMPT} is the last a task can have"
    refused = tq.run("retry", task_id, check=False)
    assert "the last a task can have" in one_line_error(refused, 4)
    assert tq.state(task_id) == "failed"
    tokens = [int(line) for line in fences.read_text().split()]
    assert len(tokens) == 3 and max(tokens) < 2**63


# -- 8. a MAILTO that cannot be a recipient --------------------------------------


def test_a_mailto_with_a_newline_is_refused_at_submit(tq: Taskq) -> None:
    proc = tq.run("submit", "--env", "MAILTO=ops\nBcc: x@example.org", "--", "true", check=False)
    assert "cannot be a mail recipient" in one_line_error(proc, 2)
    recorded = Taskq(tq.spool, env={"MAILTO": "ops\r\nBcc: x@example.org"})
    proc = recorded.run("submit", "--", "true", check=False)  # recorded from the environment
    assert "cannot be a mail recipient" in one_line_error(proc, 2)
    assert not (tq.spool / "pending").exists() or not list((tq.spool / "pending").rglob("*_*"))


@pytest.mark.slow
def test_a_hand_written_mailto_with_a_newline_is_journalled_as_not_sent(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "sendmail").write_text(f"#!/bin/sh\ncat >> {tmp_path / 'mailbox'}\n")
    (stubs / "sendmail").chmod(0o755)
    task_id = tq.submit("--in", "1h", "--mail", "always", "--env", "MAILTO=ops", "--", "true")
    (path,) = (tq.spool / "pending").rglob(f"*_{task_id}_*")
    doc = json.loads(path.read_text())
    doc["env"]["MAILTO"] = "ops\nBcc: x@example.org"  # as an operator's editor might leave it
    tmp = path.with_name("edited")
    tmp.write_text(json.dumps(doc))
    tmp.chmod(0o600)
    tmp.rename(path)
    tq.run("reschedule", task_id, "--in", "0")
    start_daemon(env={"PATH": f"{stubs}:{os.environ['PATH']}"})
    tq.wait_state(task_id, ("done",), timeout=60)
    told = wait_for(
        lambda: [r for r in tq.show(task_id)["attempts"] if r["event"] == "told"],
        30,
        "a told record",
    )
    assert told[0]["mail"].startswith("not sent: MAILTO cannot be a mail recipient"), told
    assert not (tmp_path / "mailbox").exists()


# -- 5. a retried dependency has not ended -----------------------------------------


@pytest.mark.slow
def test_tasks_after_a_retried_dependency_wait_for_its_new_end(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    gate = tmp_path / "gate"
    dep = tq.submit("--max-attempts", "1", "--", "false")
    other = tq.submit("--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    old = tq.submit("--after", f"{dep},{other}", "--after-any", "--", "true")
    start_daemon("--retry-delay", "0")
    tq.wait_state(dep, ("failed",), timeout=60)
    assert tq.state(old) == "waiting"  # for the other one: dep's failure is marked
    tq.run("retry", dep, "--in", "1h")
    new_any = tq.submit("--after", dep, "--after-any", "--", "true")
    new_ok = tq.submit("--after", dep, "--", "true")
    assert tq.state(new_any) == "waiting" and tq.state(new_ok) == "waiting"
    gate.touch()
    tq.wait_state(other, ("done",), timeout=60)
    assert tq.state(old) == "waiting"  # dep has not ended since its retry
    tq.run("reschedule", dep, "--in", "0")
    tq.wait_state(dep, ("failed",), timeout=60)
    for task_id in (old, new_any):
        tq.wait_state(task_id, ("done",), timeout=60)
    cancelled = tq.wait_state(new_ok, ("cancelled",), timeout=60)
    (record,) = [r for r in cancelled["attempts"] if r["event"] == "cancelled"]
    assert record["reason"] == f"dependency {dep} failed"


# -- 3. a hook's output is not kept whole ------------------------------------------


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_a_hook_that_prints_400_mb_costs_the_daemon_only_a_tail(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    hook = tmp_path / "hook.sh"
    hook.write_text(
        f"#!/bin/sh\ncat > {tmp_path}/event.json\n"
        "yes | head -c 400000000 >&2\necho the end >&2\nexit 3\n"
    )
    hook.chmod(0o755)
    tq.spool.mkdir(parents=True)
    (tq.spool / "config.toml").write_text(f'[notify]\ncommand = ["{hook}"]\ntimeout = "5m"\n')
    daemon = start_daemon()
    before = _peak_rss_kib(daemon.proc.pid)
    task_id = tq.submit("--", "true")
    told = wait_for(
        lambda: [r for r in tq.show(task_id)["attempts"] if r["event"] == "told"],
        240,
        "the hook to be told",
    )
    assert told[0]["hook"] == "exit 3: the end"
    grown = _peak_rss_kib(daemon.proc.pid) - before
    assert grown < 100_000, f"the daemon's peak RSS grew by {grown} KiB for a hook's output"


# -- 7. a task moved by hand into a later bucket starts late, from there ------------


@pytest.mark.slow
def test_a_task_moved_into_a_later_bucket_runs_from_there(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    task_id = tq.submit("--in", "2s", "--", "sh", "-c", f"date +%s.%N > {stamps}")
    (path,) = (tq.spool / "pending").rglob(f"*_{task_id}_*")
    later = tq.spool / "pending" / bucket_of(TaskName.parse(path.name).run_at + 2 * MINUTE)
    later.mkdir(mode=0o700)
    path.rename(later / path.name)  # an operator's hand move, or a restore from a backup
    start_daemon()
    doc = tq.wait_state(task_id, ("done",), timeout=60)
    assert list((tq.spool / "corrupt").iterdir()) == []
    started = float(stamps.read_text())
    assert started >= parse_when(doc["run_at"], 0) / 1e6  # never early


# -- 9. a spool made anew under a running daemon ------------------------------------


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (renameat2 RENAME_EXCHANGE): no moment without a spool."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        pytest.skip(f"renameat2(RENAME_EXCHANGE): {os.strerror(err)}")


def _alive(tq: Taskq) -> bool:
    records = json.loads(tq.run("status", "--json").stdout)
    return bool(records) and all(r["alive"] for r in records)


@pytest.mark.slow
def test_a_daemon_whose_spool_is_made_anew_locks_it_again_or_stops(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    tq.submit("--in", "1h", "--", "true")
    daemon = start_daemon("--clock-check", "500ms")
    wait_for(lambda: _alive(tq), 30, "the daemon's record")
    fresh = Taskq(tmp_path / "fresh")
    fresh.submit("--in", "1h", "--", "true")
    _exchange(tq.spool, fresh.spool)  # as `rm -rf SPOOL; taskq submit ...` leaves it
    wait_for(lambda: _alive(tq), 30, "taskq status to see the daemon alive")
    assert "locking again" in daemon.text()
    task_id = tq.submit("--", "true")
    tq.wait_state(task_id, ("done",), timeout=60)
    tq.spool.rename(tmp_path / "removed")  # as rm -rf, in one step
    assert daemon.proc.wait(60) == 1
    assert f"the spool {tq.spool} is gone: stopping" in daemon.text()


# -- 14. on time past a first bucket whose tasks cannot start -----------------------


HELD_BY = ("a pause", "its queue limit")


@pytest.mark.slow
def test_a_task_after_a_bucket_of_held_tasks_starts_on_time_not_at_the_rescan(
    tmp_path: Path,
) -> None:
    """The next bucket is loaded before its tasks can be due, not at the safety-net rescan.

    The bucket before it holds only a task that cannot start: its queue is
    paused, or at its limit with a long task running. Each case has a spool
    and a daemon of its own, side by side, since both wait on the same minutes.
    """
    now = round(time.time() * 1e6)
    first = (now // MINUTE + 1) * MINUTE
    if first - now < 15 * 1_000_000:  # time for both set-ups on a loaded machine
        first += MINUTE
    due = first + MINUTE + 1_000_000  # the minute after: a bucket the index has not loaded
    cases = {held_by: tmp_path / f"case{i}" for i, held_by in enumerate(HELD_BY)}
    daemons: list[Daemon] = []
    try:
        for held_by, root in cases.items():
            root.mkdir()
            tq = Taskq(root / "spool")
            daemons.append(_held_first(tq, root, held_by, first))
            tq.submit("--at", f"@{due / 1e6:.6f}", "--", "sh", "-c", f"date +%s.%N > {root}/s")
        for held_by, root in cases.items():  # a minute or two: wait on the stamp, not `show`
            stamp = root / "s"
            wait_for(partial(_stamped, stamp), 300, held_by)
            late = float(stamp.read_text()) - due / 1e6
            assert 0 <= late < 30, f"{held_by}: started {late:.3f}s after its run time"
    finally:
        for root in cases.values():
            (root / "gate").touch()
        kill_all(daemons)
        for root in cases.values():
            kill_left(root / "spool")


def _stamped(stamp: Path) -> bool:
    return stamp.exists() and bool(stamp.read_text().strip())


def _held_first(tq: Taskq, root: Path, held_by: str, first: int) -> Daemon:
    """Start a daemon (rescan 5 minutes) and file, due a second after `first`, a task
    of queue "held" that cannot start: held by a pause, or by its queue limit with a
    task running until root/gate exists."""
    daemon_args = ["--host-id", "testhost", "--rescan", "5m"]
    if held_by == "a pause":
        tq.submit("--in", "1h", "--", "true")  # the spool exists for pause
        tq.run("pause", "held")
        daemon = Daemon(tq, root / "daemon.log", *daemon_args)
    else:
        daemon = Daemon(tq, root / "daemon.log", *daemon_args, "--queue-limit", "held=1")
        gate = root / "gate"
        blocker = tq.submit("--queue", "held", "--", "sh", "-c", f"true {until(gate)}")
        tq.wait_state(blocker, ("running",))
    tq.submit("--queue", "held", "--at", f"@{(first + 1_000_000) / 1e6:.6f}", "--", "true")
    return daemon


# -- 12. state.json removed after retention freed its slots' keys --------------------


def epoch(iso: str) -> float:
    return parse_when(iso, 0) / 1e6


def _slots(stamps: Path) -> list[str]:
    return stamps.read_text().split() if stamps.exists() else []


@pytest.mark.slow
def test_removing_state_json_runs_no_slot_twice_after_retention(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    tq.run(
        "schedule", "add", "often", "--every", "1s", "--catchup", "all", "--overlap", "allow",
        "--", "sh", "-c", f'echo "$TASKQ_SCHEDULED_AT" >> {stamps}',
    )  # fmt: skip
    first = start_daemon()
    wait_for(lambda: len(_slots(stamps)) >= 4, 60, "four slots run")
    assert first.stop() == 0
    for day in os.listdir(tq.spool / "done"):  # as if its days had aged past --keep-done
        os.rename(tq.spool / "done" / day, tq.spool / "done" / f"2000010{len(day) % 9 + 1}")
    tq.run("gc")  # frees the keys of the slots run
    (tq.spool / "schedules" / "often" / "state.json").unlink()  # documented as safe
    ran = len(_slots(stamps))
    restarted = time.time()
    start_daemon(host="second")
    wait_for(
        lambda: any(epoch(s) > restarted + 2 for s in _slots(stamps)), 60, "runs after the restart"
    )
    slots = _slots(stamps)
    assert len(slots) > ran
    assert len(slots) == len(set(slots)), "a slot ran twice"


# -- 10. spool text shown as one line of printable text --------------------------

HOSTILE = "echo hi\nstate: done\x1b[2J\x07\rX\u202e\\n"
SHOWN = "sh -c 'echo hi\\nstate: done\\x1b[2J\\x07\\rX\\u202e\\\\n'"


def _printable_lines(text: str) -> list[str]:
    lines = text.splitlines()
    assert text.count("\n") == len(lines), repr(text)  # no \r, \v or \x1c.. breaking lines
    for line in lines:
        assert line.isprintable(), repr(line)
    return lines


def test_show_ls_and_schedule_show_print_commands_as_one_printable_line(tq: Taskq) -> None:
    task_id = tq.submit("--in", "1h", "--", "sh", "-c", HOSTILE)
    shown = _printable_lines(tq.run("show", task_id).stdout.decode())
    assert [line for line in shown if line.startswith("state:")] == ["state:     pending"]
    assert f"command:   {SHOWN}" in shown
    (listed,) = _printable_lines(tq.run("ls", "--state", "pending").stdout.decode())[1:]
    assert listed.endswith(f"  {SHOWN}"), listed
    tq.run("schedule", "add", "evil", "--every", "1h", "--", "sh", "-c", HOSTILE)
    described = _printable_lines(tq.run("schedule", "show", "evil").stdout.decode())
    assert f"command:   {SHOWN}" in described
    doc = json.loads(tq.run("show", "--json", task_id).stdout)
    assert doc["command"] == ["sh", "-c", HOSTILE]  # JSON is for programs: the text as it is


# -- 16, 17. rough edges --------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["schedule", "add", "s", "--cron", "0 3 * * *", "--tz", "Europe"], "not an IANA"),
        (["schedule", "add", "s", "--cron", "0 3 * * *", "--tz", "localtime"], "not an IANA"),
        (["schedule", "add", "s", "--cron", "0 3 * * *", "--tz", "posixrules"], "not an IANA"),
        (["submit", "--in", "\uff15m"], "bad duration"),  # a fullwidth 5
        (["submit", "--at", "\u0669:\u0660\u0660"], "bad time"),  # Arabic-Indic 9:00
        (["submit", "--max-attempts", "\uff13"], "not a whole number"),
        (["submit", "--priority", "-\uff13"], "not a whole number"),
        (["schedule", "add", "s", "--every", "1h", "--pause-after-failures", "\uff13"], "whole"),
        (["submit", "--in", "1m1m"], "each unit once"),
        (["submit", "--at", "9999-12-31T23:59:59.5Z"], "to 9999-12-31T23:59:59Z"),
        (["daemon", "--max-uncertainty", "0"], "must be more than --clock-margin"),
        (["daemon", "--metrics-listen", "::1:0"], "[::1]:9464"),
        (["daemon", "--workers", "\uff18"], "not a whole number"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else None,
)
def test_rough_edges_are_one_line_and_status_2(tq: Taskq, argv: list[str], says: str) -> None:
    tail = ["--", "true"] if argv[0] in ("submit", "schedule") else []
    proc = tq.run(*argv, *tail, check=False)
    assert says in one_line_error(proc, 2)
    assert not (tq.spool / "schedules").exists() or not os.listdir(tq.spool / "schedules")


def test_a_negative_priority_is_a_whole_number_too(tq: Taskq) -> None:
    task_id = tq.submit("--priority", "-5", "--in", "1h", "--", "true")
    assert tq.show(task_id)["priority"] == -5


def test_iso_times_take_either_letter_case(tq: Taskq) -> None:
    for text in ("2030-06-01t09:00:00z", "2030-06-01T09:00:00z", "2030-06-01t09:00:00Z"):
        doc = json.loads(tq.run("submit", "--json", "--at", text, "--", "true").stdout)
        assert doc["run_at"] == "2030-06-01T09:00:00.000000Z"


def test_pause_and_resume_name_a_queue_once(tq: Taskq) -> None:
    tq.submit("--in", "1h", "--", "true")
    assert tq.run("pause", "q1", "q1").stdout == b"paused q1 until resumed\n"
    assert tq.run("resume", "q1", "q1").stdout == b"resumed q1\n"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"command": ["true"], "queue": "a", "queue": "b"}', "field 'queue' given twice"),
        (b'{"command": ["true"], "env": {"A": "1", "\\u0041": "2"}}', "field 'A' given twice"),
        (b'{"command": ["true"], "timeout": true}', "or a number of seconds"),
    ],
)
def test_batch_lines_say_what_is_wrong(tq: Taskq, line: bytes, says: str) -> None:
    proc = tq.run("submit", "--batch", "-", input=line + b"\n", check=False)
    assert says in one_line_error(proc, 2)


@pytest.mark.slow
def test_an_ipv6_metrics_address_is_logged_as_a_url(tq: Taskq, start_daemon: StartDaemon) -> None:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    daemon = start_daemon("--metrics-listen", "[::1]:0")
    wait_for(lambda: "serving metrics on" in daemon.text(), 30, "the metrics server")
    assert "serving metrics on http://[::1]:" in daemon.text()
