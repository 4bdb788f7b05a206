"""The clock-step shim itself, on real subprocesses: only the wall clock moves.

Every check brackets the child's reading between two readings of the real
clocks taken here before asking and after the answer, so a slow or loaded
machine widens the bracket instead of failing the test.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clockstep
import pytest
from clockstep import REAL_DATE, SteppedClock

clock_shim = clockstep.clock_shim
stepped_clock = clockstep.stepped_clock

SLACK = 0.01  # s: float rounding, and when the child reads wall and monotonic apart
MTIME_SLACK = 0.05  # s: the kernel stamps files from a coarse clock, a tick behind
ANSWER_TIMEOUT = 60.0  # s: generous, for a busy machine

CHILD = r"""
import ctypes, json, sys, time
libc = ctypes.CDLL(None)
class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "write":
        with open(arg, "w") as f:
            f.write("x")
    tv = Timeval()
    libc.gettimeofday(ctypes.byref(tv), None)
    began = time.monotonic()
    time.sleep(0.05)
    slept = time.monotonic() - began
    answer = {
        "wall": time.time(),
        "mono": time.monotonic(),
        "time": libc.time(None),
        "gettimeofday": tv.sec + tv.usec / 1e6,
        "tai": time.clock_gettime(time.CLOCK_TAI),
        "slept": slept,
    }
    print(json.dumps(answer), flush=True)
"""


class Child:
    """A Python subprocess under the shim that reports its clocks when asked."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )

    def ask(self, command: str = "now") -> tuple[float, dict[str, Any], float]:
        """(real wall clock before asking, the child's answer, real wall clock after)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        before = time.time()
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(ANSWER_TIMEOUT):
                pytest.fail(f"no answer from the shimmed child in {ANSWER_TIMEOUT}s")
        line = self.proc.stdout.readline()
        after = time.time()
        assert line, f"the shimmed child exited {self.proc.wait(10)}"
        answer: dict[str, Any] = json.loads(line)
        return before, answer, after

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def child(stepped_clock: SteppedClock) -> Iterator[Child]:
    c = Child(stepped_clock.env())
    yield c
    c.close()


def assert_shifted(before: float, answer: dict[str, Any], after: float, offset: float) -> None:
    """Every wall-clock reading in answer is the real clock plus offset."""
    # time.time() was read after the sleep, so it is the tightest: the others
    # were read before it (gettimeofday, time) or are TAI, seconds apart.
    assert before - SLACK <= answer["wall"] - offset <= after + SLACK, (before, answer, after)
    assert before - SLACK <= answer["gettimeofday"] - offset <= after + SLACK
    assert before - 1 <= answer["time"] - offset <= after + SLACK
    assert before - 60 <= answer["tai"] - offset <= after + 60  # TAI is UTC + 37 s, or + 0


@pytest.mark.parametrize("step", [+6.0, -6.0])
def test_a_step_mid_run_moves_only_the_wall_clock(
    stepped_clock: SteppedClock, child: Child, step: float
) -> None:
    mono_before = time.monotonic()
    before, first, after = child.ask()
    mono_after = time.monotonic()
    assert_shifted(before, first, after, 0.0)
    assert mono_before <= first["mono"] <= mono_after  # CLOCK_MONOTONIC is system-wide

    stepped_clock.step(step)
    assert stepped_clock.offset == step

    mono_before = time.monotonic()
    before, second, after = child.ask()
    mono_after = time.monotonic()
    assert_shifted(before, second, after, step)
    assert mono_before <= second["mono"] <= mono_after
    # The step shows as wall clock moving that much more than the monotonic one.
    jump = (second["wall"] - first["wall"]) - (second["mono"] - first["mono"])
    assert abs(jump - step) < 1.0, jump
    for answer in (first, second):
        assert 0.05 <= answer["slept"] < 10, answer  # time.sleep works under the shim

    stepped_clock.set_offset(0)
    before, third, after = child.ask()
    assert_shifted(before, third, after, 0.0)


def test_steps_accumulate_and_set_offset_replaces(
    stepped_clock: SteppedClock, child: Child
) -> None:
    stepped_clock.step(6)
    stepped_clock.step(-2.5)
    assert stepped_clock.offset == 3.5
    before, answer, after = child.ask()
    assert_shifted(before, answer, after, 3.5)
    stepped_clock.set_offset(-6)
    before, answer, after = child.ask()
    assert_shifted(before, answer, after, -6.0)


@pytest.mark.parametrize("offset", [+6.0, -6.0])
def test_files_the_child_writes_carry_the_real_time(
    stepped_clock: SteppedClock, child: Child, tmp_path: Path, offset: float
) -> None:
    """The kernel stamps mtimes from its own clock: a probe sees the step."""
    stepped_clock.set_offset(offset)
    probe = tmp_path / "probe"
    before, answer, after = child.ask(f"write {probe}")
    mtime = os.stat(probe).st_mtime_ns / 1e9
    assert before - MTIME_SLACK <= mtime <= after + MTIME_SLACK, (before, mtime, after)
    assert abs(answer["wall"] - mtime - offset) < 1.0, (answer, mtime)


def test_children_inherit_the_shim_unless_told_not_to(stepped_clock: SteppedClock) -> None:
    stepped_clock.set_offset(6)
    before = time.time()
    proc = subprocess.run(
        ["sh", "-c", f"date +%s.%N; {REAL_DATE}"],
        env=stepped_clock.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    after = time.time()
    shifted, real = (float(word) for word in proc.stdout.split())
    assert before - SLACK <= shifted - 6 <= after + SLACK, (before, shifted, after)
    assert before - SLACK <= real <= after + SLACK, (before, real, after)


def test_env_without_inherit_carries_only_the_shim(stepped_clock: SteppedClock) -> None:
    env = stepped_clock.env({"X": "1"}, inherit=False)
    assert env == {
        "X": "1",
        "LD_PRELOAD": str(stepped_clock.library),
        clockstep.CONTROL_VAR: str(stepped_clock.control),
    }


def test_no_control_file_means_no_offset(clock_shim: Path, tmp_path: Path) -> None:
    env = {**os.environ, "LD_PRELOAD": str(clock_shim)}
    env[clockstep.CONTROL_VAR] = str(tmp_path / "missing")
    c = Child(env)
    try:
        before, answer, after = c.ask()
        assert_shifted(before, answer, after, 0.0)
        assert 0.05 <= answer["slept"] < 10
    finally:
        c.close()
