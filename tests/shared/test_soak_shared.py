"""Soak mode on a shared filesystem: three hosts, bursts, kill -9 and SIGSTOP past the lease.

Off by default. Run with TASKQ_SOAK_SHARED=N (cycles) and TASKQ_SOAK_FS=gluster
(the default; a GlusterFS volume with three FUSE clients, one per host),
bindfs or local; TASKQ_SOAK_REPORT=FILE appends the report:

    TASKQ_SOAK_SHARED=60 TASKQ_SOAK_REPORT=docs/RELIABILITY.md \\
        .venv/bin/python -m pytest tests/shared/test_soak_shared.py

Three daemons with distinct host ids run on three mounts. Each cycle does one
of: submit a burst due at one instant, submit tasks spread over a few
seconds, kill -9 a daemon and restart it (same host id: it adopts its
orphans), or SIGSTOP a daemon past its lease (the others take its claims
over; its attempts, still running, are recorded as lost) and continue it.
At the end every task must be done, no attempt number may run twice, none
may start before its run_at, and a task may run more often than its
outcome needs only where its journal records a lost attempt.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TASKQ, Taskq, read_stamps, wait_for

from taskq.spool import journal, walk
from taskq.spool.layout import Spool
from taskq.spool.states import State

pytest_plugins = ["substrates"]
CYCLES = int(os.environ.get("TASKQ_SOAK_SHARED", "0"))
KIND = os.environ.get("TASKQ_SOAK_FS", "gluster")
LEASE = 3.0
pytestmark = pytest.mark.skipif(CYCLES == 0, reason="shared soak is off (TASKQ_SOAK_SHARED=N)")


@pytest.fixture
def roots(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[Path]]:
    if KIND == "local":
        yield [tmp_path / "spool"] * 3
    elif KIND == "bindfs":
        yield [request.getfixturevalue("bindfs_dir") / "spool"] * 3
    else:
        yield [d / "spool" for d in request.getfixturevalue("gluster").fresh_dir("soak")]


class Host:
    """One daemon on one mount; restarted under the same host id after a kill."""

    def __init__(self, name: str, root: Path, log: Path) -> None:
        self.name, self.root, self.log = name, root, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        env = {**os.environ, "TASKQ_SPOOL": str(self.root)}
        argv = [*TASKQ, "daemon", "--host-id", self.name, "--workers", "6"]
        argv += ["--lease", f"{LEASE}s", "--retry-delay", "0.1s", "--clock-check", "1s"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stderr=log)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def submit(tq: Taskq, stamps: Path, run_ats: list[float], rng: random.Random) -> dict[str, str]:
    """Tasks of three kinds; return {id: kind}."""
    kinds = [rng.choice(["ok", "ok", "slow", "flaky"]) for _ in run_ats]
    lines = []
    for kind, run_at in zip(kinds, run_ats, strict=True):
        script = f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}'
        script += {"ok": "", "slow": "; sleep 1", "flaky": '; [ "$TASKQ_ATTEMPT" -ge 2 ]'}[kind]
        doc = {"command": ["sh", "-c", script], "max_attempts": 6, "run_at": f"@{run_at:.6f}"}
        lines.append(json.dumps(doc))
    out = tq.run("submit", "--batch", "-", input=("\n".join(lines) + "\n").encode()).stdout
    return dict(zip(out.decode().split(), kinds, strict=True))


def cycle(hosts: list[Host], tq: Taskq, stamps: Path, rng: random.Random) -> dict[str, str]:
    action = rng.choice(["burst", "spread", "kill", "stop"])
    if action == "burst":
        return submit(tq, stamps, [time.time() + rng.uniform(0.5, 2)] * rng.randint(50, 150), rng)
    if action == "spread":
        now = time.time()
        return submit(tq, stamps, [now + rng.uniform(0, 5) for _ in range(40)], rng)
    victim = rng.choice(hosts)
    assert victim.proc is not None
    if action == "kill":
        victim.kill()
        victim.start()
    else:
        victim.proc.send_signal(signal.SIGSTOP)
        time.sleep(LEASE * 1.6)  # the pause itself is the fault: past the lease, by design
        victim.proc.send_signal(signal.SIGCONT)
    return {}


def tally(root: Path, stamps: Path, kinds: dict[str, str]) -> dict[str, object]:
    """Count from the spool itself (bodies and journals), as an operator could with cat."""
    spool = Spool(str(root))
    run_at = {
        f.name.id: spool.read_body(f.path).run_at / 1e6 for f in walk.tasks(spool, (State.DONE,))
    }
    rows = read_stamps(stamps)
    by_attempt = collections.Counter((t, a) for t, a, _ in rows)
    runs = collections.Counter(t for t, _, _ in rows)
    extra_unrecorded = duplicates = lost_total = early = 0
    losses: dict[str, int] = {}
    late: list[float] = []
    first = {t: w for t, a, w in rows if a == 1}
    for task_id, kind in kinds.items():
        records = journal.read(spool.log_dir(task_id))
        lost = sum(
            1
            for r in records
            if (r["event"] == "end" and r.get("lost")) or r["event"] == "lease-lost"
        )
        lost_total += lost
        losses[task_id] = lost
        extra = runs[task_id] - (2 if kind == "flaky" else 1)
        duplicates += max(0, extra)
        extra_unrecorded += max(0, extra - lost)
        if task_id in first:
            early += first[task_id] < run_at[task_id]
            late.append(first[task_id] - run_at[task_id])
    late.sort()
    return {
        "tasks": len(kinds),
        "executions": len(rows),
        "attempt numbers run twice": sum(1 for n in by_attempt.values() if n > 1),
        "of them without a recorded loss": sum(
            1 for (t, _), n in by_attempt.items() if n > 1 and not losses[t]
        ),
        "executions beyond what the outcome needed": duplicates,
        "of them without a recorded lost attempt": extra_unrecorded,
        "lost attempts recorded": lost_total,
        "first attempts started early": early,
        "lateness of first attempts p50 / p99 (s)": (
            f"{late[len(late) // 2]:.3f} / {late[int(len(late) * 0.99)]:.3f}" if late else "-"
        ),
    }


def test_shared_soak(roots: list[Path], tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("TASKQ_TEST_SEED", "11")))
    stamps = tmp_path / "stamps"
    client = Taskq(roots[2])
    hosts = [Host(f"host{i}", roots[i], tmp_path / f"host{i}.log") for i in range(3)]
    kinds: dict[str, str] = {}
    began = time.monotonic()
    try:
        for _ in range(CYCLES):
            kinds.update(cycle(hosts, client, stamps, rng))
            time.sleep(rng.uniform(0.2, 1.0))  # a random moment under load, not a wait for a result

        def all_done() -> bool:
            lines = client.run("ls", "--json").stdout.splitlines()
            states = {r["id"]: r["state"] for r in map(json.loads, lines)}
            return all(states.get(t) == "done" for t in kinds)

        wait_for(all_done, 600, "every task to be done")
    finally:
        for h in hosts:
            h.stop()
    result = tally(roots[2], stamps, kinds)
    report(result, time.monotonic() - began)
    assert result["of them without a recorded loss"] == 0, result
    assert result["first attempts started early"] == 0, result
    assert result["of them without a recorded lost attempt"] == 0, result
    corrupt = roots[2] / "corrupt"
    assert not (corrupt.exists() and list(corrupt.iterdir())), "nothing quarantined"


def report(result: dict[str, object], seconds: float) -> None:
    path = os.environ.get("TASKQ_SOAK_REPORT")
    if not path:
        return
    lines = [
        "",
        f"## Three hosts on a shared filesystem ({KIND})",
        "",
        f"    TASKQ_SOAK_SHARED={CYCLES} TASKQ_SOAK_FS={KIND} .venv/bin/python -m pytest "
        "tests/shared/test_soak_shared.py",
        "",
        f"{CYCLES} cycles on {time.strftime('%Y-%m-%d', time.gmtime())}, {seconds:.0f} s: three "
        "daemons (host0-2) on three mounts of one spool; each cycle submitted a burst due at one "
        "instant (50-150 tasks) or 40 tasks spread over 5 s through the third mount, killed one "
        "daemon with SIGKILL and restarted it under its host id, or stopped one with SIGSTOP for "
        f"{LEASE * 1.6:.1f} s (lease {LEASE:.0f} s) and continued it. Tasks: quick, one-second and "
        "fail-once.",
        "",
        "| measure | result |",
        "| --- | --- |",
        *(f"| {k} | {v} |" for k, v in result.items()),
        "",
        "A task runs more often than its outcome needs only when a daemon was paused past its "
        "lease with the attempt in flight, or between its last look at the claim and the spawn: "
        "another host took the claim over and ran it (again), and the journal records the loss "
        "(`end` with `lost`, or `lease-lost`).",
        "",
    ]
    with open(path, "a") as f:
        f.write("\n".join(lines))
