"""Resource limits per attempt through real cgroups: a real daemon, real tasks, the real kernel.

Every test but the refusals needs a daemon that can make cgroups (root,
with cgroup v1 controllers or a delegated cgroup v2); where the daemon
says it has none, they skip with its reason. The v2 backend cannot be
run on a machine whose v2 hierarchy has no controllers: these tests then
exercise v1, whichever the daemon found.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, wait_for

StartDaemon = Callable[..., Daemon]


def confining(start_daemon: StartDaemon, *args: str) -> Daemon:
    """A daemon that can make cgroups for attempts; the test skips where it cannot."""
    d = start_daemon("--kill-grace", "1s", *args)
    wait_for(lambda: "cgroup" in d.text(), 30, "the daemon to say which cgroups it has")
    if "no cgroups for attempts" in d.text():
        line = next(x for x in d.text().splitlines() if "no cgroups" in x)
        pytest.skip(f"no cgroups here: {line.partition('attempts: ')[2]}")
    return d


def end_of(doc: dict[str, Any]) -> dict[str, Any]:
    ends: list[dict[str, Any]] = [r for r in doc["attempts"] if r["event"] == "end"]
    assert ends, doc["attempts"]
    return ends[-1]


def group_dirs(cgroup_file: str) -> list[Path]:
    """The directories of an attempt's cgroup, from the /proc/PID/cgroup text it recorded."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        kind, *_, supers = right.split()
        if kind == "cgroup":
            for option in supers.split(","):
                mounts[option] = left.split()[4]
        elif kind == "cgroup2":
            mounts[""] = left.split()[4]
    dirs = []
    for line in cgroup_file.splitlines():
        _, names, path = line.split(":", 2)
        if "/taskq/" in path:
            dirs.append(Path(mounts[names.split(",")[0]] + path))
    assert dirs, cgroup_file
    return dirs


def _recorded(where: Path) -> str:
    """The /proc/self/cgroup an attempt wrote, once it is whole."""
    text = where.read_text() if where.exists() else ""
    return text if text.endswith("\n") and "/taskq/" in text else ""


def _written(path: Path) -> bool:
    return path.exists() and path.read_text().endswith("\n")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow  # a real daemon and real kills: seconds each
def test_an_attempt_past_its_memory_max_is_oom_killed_and_recorded_so(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    confining(start_daemon)
    where = tmp_path / "cgroup"
    hog = f"cat /proc/self/cgroup > {where}; exec python3 -c \"b = b'x' * (200 << 20)\""
    task = tq.submit("--memory-max", "50M", "--max-attempts", "1", "--", "sh", "-c", hog)
    doc = tq.wait_state(task, ("failed",), 60)
    end = end_of(doc)
    assert end.get("exit_status") == 137 or end.get("signal") == 9, end
    assert any("OOM killer" in n and "50M" in n for n in end["notes"]), end
    assert not any(d.exists() for d in group_dirs(where.read_text())), "the group was removed"


@pytest.mark.slow  # a real daemon and real kills: seconds each
def test_a_fork_bomb_is_bounded_by_tasks_max_and_cpu_max(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    confining(start_daemon)
    where = tmp_path / "cgroup"
    # Every process forks for ever, and goes on when a fork is refused (sh would exit).
    forks = "import os, time\nwhile True:\n try: os.fork()\n except OSError: time.sleep(0.01)"
    bomb = f"cat /proc/self/cgroup > {where}; exec python3 -c '{forks}'"
    task = tq.submit(
        "--tasks-max", "8", "--cpu-max", "20%", "--timeout", "3s", "--max-attempts", "1",
        "--", "sh", "-c", bomb,
    )  # fmt: skip
    dirs = group_dirs(wait_for(lambda: _recorded(where), 30, "the bomb to start"))
    pids = next(d for d in dirs if (d / "pids.max").exists())
    cpu = next(d for d in dirs if (d / "cpu.cfs_quota_us").exists() or (d / "cpu.max").exists())
    peak, quota, most = 0, "", ""
    watch_until = time.monotonic() + 1.5  # well inside its 3 s: the group is there meanwhile
    while time.monotonic() < watch_until:  # it holds the supervisor and at most 8 more
        try:
            peak = max(peak, int((pids / "pids.current").read_text()))
            most = (pids / "pids.max").read_text().strip()
            quota = _quota(cpu)
        except FileNotFoundError:
            break  # a machine so slow that it timed out meanwhile
    assert 0 < peak <= 9, peak
    assert most == "9"
    assert quota in ("20000", "20000 100000"), quota
    end = end_of(tq.wait_state(task, ("failed",), 60))
    assert "timeout after 3.000s" in end["notes"], end
    assert any("--tasks-max 8 refused" in n for n in end["notes"]), end
    assert not any(d.exists() for d in dirs)


def _quota(cpu: Path) -> str:
    if (cpu / "cpu.max").exists():
        return (cpu / "cpu.max").read_text().strip()
    return (cpu / "cpu.cfs_quota_us").read_text().strip()


@pytest.mark.slow  # a real daemon and real kills: seconds each
def test_a_double_forked_grandchild_dies_with_its_attempt_on_timeout_cancel_and_end(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    confining(start_daemon)
    tasks, pids = {}, {}
    for why in ("timeout", "cancel", "end"):
        pidfile = tmp_path / why
        # A new session, deaf to TERM: only the group's KILL reaches it.
        escape = f"setsid sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 300' &"
        rest = "sleep 0.5" if why == "end" else "sleep 300"
        extra = ["--timeout", "2s"] if why == "timeout" else []
        tasks[why] = tq.submit(
            "--tasks-max", "20", *extra, "--max-attempts", "1", "--",
            "sh", "-c", f"{escape} {rest}",
        )  # fmt: skip
    for why in tasks:
        pidfile = tmp_path / why
        wait_for(partial(_written, pidfile), 30, f"{why}'s grandchild")
        pids[why] = int(pidfile.read_text())
    tq.run("cancel", tasks["cancel"])
    assert tq.wait_state(tasks["timeout"], ("failed",), 30)
    assert tq.wait_state(tasks["cancel"], ("cancelled",), 30)
    assert tq.wait_state(tasks["end"], ("done",), 30)
    for why, pid in pids.items():
        wait_for(partial(gone, pid), 10, f"the grandchild of the {why} task to be killed")


@pytest.mark.slow  # a real daemon and real kills: seconds each
def test_the_next_daemon_ends_a_crashed_daemons_attempt_group_and_sweeps_empty_ones(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    first = confining(start_daemon)
    where, pidfile, go = tmp_path / "cgroup", tmp_path / "grandchild", tmp_path / "go"
    script = (
        f"cat /proc/self/cgroup > {where}; setsid sleep 300 & echo $! > {pidfile}; "
        f"while [ ! -e {go} ]; do sleep 0.05; done"
    )
    task = tq.submit("--tasks-max", "10", "--", "sh", "-c", script)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, "the attempt to run")
    dirs = group_dirs(_recorded(where))
    first.proc.kill()  # SIGKILL: the attempt runs on, in its group, with no daemon
    first.proc.wait(10)
    dead = Path(str(dirs[0].parent.parent)) / f"testhost_{_dead_pid()}"
    (dead / "01M8S9TGVAAZD05WFR3M5P24HC.1").mkdir(parents=True)  # an empty group of a dead daemon
    confining(start_daemon)
    # Every daemon starting on this host sweeps, the suite's others too: whichever
    # came first, the dead daemon's empty group is gone, and the running one stays.
    wait_for(lambda: not dead.exists(), 30, "the dead daemon's empty group to be swept")
    assert all(d.exists() for d in dirs)
    wait_for(lambda: "adopted" in json.dumps(tq.show(task)["attempts"]), 30, "the adoption")
    go.touch()
    tq.wait_state(task, ("done",), 30)
    wait_for(lambda: gone(int(pidfile.read_text())), 10, "the grandchild to be killed")
    assert not any(d.exists() for d in dirs)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.slow  # a real daemon and real kills: seconds each
def test_limits_are_refused_where_no_cgroup_can_be_made(
    tq: Taskq, start_daemon: StartDaemon
) -> None:
    early = tq.submit("--memory-max", "64M", "--", "true")  # no daemon yet: accepted
    d = start_daemon("--cgroups", "none")
    said = "no cgroups for attempts: turned off (--cgroups none)"
    wait_for(lambda: said in d.text(), 30, "the daemon to say it has no cgroups")
    doc = tq.wait_state(early, ("failed",), 30)
    dead = [r for r in doc["attempts"] if r["event"] == "dead"]
    assert "no cgroups" in dead[0]["reason"], doc["attempts"]
    assert not [r for r in doc["attempts"] if r["event"] == "start"], "it never ran"
    status = json.loads(tq.run("status", "--json").stdout)[0]
    assert status["cgroups"] is None
    assert status["cgroups_problem"] == "turned off (--cgroups none)"
    assert "no cgroups (turned off (--cgroups none))" in tq.run("status").stdout.decode()
    refused = tq.run("submit", "--tasks-max", "5", "--", "true", check=False)
    assert refused.returncode == 2
    assert refused.stderr.decode().count("\n") == 1
    assert b"no running daemon of this spool can confine it" in refused.stderr
    assert tq.run("submit", "--", "true").returncode == 0  # a task without limits is as ever


def test_submit_records_its_limits_in_the_body_and_refuses_bad_ones(tq: Taskq) -> None:
    bad = tq.run("submit", "--memory-max", "100K", "--", "true", check=False)
    assert bad.returncode == 2
    assert bad.stderr.decode().count("\n") == 1 and b"--memory-max must be from" in bad.stderr
    assert not list((tq.spool / "pending").glob("*/*"))
    task = tq.submit(
        "--memory-max", "2G", "--cpu-weight", "50", "--cpu-max", "150%", "--tasks-max", "64",
        "--", "true",
    )  # fmt: skip
    body = json.loads(next((tq.spool / "pending").glob(f"*/*_{task}_*")).read_bytes())
    assert body["limits"] == {
        "memory_max": 2 << 30, "cpu_weight": 50, "cpu_max": 150, "tasks_max": 64
    }  # fmt: skip
    plain = tq.submit("--", "true")
    assert "limits" not in json.loads(
        next((tq.spool / "pending").glob(f"*/*_{plain}_*")).read_bytes()
    )


@pytest.mark.slow  # a real daemon: seconds
def test_another_users_attempt_joins_its_cgroup_through_the_gate_slot(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a task as another user")
    nobody = pwd.getpwnam("nobody")
    script = "id -u; cat /proc/self/cgroup"
    task = tq.submit("--cwd", "/", "--tasks-max", "10", "--", "sh", "-c", script)
    [path] = (tq.spool / "pending").glob(f"*/*_{task}_*")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)  # as if nobody had submitted it
    confining(start_daemon)
    tq.wait_state(task, ("done",), 30)
    uid, *cgroup = tq.run("logs", task).stdout.decode().splitlines()
    assert uid == str(nobody.pw_uid)
    assert any("/taskq/testhost_" in line and line.endswith(f"/{task}.1") for line in cgroup)


def test_show_and_schedule_add_carry_the_limits(tq: Taskq) -> None:
    task = tq.submit("--tasks-max", "7", "--cpu-max", "50%", "--", "true")
    doc = tq.show(task)
    assert doc["limits"] == {"cpu_max": 50, "tasks_max": 7}
    assert "limits:    --cpu-max 50% --tasks-max 7" in tq.run("show", task).stdout.decode()
    made = json.loads(tq.run("schedule", "add", "s", "--every", "1h", "--memory-max", "64M",
                             "--json", "--", "true").stdout)  # fmt: skip
    assert tq.show(made["task"])["limits"] == {"memory_max": 64 << 20}
