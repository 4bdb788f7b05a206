"""Hostile input, generated: every submission is either accepted and then runs,
or refused with one line and a documented status, leaving nothing behind.

Hypothesis drives the real `taskq submit` (options and --batch lines) and
`taskq daemon` options with values around every limit: sizes at and past
the exec() and task-file limits, non-UTF-8 bytes, NaN and Infinity, huge
durations, empty strings and control characters. Examples are few and
bounded (each is a real process); TASKQ_FUZZ_EXAMPLES raises the count.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import TASKQ, Taskq, wait_for
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
EXAMPLES = int(os.environ.get("TASKQ_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI never flakes on a new one
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # report, do not shrink for minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
REFUSED = {2, 75, 77}  # bad input, try again later, no permission (taskq(1) EXIT STATUS)

ODD_ARGS = [
    "",
    "\udcff",  # a byte that is not UTF-8, as Python passes it on
    "\x01" * 20_000,  # six bytes each as a JSON escape
    "é\u2028\ufeff",
    "\\u0000",
]
# What a command line can carry (exec() takes no NUL, nor strings this test
# could not start taskq with) ...
ARG = st.one_of(
    st.text(st.characters(exclude_characters="\x00"), max_size=12), st.sampled_from(ODD_ARGS)
)
# ... and what a batch line can, besides: sizes at and past every limit.
BIG = ["\x00", "\x01" * 700_000, "x" * 131_066, "x" * 131_072, "y" * 1_100_000]
TEXT = st.one_of(ARG, st.sampled_from(BIG))
NUMBERS = st.sampled_from(
    ["0", "1", "0.000001", "1e300", "inf", "nan", "-1", "", "999999w", "36525d", "36526d"]
)
OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["--in", "--timeout", "--expires"]), NUMBERS),
        st.tuples(st.just("--env"), st.builds(lambda k, v: f"{k}={v}", ARG, ARG)),
        st.tuples(st.sampled_from(["--key", "--queue", "--cwd"]), ARG),
        st.tuples(st.just("--max-attempts"), st.sampled_from(["0", "1", "1000", "1001", "x"])),
    ),
    max_size=3,
)


def spool_state(tq: Taskq) -> set[str]:
    """Every file in the spool but the journals, logs and run/ records."""
    skip = {"logs", "run"}
    return {
        str(p.relative_to(tq.spool))
        for p in tq.spool.rglob("*")
        if p.is_file() and p.relative_to(tq.spool).parts[0] not in skip
    }


def check_outcome(
    tq: Taskq, proc: subprocess.CompletedProcess[bytes], before: set[str], accepted: list[str]
) -> None:
    if proc.returncode == 0:
        accepted.extend(proc.stdout.decode().split())
        return
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in REFUSED, err
    assert err.startswith("taskq: ") and err.count("\n") == 1, err
    assert spool_state(tq) == before, "a refused submission left something behind"


def run_accepted(tq: Taskq, accepted: list[str], tmp_path: Path) -> None:
    """Bring every accepted task forward and run it: each ends, none is quarantined."""
    if not accepted:
        return
    for task_id in accepted:
        proc = tq.run("reschedule", task_id, "--in", "0", check=False)
        assert proc.returncode in (0, 4), proc.stderr  # 4: a repeated key's task, done
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    with open(tmp_path / "fuzz-daemon.log", "wb") as log:
        daemon = subprocess.Popen(
            [*TASKQ, "daemon", "--retry-delay", "0", "--host-id", "fuzz"], stderr=log, env=env
        )
        try:
            for task_id in accepted:
                tq.wait_state(task_id, ("done", "failed"), timeout=60)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    assert not list((tq.spool / "corrupt").iterdir()), (tmp_path / "fuzz-daemon.log").read_text()


@pytest.mark.slow
@FUZZ
@given(options=OPTIONS, args=st.lists(ARG, max_size=3))
def test_fuzzed_submit_is_accepted_and_runs_or_refused_cleanly(
    tmp_path: Path, options: list[tuple[str, str]], args: list[str]
) -> None:
    tq = Taskq(tmp_path / "fuzz-spool")
    tq.run("submit", "--in", "1h", "--", "true")  # the spool exists: compare before and after
    before = spool_state(tq)
    argv = ["submit", "--max-attempts", "1"]
    for option, value in options:
        argv += [option, value]
    proc = tq.run(*argv, "--", "echo", *args, check=False)
    accepted: list[str] = []
    check_outcome(tq, proc, before, accepted)
    run_accepted(tq, accepted, tmp_path)


JSON_VALUES = st.one_of(
    st.sampled_from([0, 1, -1, 1e300, 10**30, 3155760000, 3155760001, 0.000001, True, None]),
    st.sampled_from(["Infinity", "-Infinity", "NaN"]).map(lambda s: _Raw(s)),
    TEXT,
)


class _Raw(str):
    """A JSON token json.dumps cannot write (Infinity, NaN): spliced in as is."""


def _line(doc: dict[str, Any]) -> bytes:
    raws = {k: v for k, v in doc.items() if isinstance(v, _Raw)}
    plain = {k: (f"@@{k}@@" if k in raws else v) for k, v in doc.items()}
    text = json.dumps(plain)
    for k, v in raws.items():
        text = text.replace(f'"@@{k}@@"', str(v))
    return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(
    lines=st.lists(
        st.dictionaries(
            st.sampled_from(["in", "run_at", "timeout", "expires", "key", "queue", "env", "cwd"]),
            JSON_VALUES,
            max_size=3,
        ),
        min_size=1,
        max_size=3,
    ),
    args=st.lists(TEXT, max_size=2),
)
@pytest.mark.slow
def test_fuzzed_batch_is_accepted_and_runs_or_refused_cleanly(
    tmp_path: Path, lines: list[dict[str, Any]], args: list[str]
) -> None:
    tq = Taskq(tmp_path / "fuzz-spool")
    tq.run("submit", "--in", "1h", "--", "true")
    before = spool_state(tq)
    data = b"".join(
        _line({"command": ["echo", *args], "max_attempts": 1, **fields}) + b"\n" for fields in lines
    )
    proc = tq.run("submit", "--batch", "-", input=data, check=False)
    accepted: list[str] = []
    check_outcome(tq, proc, before, accepted)
    run_accepted(tq, accepted, tmp_path)


DAEMON_OPTIONS = st.sampled_from(
    [
        *("--lease", "--retry-delay", "--retry-cap", "--rescan", "--doorbell-poll"),
        *("--clock-check", "--kill-grace", "--shutdown-grace", "--clock-margin"),
        *("--max-uncertainty", "--workers"),
    ]
)


@pytest.mark.slow
@settings(FUZZ, max_examples=max(10, EXAMPLES // 2))
@given(option=DAEMON_OPTIONS, value=NUMBERS)
def test_fuzzed_daemon_options_start_or_are_refused_in_one_line(
    tmp_path: Path, option: str, value: str
) -> None:
    tq = Taskq(tmp_path / "fuzz-spool")
    log = tmp_path / "daemon-fuzz.log"
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool)}
    with open(log, "wb") as f:
        proc = subprocess.Popen([*TASKQ, "daemon", option, value], stderr=f, env=env)
        try:
            wait_for(
                lambda: proc.poll() is not None or b"started on" in log.read_bytes(),
                60,
                f"taskq daemon {option} {value!r} to start or refuse",
            )
            if proc.poll() is None:
                tq.submit("--", "true")  # the daemon takes work and stops cleanly
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(60) == 0, log.read_text()
                assert "Traceback" not in log.read_text()
                return
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    text = log.read_text()
    assert proc.returncode == 2 and text.startswith("taskq: ") and text.count("\n") == 1, text
