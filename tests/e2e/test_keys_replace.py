"""--on-key replace and --key-for through real submitters and three daemons, one killed -9.

Replacing is a race between a submitter that cancels the pending holder and
a daemon that claims it; whoever wins, the key names one task, that task
is the only one of the key that runs, and every other submission either
was replaced (cancelled, its journal naming its replacement) or created
nothing and was told the holder's id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, kill_all, read_stamps, stamp_cmd, wait_for

pytestmark = pytest.mark.slow  # real daemons, seconds each

LEASE = ("--lease", "3s", "--rescan", "1s", "--workers", "4")


def _submit_all(tq: Taskq, stamps: Path, n: int, *opts: str) -> list[dict[str, object]]:
    """n submissions of one key at once, from n processes; their --json answers."""
    env = {"TASKQ_SPOOL": str(tq.spool), "PATH": "/usr/bin:/bin"}
    argv = [*TASKQ, "submit", "--json", *opts, "--", *stamp_cmd(stamps)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, env=env) for _ in range(n)]
    return [json.loads(p.communicate(timeout=60)[0]) for p in procs]


def test_on_key_replace_leaves_one_task_of_the_key_to_run(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps = tmp_path / "stamps"
    daemons = [start_daemon(*LEASE, host=f"h{i}") for i in range(3)]
    opts = ("--key", "deploy", "--on-key", "replace", "--in", "2s")
    answers = _submit_all(tq, stamps, 4, *opts)
    daemons[0].kill()  # SIGKILL, while the holder waits for its time
    daemons[0] = start_daemon(*LEASE, host="h0")
    answers += _submit_all(tq, stamps, 4, *opts)
    created = [str(a["id"]) for a in answers if a["created"]]
    wait_for(lambda: read_stamps(stamps), 60, "the key's task to run")
    ran = wait_for(lambda: _ended(tq, created), 60, "every created task to end")
    kill_all(daemons)
    runs = read_stamps(stamps)
    assert len(runs) == 1 and runs[0][1] == 1  # one task of the key ran, once
    winner = runs[0][0]
    assert ran[winner] == "done"
    holder = json.loads(tq.run("submit", "--json", *opts, "--", "true").stdout)
    assert holder == {**holder, "id": winner, "created": False, "replaced": None}
    replaced = {str(a["replaced"]) for a in answers if a.get("replaced")}
    for task in created:
        if task != winner:
            assert ran[task] == "cancelled" and task in replaced
            journal = tq.show(task)["attempts"]
            assert any(r.get("by") == "key" and r.get("replaced_by") for r in journal)
    start = runs[0][2]
    assert start >= _run_at(tq, winner)  # never early


REPLACE = ("--json", "--key", "k", "--on-key", "replace", "--in", "1h")


def _replacer(tq: Taskq, **env: str) -> subprocess.Popen[bytes]:
    """A `submit --on-key replace` of key k, running; env adds crash-point settings."""
    env = {"TASKQ_SPOOL": str(tq.spool), "PATH": "/usr/bin:/bin", **env}
    argv = [*TASKQ, "submit", *REPLACE, "--", "true"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _answer(proc: subprocess.Popen[bytes]) -> dict[str, object]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    answer: dict[str, object] = json.loads(out)
    return answer


def _markers(tq: Taskq) -> list[str]:
    return [e for e in os.listdir(tq.spool / "keys") if e.endswith(".taking")]


def test_a_replacer_stopped_mid_take_over_holds_the_others_back(tq: Taskq) -> None:
    """Two replacers that read one holder: the second waits, then replaces the first.

    Without the marker the second cancelled the holder too, and the first,
    let go, renamed the second's binding aside and linked it back: a plain
    submission in that instant bound the key, and two of its tasks ran.
    """
    holder = tq.submit("--in", "1h", "--key", "k", "--", "true")
    first = _replacer(tq, TASKQ_CRASH_AT="rekey.read", TASKQ_CRASH_SIGNAL="STOP")
    wait_for(lambda: _stopped(first.pid), 60, "the first replacer to stop under the marker")
    assert tq.state(holder) == "pending" and tq.submit("--key", "k", "--", "true") == holder
    second = _replacer(tq)
    with pytest.raises(subprocess.TimeoutExpired):
        second.wait(1.0)  # it waits for the marker: nothing is decided yet
    os.kill(first.pid, signal.SIGCONT)  # well within the 5 s a waiter gives a marker
    a, b = _answer(first), _answer(second)
    assert (a["created"], a["replaced"]) == (True, holder)
    assert (b["created"], b["replaced"]) == (True, a["id"])
    states = [tq.state(t) for t in (holder, str(a["id"]), str(b["id"]))]
    assert states == ["cancelled", "cancelled", "pending"]
    assert tq.submit("--key", "k", "--", "true") == b["id"] and _markers(tq) == []
    journal = tq.show(str(a["id"]))["attempts"]
    assert any(r.get("by") == "key" and r.get("replaced_by") == b["id"] for r in journal)


def test_a_replacer_killed_mid_take_over_holds_the_key_back_five_seconds(tq: Taskq) -> None:
    holder = tq.submit("--in", "1h", "--key", "k", "--", "true")
    killed = _replacer(tq, TASKQ_CRASH_AT="rekey.read")
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL and len(_markers(tq)) == 1
    began = time.monotonic()
    answer = _answer(_replacer(tq))
    took = time.monotonic() - began
    assert 5.0 <= took < 60  # the stale marker is broken after 5 s of the waiter's clock
    assert answer["created"] is True and answer["replaced"] == holder and _markers(tq) == []
    assert tq.state(holder) == "cancelled" and tq.state(str(answer["id"])) == "pending"


def _ended(tq: Taskq, ids: list[str]) -> dict[str, str] | None:
    states = {t: tq.state(t) for t in ids}
    return states if all(s in ("done", "failed", "cancelled") for s in states.values()) else None


def _run_at(tq: Taskq, task: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(tq.show(task)["run_at"]).replace("Z", "+00:00")).timestamp()


def test_key_for_frees_the_key_after_its_window(tq: Taskq) -> None:
    held = tq.submit("--in", "1h", "--key", "j", "--key-for", "1h", "--", "true")
    assert tq.submit("--in", "1h", "--key", "j", "--key-for", "1h", "--", "true") == held
    first = tq.submit("--in", "1h", "--key", "k", "--key-for", "1s", "--", "true")
    wait_for(lambda: time.time() > _submitted(tq, first) + 1.05, 10, "the window to pass")
    second = tq.submit("--in", "1h", "--key", "k", "--key-for", "1s", "--", "true")
    assert second != first and tq.state(first) == "pending"  # both stand: the window ended
    assert tq.submit("--key", "k", "--", "true") == second  # no window given: the holder
    refused = tq.run("submit", "--key-for", "1s", "--", "true", check=False)
    assert refused.returncode == 2 and b"need --key" in refused.stderr


def _submitted(tq: Taskq, task: str) -> float:
    from datetime import datetime

    text = str(tq.show(task)["submitted_at"]).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()
