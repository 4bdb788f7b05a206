"""A real daemon whose wall clock steps mid-run: nothing starts early, nothing is lost.

The daemon runs under an LD_PRELOAD shim (tests/clockshim.c) that shifts
only CLOCK_REALTIME, by an offset the test changes while the daemon runs,
as an NTP step or a resumed VM would; its monotonic clock and the file
timestamps the kernel stamps do not move. Tasks stamp their start with the
real clock, and the test compares those stamps with their run_at.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable
from pathlib import Path

import clockstep
import pytest
from conftest import Daemon, Taskq, read_stamps, wait_for

clock_shim = clockstep.clock_shim
stepped_clock = clockstep.stepped_clock


def submit_spread(tq: Taskq, stamps: Path, n: int, start: float, span: float) -> dict[str, float]:
    """n tasks due evenly over [start, start + span) (epoch seconds); their ids and run_ats."""
    run_ats = [start + span * i / n for i in range(n)]
    argv = clockstep.stamp_real_cmd(stamps)
    lines = [json.dumps({"command": argv, "run_at": f"@{t:.6f}"}) for t in run_ats]
    out = tq.run("submit", "--batch", "-", input="\n".join(lines).encode()).stdout
    return dict(zip(out.decode().split(), run_ats, strict=True))


def check(stamps: Path, run_at: dict[str, float]) -> None:
    rows = read_stamps(stamps)
    runs = collections.Counter(t for t, _, _ in rows)
    assert set(runs) == set(run_at) and set(runs.values()) == {1}, "each task once"
    early = [(t, run_at[t] - s) for t, _, s in rows if s < run_at[t]]
    assert early == [], f"started early by the real clock: {early[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("step", [6.0, -6.0])
def test_a_step_mid_run_never_starts_a_task_early(
    tq: Taskq,
    start_daemon: Callable[..., Daemon],
    stepped_clock: clockstep.SteppedClock,
    stamps: Path,
    step: float,
) -> None:
    env = stepped_clock.env(inherit=False)
    daemon = start_daemon("--max-uncertainty", "10s", "--workers", "4", env=env)
    run_at = submit_spread(tq, stamps, 40, time.time() + 2, 10)
    wait_for(lambda: len(read_stamps(stamps)) >= 5, 60, "the first tasks to run")
    stepped_clock.step(step)
    wait_for(lambda: len(read_stamps(stamps)) >= 40, 120, "every task to run")
    check(stamps, run_at)
    said = f"the wall clock stepped {'forward' if step > 0 else 'back'}"
    # The daemon says so once it has measured the clock again, on the spool: a loaded
    # machine's last tasks can have run by then (on time, by the real clock).
    wait_for(lambda: said in daemon.text(), 60, "the daemon to say the clock stepped")
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_large_step_stops_dispatching_until_the_clock_is_right(
    tq: Taskq,
    start_daemon: Callable[..., Daemon],
    stepped_clock: clockstep.SteppedClock,
    stamps: Path,
) -> None:
    env = stepped_clock.env(inherit=False)
    daemon = start_daemon("--clock-check", "1s", env=env)  # --max-uncertainty 2s
    stepped_clock.step(6)
    run_at = submit_spread(tq, stamps, 10, time.time() + 1, 2)
    wait_for(lambda: "not dispatching" in daemon.text(), 60, "dispatch to stop")
    assert read_stamps(stamps) == [] or all(s >= run_at[t] for t, _, s in read_stamps(stamps))
    stepped_clock.step(-6)  # NTP puts it right
    wait_for(lambda: len(read_stamps(stamps)) >= 10, 120, "every task to run")
    check(stamps, run_at)
    assert "within bounds again" in daemon.text()
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_lease_never_expires_early_when_the_owners_clock_steps_back(
    tq: Taskq,
    start_daemon: Callable[..., Daemon],
    stepped_clock: clockstep.SteppedClock,
    stamps: Path,
) -> None:
    """The owner writes lease expiries in the reference clock, so a step back does not
    shorten them, and another daemon does not take over a healthy attempt."""
    gate = stamps.parent / "gate"
    owner = start_daemon(
        "--lease",
        "3s",
        "--max-uncertainty",
        "10s",
        host="owner",
        env=stepped_clock.env(inherit=False),
    )
    tail = f"; while [ ! -e {gate} ]; do sleep 0.05; done"
    task_id = tq.submit("--", *clockstep.stamp_real_cmd(stamps, tail))
    wait_for(lambda: read_stamps(stamps), 60, "the attempt to start")
    stepped_clock.step(-6)
    other = start_daemon("--lease", "3s", host="other")
    wait_for(lambda: "the wall clock stepped back" in owner.text(), 60, "the owner to notice")
    deadline = time.monotonic() + 8  # more than two leases: a short lease would have lapsed
    while time.monotonic() < deadline:
        assert "took over" not in other.text(), other.text()
        time.sleep(0.2)
    gate.touch()
    doc = tq.wait_state(task_id, ("done",), timeout=60)
    assert [r["event"] for r in doc["attempts"]].count("start") == 1
    assert owner.stop() == 0 and other.stop() == 0
