"""Stepping the wall clock of a real subprocess mid-run, for end-to-end tests.

This module owns the test-side half of tests/clockshim.c, an LD_PRELOAD shim
that adds an offset to CLOCK_REALTIME (and CLOCK_REALTIME_COARSE, CLOCK_TAI,
gettimeofday, time, timespec_get) and to nothing else: the monotonic clock,
sleeps, timeouts and the kernel's file timestamps stay real. So a shimmed
process sees exactly what a wall-clock step (`date -s`, NTP, a resumed VM)
looks like: time.time() jumps, time.monotonic() does not, and files it
writes get mtimes from the true clock.

The offset lives in an 8-byte control file (a native int64 of nanoseconds)
that the shim mmaps when the process loads, and that SteppedClock writes in
place with one aligned 8-byte store, so a step is atomic and seen by the
running process at its next clock read. Create the SteppedClock before
starting the process; replacing the control file (rename over it) would
not reach a process that has it mapped.

Fixtures (import the objects into a test module, e.g.
`clock_shim = clockstep.clock_shim`, to use them there):

- clock_shim (session): the shim compiled once with `cc`; skips the test
  where there is no C compiler.
- stepped_clock: a SteppedClock at offset 0 with its control file in tmp_path.

Use from a test that starts `taskq daemon` (conftest's start_daemon merges
env over os.environ, so pass only the shim's variables):

    d = start_daemon(env=stepped_clock.env(inherit=False))
    stepped_clock.step(+6)   # the daemon's wall clock is now 6 s ahead

Caveat: children of a shimmed process inherit LD_PRELOAD and the control
variable whenever their environment passes them through, and taskq passes
its environment to tasks. A task's own `date` is then shifted too, so a task
that must stamp real time runs REAL_DATE (`env -u LD_PRELOAD date +%s.%N`);
stamp_real_cmd() is conftest.stamp_cmd with that change.
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("clockshim.c")
CONTROL_VAR = "TASKQ_TEST_CLOCK_FILE"
REAL_DATE = f"env -u LD_PRELOAD -u {CONTROL_VAR} date +%s.%N"
NS = 1_000_000_000


def compiler() -> str | None:
    """The C compiler to build the shim with: $CC, else cc, if installed."""
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc.split()[0]) and cc


def build_shim(out_dir: Path) -> Path:
    """Compile tests/clockshim.c into out_dir; return the library's path.

    Skips the calling test if there is no C compiler or no libc headers;
    any other compiler error is a bug in the shim and fails the test.
    """
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler (cc or $CC) to build the clock-step shim")
    library = out_dir / "clockshim.so"
    argv = [*cc.split(), "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE), "-ldl"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        if "No such file or directory" in proc.stderr:
            pytest.skip(f"cannot build the clock-step shim (libc headers?): {first}")
        pytest.fail(f"{' '.join(argv)} failed:\n{proc.stderr}")
    return library


class SteppedClock:
    """One control file: the wall-clock offset of every process started with env()."""

    def __init__(self, library: Path, control: Path) -> None:
        self.library = library
        self.control = control
        fd = os.open(control, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, bytes(8))
            self._map = mmap.mmap(fd, 8)
        finally:
            os.close(fd)
        # mmap is page-aligned, so word 0 is an aligned int64: CPython stores
        # it with one 8-byte memcpy, which is one machine store.
        self._word = memoryview(self._map).cast("q")

    def env(
        self, extra: Mapping[str, str] | None = None, *, inherit: bool = True
    ) -> dict[str, str]:
        """An environment for a subprocess whose wall clock this object steps.

        os.environ, then extra, then LD_PRELOAD (the shim first, any inherited
        preloads after) and the control variable. With inherit=False, only
        extra and those two, for helpers that merge env over os.environ.
        """
        base = {**(os.environ if inherit else {}), **(extra or {})}
        preload = [str(self.library), *filter(None, [base.get("LD_PRELOAD")])]
        return {**base, "LD_PRELOAD": ":".join(preload), CONTROL_VAR: str(self.control)}

    @property
    def offset(self) -> float:
        """The current offset, seconds: shimmed wall clock minus the real one."""
        return int(self._word[0]) / NS

    def set_offset(self, seconds: float) -> None:
        """Set the offset for every shimmed process at once, from their next clock read."""
        self._word[0] = round(seconds * NS)

    def step(self, seconds: float) -> None:
        """Step the shimmed wall clock by seconds (negative: back) from where it is."""
        self._word[0] = int(self._word[0]) + round(seconds * NS)

    def close(self) -> None:
        """Release the mapping; running processes keep the offset last set."""
        self._word.release()
        self._map.close()


@pytest.fixture(scope="session")
def clock_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim library, built once per session."""
    return build_shim(tmp_path_factory.mktemp("clockshim"))


@pytest.fixture
def stepped_clock(clock_shim: Path, tmp_path: Path) -> Iterator[SteppedClock]:
    """A SteppedClock at offset 0 whose control file is tmp_path/clock-offset."""
    clock = SteppedClock(clock_shim, tmp_path / "clock-offset")
    yield clock
    clock.close()


def stamp_real_cmd(stamps: Path, extra: str = "") -> list[str]:
    """conftest.stamp_cmd, reading the real clock even under an inherited shim."""
    line = f'echo "$TASKQ_ID $TASKQ_ATTEMPT $({REAL_DATE})" >> {stamps}{extra}'
    return ["sh", "-c", line]
