"""Fencing tokens: TASKQ_FENCE grows with every attempt and claim, and `taskq fence-check`
passes only while the attempt still holds its claim: not once its daemon is stopped past
the lease, nor once another host has taken the task over."""

from __future__ import annotations

import os
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, wait_for
from hypothesis import given
from hypothesis import strategies as st

from taskq.client import fence
from taskq.errors import EX_CONFLICT, EX_USAGE, Conflict
from taskq.spool.layout import Spool
from taskq.spool.states import Phase
from taskq.spool.task import ClaimName, TaskName, new_id
from taskq.times.timespec import SECOND

StartDaemon = Callable[..., Daemon]
CHECK = shlex.join([*TASKQ, "fence-check"])
YEAR_2286 = 10**16 - 1  # µs: the last expiry the token's packing is exact for
FAR = 4 * 10**15  # µs: a lease expiry in 2096


def claim(attempt: int, expiry: int, phase: Phase = Phase.STARTED, host: str = "h") -> ClaimName:
    task = TaskName(1_700_000_000 * SECOND, "0" * 26, attempt)
    return ClaimName(task, phase, expiry, 123, host)


@given(
    st.integers(1, 922_336),
    st.integers(0, YEAR_2286),
    st.integers(1, 922_336),
    st.integers(0, YEAR_2286),
)
def test_tokens_order_as_attempt_then_expiry(a1: int, e1: int, a2: int, e2: int) -> None:
    t1, t2 = fence.token(claim(a1, e1)), fence.token(claim(a2, e2))
    if (a1, e1 // 1000) < (a2, e2 // 1000):
        assert t1 < t2
    assert fence.attempt_of(t1) == a1
    assert 0 < t1 < 2**63


def _recorded(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
def test_fence_check_holds_during_each_attempt_and_grows_with_retries(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    d = tmp_path
    script = (
        f'echo "$TASKQ_FENCE $TASKQ_HOST" > {d}/fence.$TASKQ_ATTEMPT; '
        f"{CHECK}; echo $? > {d}/check.$TASKQ_ATTEMPT; "
        '[ "$TASKQ_ATTEMPT" = 3 ]'  # fails twice, then succeeds
    )
    start_daemon("--retry-delay", "0", host="host-a")
    task_id = tq.submit("--", "sh", "-c", script)
    tq.wait_state(task_id, ("done",), timeout=30)
    tokens = [int(_recorded(d / f"fence.{n}")[0]) for n in (1, 2, 3)]
    assert [_recorded(d / f"check.{n}") for n in (1, 2, 3)] == [["0"]] * 3
    assert tokens == sorted(set(tokens)), "strictly increasing"
    assert [fence.attempt_of(t) for t in tokens] == [1, 2, 3]
    assert _recorded(d / "fence.1")[1] == "host-a"
    starts = [r for r in tq.show(task_id)["attempts"] if r["event"] == "start"]
    assert [r["fence"] for r in starts] == tokens, "the journal records each token"
    # The task is done: the last attempt holds nothing any more.
    env = {"TASKQ_ID": task_id, "TASKQ_FENCE": str(tokens[2]), "TASKQ_HOST": "host-a"}
    tq.env.update(env)
    done = tq.run("fence-check", check=False)
    assert done.returncode == EX_CONFLICT
    assert done.stderr.decode().splitlines() == [
        f"taskq: task {task_id} attempt 3 no longer holds its claim: "
        "the task is not claimed (it ended, or went back to pending)"
    ]


@pytest.mark.slow
def test_a_stale_attempt_fails_its_fence_check_after_a_takeover(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    d = tmp_path
    checks, why = d / "checks.1", d / "why.1"
    script = (
        f'echo "$TASKQ_FENCE" > {d}/fence.$TASKQ_ATTEMPT; '
        f"{CHECK} 2>> {d}/why.$TASKQ_ATTEMPT; echo $? >> {d}/checks.$TASKQ_ATTEMPT; "
        '[ "$TASKQ_ATTEMPT" = 1 ] || exit 0; '
        # Attempt 1 checks again when the test opens each gate, then lingers.
        f"for gate in expired taken; do while [ ! -e {d}/$gate ]; do sleep 0.05; done; "
        f"{CHECK} 2>> {why}; echo $? >> {checks}; done; sleep 30"
    )
    a = start_daemon("--lease", "2s", host="host-a")
    task_id = tq.submit("--", "sh", "-c", script)
    wait_for(lambda: _recorded(checks) == ["0"], 30, "attempt 1 to pass its first check")
    a.proc.send_signal(signal.SIGSTOP)
    try:
        [held] = [ClaimName.parse(n) for n in os.listdir(tq.spool / "claimed")]
        assert (held.host, held.task.attempt) == ("host-a", 1)
        # Stopped, host-a renews nothing: wait until its lease has run out.
        wait_for(lambda: time.time_ns() // 1000 > held.expiry, 30, "the lease to run out")
        (d / "expired").touch()
        wait_for(lambda: len(_recorded(checks)) == 2, 30, "attempt 1's second check")
        assert _recorded(checks)[1] == str(EX_CONFLICT)
        assert "its lease ran out" in why.read_text()

        start_daemon("--lease", "2s", host="host-b")
        tq.wait_state(task_id, ("done",), timeout=30)
        assert _recorded(d / "checks.2") == ["0"], "attempt 2 holds its claim on host-b"
        (d / "taken").touch()
        wait_for(lambda: len(_recorded(checks)) == 3, 30, "attempt 1's third check")
        assert _recorded(checks)[2] == str(EX_CONFLICT)
        assert why.read_text().count("no longer holds its claim") == 2
    finally:
        a.proc.send_signal(signal.SIGCONT)
    stale, new = (int(_recorded(d / f"fence.{n}")[0]) for n in (1, 2))
    assert stale < new
    assert (fence.attempt_of(stale), fence.attempt_of(new)) == (1, 2)
    # Continued, host-a finds its renewal refused and kills attempt 1.
    first = next(r for r in tq.show(task_id)["attempts"] if r["event"] == "start")
    proc = Path(f"/proc/{first['pid']}")
    wait_for(lambda: not proc.exists(), 30, "host-a to kill the stale attempt")


@pytest.mark.parametrize(
    ("found", "reason"),
    [
        (None, "the task is not claimed"),
        (claim(2, FAR), "attempt 2 holds it now"),
        (claim(1, FAR, host="other"), "taken over by other_123"),
        (claim(1, FAR, phase=Phase.CANCELLING), "a cancel was requested"),
        (claim(1, FAR, phase=Phase.CLAIMED), "the claim is in phase claimed"),
        (claim(1, 1_000 * SECOND), "its lease ran out at"),
    ],
)
def test_fence_check_says_why_the_claim_is_not_held(
    tmp_path: Path, found: ClaimName | None, reason: str
) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    task_id = new_id(time.time_ns() // 1000)
    mine = claim(1, FAR)
    if found is not None:
        name = ClaimName(TaskName(found.task.run_at, task_id, found.task.attempt), *_rest(found))
        (Path(spool.claimed) / str(name)).touch()
    token = fence.token(mine)
    with pytest.raises(Conflict, match=reason):
        fence.check(spool, task_id, token, "h", 2_000 * SECOND)


def _rest(c: ClaimName) -> tuple[Phase, int, int, str]:
    return c.phase, c.expiry, c.pid, c.host


def test_fence_check_passes_for_the_holder(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    task_id = new_id(time.time_ns() // 1000)
    held = ClaimName(TaskName(SECOND, task_id, 4), Phase.STARTED, FAR, 123, "h")
    (Path(spool.claimed) / str(held)).touch()
    assert fence.check(spool, task_id, fence.token(held), "h", 2_000 * SECOND) == held


def test_fence_check_outside_a_task_is_a_usage_error(tq: Taskq) -> None:
    for k in ("TASKQ_ID", "TASKQ_FENCE", "TASKQ_HOST"):
        tq.env[k] = ""
    out = tq.run("fence-check", check=False)
    assert out.returncode == EX_USAGE
    assert out.stderr.decode().startswith("taskq: fence-check needs --id/TASKQ_ID")
    out = tq.run("fence-check", "--id", new_id(0), "--fence", "x1", "--host-id", "h", check=False)
    assert out.returncode == EX_USAGE
    assert out.stderr.decode() == "taskq: bad fencing token 'x1': expected TASKQ_FENCE's number\n"
