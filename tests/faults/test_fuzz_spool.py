"""The spool fuzzer: hostile files everywhere the daemon and the operator commands read.

Hypothesis writes arbitrary bytes, arbitrary JSON (huge and non-finite
numbers, deep nesting, NUL and control characters, wrong types), FIFOs,
symbolic links, hard links, directories and arbitrary names into every
directory of a private spool: due buckets, pending/ itself, claimed/,
waiting/, the end states, paused/, schedules (schedule.json, state.json,
journals), logs (journals, output, status and owner files, those of the
good tasks among them), keys/, deps/, ids/, tmp/, run/ (counts.tsv,
daemons' records, locks) and the spool's root, beside good tasks, with one
real daemon running throughout. After each example: the daemon still runs,
the good tasks ran (never early: their own stamps say so), every bad file
the daemon reads is gone from its place into corrupt/ with a one-line
reason, and a few operator commands exit with a documented status and no
traceback. At the end, fsck repairs the rest, every operator command runs
clean, and a restarted daemon does the same again (and every operator
command but the shows of planted names, run once already). A separate property
does the same for config.toml.

Derandomised, TASKQ_FUZZ_SPOOL examples (default 16, beside the issue's
reproductions); raise it for a
longer run (README, "Testing").
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from conftest import TASKQ, Daemon, Taskq, read_stamps, wait_for
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from taskq.errors import CorruptFile
from taskq.schedules.store import Schedule
from taskq.spool.layout import Spool
from taskq.spool.pause import read as read_pause
from taskq.spool.task import MAX_BODY, TaskBody, TaskName, bucket_of, day_of, new_id

EXAMPLES = int(os.environ.get("TASKQ_FUZZ_SPOOL", "16"))  # ~2 min of one quiet CI worker
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI never flakes on a new one
    database=None,
    phases=[Phase.explicit, Phase.generate],  # report, do not shrink for minutes
    suppress_health_check=list(HealthCheck),
)
pytestmark = [
    pytest.mark.filterwarnings("ignore:Generating overly large repr"),
    pytest.mark.slow,  # each example is real processes: a minute or more in all
]
STATUSES = {0, 1, 2, 3, 4, 75, 77, 78, 124, 125, 126}  # taskq(1) EXIT STATUS
NOW = time.time_ns() // 1000
GOOD_QUEUE = "good"
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)

# -- what a file holds -----------------------------------------------------------

ODD_TEXT = ["", "\0", "\x1b[31m", "a\nb", "a=b", "/", "..", "\u202e", "9999-12-31T23:59:59Z"]
ODD_TEXT += ["now + 1 day", "0777", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "\udcff"]
numbers = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 1, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([9e307, 1e300, 1e-9, 1e12, float("inf"), float("nan")]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.text(max_size=8),
    st.sampled_from(ODD_TEXT),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


def dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode(errors="surrogatepass")


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


GOOD = TaskBody(id=new_id(NOW), argv=["true"], run_at=NOW, submitted_at=NOW, queue="elsewhere")
GOOD_BODY = json.loads(GOOD.to_json())
# Every field but argv may be anything; argv is only ever made unrunnable, so
# that no example runs a command of hypothesis's choosing.
BAD_ARGV = st.one_of(
    st.sampled_from([[], "true", [1], [["true"]], ["tr\0ue"], None, {"a": "b"}]),
    st.builds(lambda n: f"@{nested(n)}", st.integers(900, 5000)),
)


def _body_with(key: str, value: Any) -> bytes:
    if isinstance(value, str) and value.startswith("@["):  # deep nesting, written raw
        return json.dumps({**GOOD_BODY, key: "DEEP"}).replace('"DEEP"', value[1:]).encode()
    return dump({**GOOD_BODY, key: value})


bodies = st.one_of(
    st.builds(_body_with, st.sampled_from(sorted(set(GOOD_BODY) - {"argv"})), values),
    st.builds(_body_with, st.just("argv"), BAD_ARGV),
    st.builds(lambda n: dump(GOOD_BODY)[:n], st.integers(0, 300)),  # truncated
    st.builds(lambda v: b'{"version": 1, "x": ' + v.encode() + b"}", st.just(nested(4000))),
)
contents = st.one_of(
    st.binary(max_size=200),
    st.builds(dump, values),
    bodies,
    st.just(b"HUGE"),  # stands for a file over MAX_BODY (kept out of reprs)
)


@dataclass(frozen=True)
class Drop:
    """One hostile entry: where, under what name, of what kind, holding what."""

    place: str
    name: str
    kind: str  # file, fifo, symlink, hardlink, directory
    data: bytes = b""
    target: str = "/etc/passwd"


# -- where it goes, and under what name -------------------------------------------

PLACES = [
    "bucket", "pending", "claimed", "waiting", "failed", "cancelled", "done", "paused",
    "schedule", "logs", "run", "keys", "deps", "ids", "tmp", "root",
]  # fmt: skip
odd_names = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=SURROGATES),
    min_size=1,
    max_size=40,
).filter(lambda s: s not in (".", "..") and not s.startswith("."))


def task_name(n: int) -> str:
    return str(TaskName(NOW - 120_000_000 + n, new_id(NOW), 1))


def claim_name(n: int, host: str) -> str:
    pid = 4_000_000 + n  # beyond pid_max: no daemon of that pid lives
    return f"{task_name(n)}_started_20000101T000000.000000Z_{pid}_{host}"


names = st.one_of(
    odd_names,
    st.builds(task_name, st.integers(0, 10**6)),
    st.builds(claim_name, st.integers(0, 10**6), st.sampled_from(["fuzzhost", "elsewhere"])),
    st.sampled_from(["journal", "1.out", "1.status", "owner", "counts.tsv", "x_1.status"]),
    st.sampled_from(["x_1.lock", "schedule.json", "state.json", "ended.done", "config.toml"]),
    st.sampled_from(["200001010000", "999999999999", "doorbell", "20000101"]),
)
kinds = st.sampled_from(["file"] * 6 + ["fifo", "symlink", "hardlink", "directory"])
targets = st.sampled_from(["/etc/passwd", "..", "/", "nonexistent", "../pending", "/dev/zero"])
GOOD_SCHEDULE: dict[str, Any] = {
    "version": 1, "name": "NAME", "cron": None, "every": 3600.0, "tz": "UTC",
    "anchor": "2026-01-01T00:00:00.000000Z", "start": None, "end": None,
    "catchup": "latest", "overlap": "skip", "jitter": 0.0, "paused": False,
    "created": "2026-01-01T00:00:00.000000Z", "since": "2026-01-01T00:00:00.000000Z",
    "task": {"argv": ["true"], "cwd": "/", "env": {}, "queue": "default", "max_attempts": 1},
}  # fmt: skip
SCHEDULE_EDITS = st.one_of(
    st.tuples(st.sampled_from(sorted(set(GOOD_SCHEDULE) - {"name", "task"})), values),
    st.tuples(st.just("every"), st.sampled_from([1e-9, 1e12, 0, -1, float("nan")])),
    st.tuples(st.just("jitter"), st.sampled_from([1e300, -1, 1e12])),
    st.tuples(st.sampled_from(["start", "end"]), st.sampled_from(["9999-01-01T00:00:00Z"])),
    st.tuples(st.just("cron"), st.sampled_from(["0 0 1 1 *", "61 * * * *", "* * 30 2 *"])),
    st.tuples(st.just("task"), st.builds(lambda v: {**GOOD_SCHEDULE["task"], "env": v}, values)),
)
schedule_drops = st.builds(
    lambda edits: Drop("schedule", "schedule.json", "file", dump({**GOOD_SCHEDULE, **dict(edits)})),
    st.lists(SCHEDULE_EDITS, min_size=1, max_size=2),
)
pause_drops = st.builds(
    lambda name, until, at: Drop("paused", name, "file", dump({"until": until, "paused_at": at})),
    st.sampled_from(["other", "x", "a.b"]) | odd_names,
    values,
    values,
)
journal_drops = st.builds(
    lambda records: Drop("logs", "journal", "file", b"\n".join(map(dump, records))),
    st.lists(
        st.builds(lambda k, v: {"event": "start", "time": "2026-01-01T00:00:00Z", k: v},
                  st.sampled_from(["attempt", "pid", "time", "run_at", "lateness", "x"]),
                  values),
        max_size=4,
    ),
)  # fmt: skip
drops = st.lists(
    st.one_of(
        st.builds(Drop, st.sampled_from(PLACES), names, kinds, contents, targets),
        schedule_drops,
        pause_drops,
        journal_drops,
    ),
    min_size=1,
    max_size=8,
)


def _poison(**changes: Any) -> Drop:
    return Drop("bucket", task_name(len(changes)), "file", dump({**GOOD_BODY, **changes}))


# issue 23's reproductions, tried first in every run (hypothesis's explicit phase)
REPRODUCTIONS = [
    [_poison(argv=["echo", "a\0b"]), _poison(cwd="/\0"), _poison(env={"X": "a\0b"})],
    [_poison(env={"A=B": "1"}), _poison(expires=9e307), Drop("bucket", task_name(9), "file",
        _body_with("argv", f"@{nested(5000)}"))],
    [Drop("logs", "journal", "fifo"), Drop("run", "counts.tsv", "fifo"),
     Drop("run", "x_1.status", "fifo"), Drop("schedule", "schedule.json", "file",
        dump({**GOOD_SCHEDULE, "every": 1e-9}))],
    [Drop("schedule", "schedule.json", "file", dump({**GOOD_SCHEDULE, "jitter": 1e300})),
     Drop("schedule", "schedule.json", "file", dump({**GOOD_SCHEDULE, "every": 1e12})),
     Drop("schedule", "schedule.json", "file",
        dump({**GOOD_SCHEDULE, "cron": "0 0 1 1 *", "every": None,
              "start": "9999-01-01T00:00:00.000000Z"}))],
    [Drop("bucket", "x\ntaskq[1]: started 01ARZ3NDEKTSV4RRFFQ69G5FAV attempt 1", "file")],
]  # fmt: skip

# Where the daemon itself reads every entry (so a bad one must leave its place
# while it runs); the rest are left to fsck, or are not task files at all.
DAEMON_READS = {"bucket", "pending", "claimed", "paused", "schedule"}
FSCK_READS = DAEMON_READS | {"waiting", "failed", "cancelled", "done", "root"}


@dataclass
class Run:
    """One fuzzed spool and its daemon, across examples."""

    tq: Taskq
    root: Path
    stamps: Path
    daemon: Daemon | None = None
    placed: list[tuple[Path, Drop]] = field(default_factory=list)
    good: dict[str, float] = field(default_factory=dict)  # id -> run_at (epoch s)
    n: int = 0

    def start(self, tag: str) -> None:
        self.daemon = Daemon(
            self.tq,
            self.root / f"daemon-{tag}.log",
            "--host-id", "fuzzhost", "--rescan", "0.3s", "--lease", "2s", "--workers", "4",
        )  # fmt: skip

    def directory(self, drop: Drop, good_id: str) -> Path:
        spool = self.tq.spool
        where = {
            "bucket": spool / "pending" / bucket_of(NOW - 120_000_000),
            "pending": spool / "pending",
            "done": spool / "done" / day_of(NOW),
            "schedule": spool / "schedules" / f"fuzz{self.n}",
            # A good task's own journal may be anything; its attempt files are
            # its own business (planted ones get it quarantined, by design).
            "logs": spool / "logs" / (good_id if drop.name == "journal" else new_id(NOW)),
            "deps": spool / "deps" / new_id(NOW),
            "ids": spool / "ids" / good_id[-2:],
            "root": spool,
        }.get(drop.place, spool / drop.place)
        where.mkdir(parents=True, exist_ok=True)
        return where

    def plant(self, drop: Drop, good_id: str) -> None:
        self.n += 1
        path = self.directory(drop, good_id) / drop.name
        if os.path.lexists(path) or drop.name in ("doorbell", "config.toml"):
            return  # (the real doorbell and config.toml are fuzzed apart)
        for _ in range(5):
            try:
                self._make(path, drop)
                break
            except FileNotFoundError:
                if path.parent.exists():
                    raise
                path.parent.mkdir(parents=True)  # the daemon pruned an empty bucket meanwhile
        self.placed.append((path, drop))

    def _make(self, path: Path, drop: Drop) -> None:
        """Make one planted file of its kind at path."""
        if drop.kind == "fifo":
            os.mkfifo(path, 0o600)
        elif drop.kind == "symlink":
            os.symlink(drop.target, path)
        elif drop.kind == "directory":
            path.mkdir()
        elif drop.kind == "hardlink" and self.placed and self.placed[-1][0].is_file():
            os.link(self.placed[-1][0], path)
        else:
            data = b"{" * (MAX_BODY + 1) if drop.data == b"HUGE" else drop.data
            if drop.place == "schedule":  # named as its directory, or it is refused at once
                data = data.replace(b'"NAME"', json.dumps(path.parent.name).encode())
            path.write_bytes(data)
            path.chmod(0o600)

    def submit_good(self) -> str:
        run_at = time.time() + 0.25  # (past by the time it is filed, on a loaded machine: so be it)
        cmd = f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {self.stamps}'
        task_id = self.tq.submit(
            "--queue", GOOD_QUEUE, "--at", f"@{run_at:.6f}", "--", "sh", "-c", cmd
        )
        self.good[task_id] = run_at
        return task_id


def sound(path: Path, drop: Drop) -> bool:
    """Whether a planted file happens to be sound (a mutation that stayed valid)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False  # (and never opened: a FIFO would block the test)
        if drop.place == "schedule":
            return Schedule.from_json(path.read_bytes()).name == path.parent.name
        if drop.place == "paused":
            read_pause(str(path))
            return True
        return TaskBody.from_json(path.read_bytes()).id in path.name
    except (CorruptFile, OSError):
        return False


def left_in_place(run: Run, places: set[str]) -> list[str]:
    """Planted entries in these places that are still there, and are not sound files."""
    out = []
    for path, drop in run.placed:
        if drop.place not in places or not os.path.lexists(path):
            continue
        if drop.place == "schedule" and drop.name != "schedule.json":
            continue  # state.json and journals are caches and history: never quarantined
        if not sound(path, drop):
            out.append(f"{drop.place}/{drop.name!r} ({drop.kind})")
    return out


def no_traceback(proc: subprocess.CompletedProcess[bytes], what: str) -> None:
    assert b"Traceback" not in proc.stderr, f"{what}: {proc.stderr.decode(errors='replace')}"
    assert proc.returncode in STATUSES, (what, proc.returncode, proc.stderr)


def operator_commands(run: Run, planted: bool = True) -> Iterator[list[str]]:
    """Every operator command, and (planted) a show of each planted schedule and task name."""
    good = next(iter(run.good), new_id(NOW))
    yield from (
        ["ls"], ["ls", "--json"], ["ls", "--state", "failed,cancelled,waiting"],
        ["show", good], ["show", "--json", good], ["logs", good],
        ["wait", "--timeout", "1s", good], ["stats"], ["stats", "--json"], ["status"],
        ["status", "--json"], ["fsck", "--dry-run"], ["fsck", "--dry-run", "--json"],
        ["schedule", "ls"], ["schedule", "ls", "--json"], ["gc", "--dry-run"],
    )  # fmt: skip
    for path, drop in run.placed if planted else []:
        if drop.place == "schedule":
            yield ["schedule", "show", path.parent.name]
        elif drop.place in ("bucket", "claimed", "waiting", "failed") and "_" in drop.name:
            yield ["show", drop.name.split("_")[1]]  # a planted name's id, if it has one


def run_commands(run: Run, commands: list[list[str]]) -> None:
    for command in commands:
        no_traceback(run.tq.run(*command, check=False), " ".join(command))


def reason_of(entry: Path) -> Path:
    return entry if entry.name.endswith(".reason") else Path(f"{entry}.reason")


def check_example(run: Run, planted: list[tuple[Path, Drop]]) -> None:
    assert run.daemon is not None
    wait_for(
        lambda: {t for t, _, _ in read_stamps(run.stamps)} >= set(run.good),
        60,
        "the good tasks to run",
    )
    for task_id, _, when in read_stamps(run.stamps):
        assert when >= run.good[task_id], f"{task_id} started early"
    wait_for(lambda: not left_in_place(run, DAEMON_READS), 30, "the daemon to quarantine")
    assert run.daemon.proc.poll() is None, run.daemon.text()
    corrupt = run.tq.spool / "corrupt"
    # A file is moved into corrupt/ first and its reason written after.
    wait_for(lambda: all(reason_of(e).exists() for e in corrupt.iterdir()), 30, "the reasons")
    for entry in corrupt.iterdir():
        text = reason_of(entry).read_text()
        assert text.count("\n") == 1 and text.strip(), entry
    commands = list(operator_commands(run))
    run_commands(run, commands[run.n % 4 :: 5][:3])  # a few, different ones each time


def test_hostile_files_anywhere_never_stop_the_daemon_or_the_commands(tmp_path: Path) -> None:
    root = tmp_path
    run = Run(Taskq(root / "spool"), root, root / "stamps")
    Spool(str(run.tq.spool)).init()
    run.tq.run("schedule", "add", "sound", "--every", "1h", "--", "true")
    run.start("first")

    def with_reproductions(test: Any) -> Any:
        for dropped in REPRODUCTIONS:
            test = example(dropped=dropped)(test)
        return test

    @FUZZ
    @with_reproductions
    @given(dropped=drops)
    def one(dropped: list[Drop]) -> None:
        good_id = run.submit_good()
        before = len(run.placed)
        for drop in dropped:
            run.plant(drop, good_id)
        check_example(run, run.placed[before:])

    try:
        one()
        assert run.daemon is not None
        assert run.daemon.stop() == 0, run.daemon.text()
        no_traceback(run.tq.run("fsck", check=False), "fsck")
        assert not left_in_place(run, FSCK_READS)
        run_commands(run, list(operator_commands(run)))
        run.start("restarted")  # a restart meets whatever is left, and does the same
        run.submit_good()
        check_example(run, [])
        # (the planted names were each shown once above; their files are unchanged since)
        run_commands(run, list(operator_commands(run, planted=False)))
        assert run.daemon.stop() == 0, run.daemon.text()
    finally:
        if run.daemon is not None:
            if run.daemon.proc.poll() is None:
                run.daemon.kill()
            else:
                run.daemon.stop()  # (closes its log)


# -- config.toml -------------------------------------------------------------------

toml_values = st.one_of(
    st.sampled_from(["inf", "nan", "-inf", "1e300", "0", "-1", "true", '"30s"', '"1d"']),
    st.sampled_from(['"x\\u0000"', "[]", '["true"]', '[""]', nested(3000), "9" * 30]),
    st.builds(lambda v: json.dumps(v), st.text(max_size=10)),
    st.builds(str, st.integers()),
)
toml_docs = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda table, key, value: f"[{table}]\n{key} = {value}\n".encode(),
        st.sampled_from(["notify", "limits", "security", "other"]),
        st.sampled_from(["command", "on", "timeout", "max_overdue", "min_free_bytes"]),
        toml_values,
    ),
    st.builds(
        lambda value: f'[notify]\ncommand = ["true"]\ntimeout = {value}\n'.encode(), toml_values
    ),
)


@settings(FUZZ, max_examples=max(6, EXAMPLES // 3))
@given(doc=toml_docs)
def test_config_toml_is_one_line_and_78_or_taken(tmp_path: Path, doc: bytes) -> None:
    root = Path(tempfile.mkdtemp(prefix="config-", dir=tmp_path))  # one per example
    try:
        tq = Taskq(root / "spool")
        Spool(str(tq.spool)).init()
        (tq.spool / "config.toml").write_bytes(doc)
        for command in (["submit", "--in", "1h", "--", "true"], ["stats"], ["fsck", "--dry-run"]):
            no_traceback(tq.run(*command, check=False), " ".join(command))
        log = root / "daemon.log"
        with open(log, "wb") as err:
            daemon = subprocess.Popen(
                [*TASKQ, "daemon", "--host-id", "cfg"],
                env={**os.environ, "TASKQ_SPOOL": str(tq.spool)},
                stderr=err,
            )
        try:  # refused at once, or it starts: then it stops as asked
            wait_for(lambda: daemon.poll() is not None or b"started on" in log.read_bytes(), 60)
            daemon.send_signal(signal.SIGTERM)
            status = daemon.wait(timeout=30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        text = log.read_bytes()
        assert b"Traceback" not in text and status in (0, 78), (status, text)
        if status == 78:
            assert text.count(b"\n") == 1, text
    finally:
        shutil.rmtree(root, ignore_errors=True)
