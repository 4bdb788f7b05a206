"""--on-key replace and --key-for through real submitters and three daemons, one killed -9.

Replacing is a race between a submitter that cancels the pending holder and
a daemon that claims it; whoever wins, the key names one task, that task
is the only one of the key that runs, and every other submission either
was replaced (cancelled, its journal naming its replacement) or created
nothing and was told the holder's id.
"""

from __future__ import annotations

import json
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
