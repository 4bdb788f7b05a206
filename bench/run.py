"""taskq's benchmark suite: figures and ratios measured side by side, one run.

    python bench/run.py [--quick] [--rounds N] [--scale N] [--only NAME ...]

Needs the bench extra (pip install '.[bench]', which brings huey). Prints a
table: what was measured, taskq's figure, the reference measured on this
machine in the same run, and the ratio. Every section runs --rounds times
(3 by default), taskq and its reference in turn each time (A B A B A B),
so one noisy run does not decide: each row shows the round whose ratio is
the median, and the ratio as its median with the spread (lowest-highest)
over the rounds. Sections:

  submit   durable submit throughput (tasks spread over the next day, about
           seven to a minute bucket): `taskq submit` one process per task,
           `--batch`, huey's SqliteHuey schedule(), and the raw rate of
           create+write+fsync+rename(+fsync dir) on the same disk
  lateness isolated tasks: p50/p99/max of start - run_at, as the task sees
           it, for taskq and for huey's consumer with default settings
  burst    10,000 tasks with one run_at, command `true`, 16 workers: time
           until all have started, against Python starting `true` with 16
           in flight, and against the floor of the spool's own file work
           per attempt with no scheduler around it (burst_floor.py)
  scale    N tasks pending in future buckets (default 100,000; --scale
           1000000 for the full case): daemon RSS, idle CPU, start-up to the
           first dispatch, and lateness against an empty spool; then the
           operator commands, each against the same command on a spool
           holding only the 1,100 tasks they work on: show, cancel,
           reschedule, ls --limit 10, full ls (first run, then warm:
           lines/s and peak RSS),
           stats (warm; the first run is shown too) and one poll of
           wait over 1,000 ids
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import burst_floor

HERE = Path(__file__).resolve().parent
TASKQ = [sys.executable, "-m", "taskq"]
Row = tuple[str, str, str, str, float | None]
ROUNDS: list[list[Row]] = []  # each round's rows, in the order the sections made them


def row(what: str, ours: str, ref: str = "", ratio: str = "", value: float | None = None) -> None:
    """One figure of this round; value is its ratio as a number, for the median over rounds."""
    ROUNDS[-1].append((what, ours, ref, ratio, value))
    versus = f" vs {ref}" + (f" ({ratio})" if ratio else "") if ref else ""
    print(f"  {what}: {ours}{versus}", flush=True)


def summary() -> list[tuple[str, str, str, str]]:
    """Each row over the rounds: the median round's figures, the ratio's median and spread."""
    table = []
    for same in zip(*ROUNDS, strict=True):
        valued = [r for r in same if r[4] is not None]
        if len(same) == 1 or len(valued) != len(same):
            what, ours, ref, ratio, _ = same[0]
            if len(same) > 1:
                # No ratio to take the median of: every round's figures.
                ours = " / ".join(r[1] for r in same)
                ref = " / ".join(r[2] for r in same) if ref else ""
                ratio = " / ".join(r[3] for r in same) if ratio else ""
            table.append((what, ours, ref, ratio))
            continue
        ranked = sorted(valued, key=lambda r: r[4] or 0.0)
        what, ours, ref, ratio, _ = ranked[(len(ranked) - 1) // 2]
        values = [r[4] or 0.0 for r in ranked]
        unit = "x closer" if ratio.endswith("closer") else "x"
        median = statistics.median(values)
        spread = f"{values[0]:.2f}-{values[-1]:.2f}"
        table.append((what, ours, ref, f"{median:.2f}{unit} ({spread})"))
    return table


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1e3:.1f} ms"


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def now_us() -> int:
    return time.time_ns() // 1000


class Spooled:
    """A temporary spool with helpers to run taskq against it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**os.environ, "TASKQ_SPOOL": str(root)}

    def run(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(
            [*TASKQ, *args], env=self.env, input=data, check=True, capture_output=True
        ).stdout

    def daemon(self, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([*TASKQ, "daemon", *args], env=self.env, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while not list(self.root.glob("run/*.status")):
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("the daemon did not start")
            time.sleep(0.01)
        return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(30)


def wait_lines(path: Path, n: int, timeout: float) -> list[str]:
    deadline = time.time() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n or time.time() > deadline:
            return lines
        time.sleep(0.02)


# -- submit -------------------------------------------------------------------


def bench_submit(tmp: Path, quick: bool) -> None:
    print("submit throughput (durable):", flush=True)
    raw_n = 300 if quick else 1000
    raw = _raw_durable(tmp / "raw", raw_n)
    sp = Spooled(tmp / "submit")
    n_single = 30 if quick else 100
    t0 = time.perf_counter()
    for i in range(n_single):
        sp.run("submit", "--in", f"{3600 + i * 8.64:.2f}s", "--", "true")
    single = n_single / (time.perf_counter() - t0)
    n_batch = 2000 if quick else 10_000
    data = b"".join(
        json.dumps({"command": ["true"], "in": 3600 + i * 8.64}).encode() + b"\n"
        for i in range(n_batch)
    )
    t0 = time.perf_counter()
    out = sp.run("submit", "--batch", "-", data=data)
    batch = n_batch / (time.perf_counter() - t0)
    assert len(out.split()) == n_batch
    lib = _library_submits(tmp / "lib", 300 if quick else 1000)
    hue = _huey_schedules(tmp, 500 if quick else 2000)
    group = _raw_group_commit(tmp / "group", n_batch)
    one, click = _one_submit_against_click(sp, 10 if quick else 30)
    row(
        "one `taskq submit` process",
        f"{one * 1000:.0f} ms",
        f"{click * 1000:.0f} ms `python -c 'import click'`",
        f"{one / click:.2f}x",
        value=one / click,
    )
    row(
        "`taskq submit --batch`",
        f"{batch:,.0f}/s",
        f"{group:,.0f}/s raw group commit",
        f"{batch / group:.2f}x",
        value=batch / group,
    )
    row(
        "single `taskq submit` processes",
        f"{single:,.0f}/s",
        f"{raw:,.0f}/s raw fsync'd files",
        f"{single / raw:.2f}x",
        value=single / raw,
    )
    row(
        "library submit(), one process",
        f"{lib:,.0f}/s",
        f"{raw:,.0f}/s raw fsync'd files",
        f"{lib / raw:.2f}x",
        value=lib / raw,
    )
    row(
        "`taskq submit --batch`",
        f"{batch:,.0f}/s",
        f"{single:,.0f}/s single submits",
        f"{batch / single:.0f}x",
        value=batch / single,
    )
    row(
        "`taskq submit --batch`",
        f"{batch:,.0f}/s",
        f"{hue:,.0f}/s huey SqliteHuey schedule()",
        f"{batch / hue:.2f}x",
        value=batch / hue,
    )
    row(
        "library submit(), one process",
        f"{lib:,.0f}/s",
        f"{hue:,.0f}/s huey SqliteHuey schedule()",
        f"{lib / hue:.2f}x",
        value=lib / hue,
    )


def _raw_durable(directory: Path, n: int) -> float:
    """create + write + fsync + rename + fsync(dir): the floor of a durable file."""
    (directory / "tmp").mkdir(parents=True)
    (directory / "new").mkdir()
    dfd = os.open(directory / "new", os.O_RDONLY)
    t0 = time.perf_counter()
    for i in range(n):
        tmp = directory / "tmp" / str(i)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b'{"argv": ["true"]}\n' * 10)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, directory / "new" / str(i))
        os.fsync(dfd)
    elapsed = time.perf_counter() - t0
    os.close(dfd)
    return n / elapsed


def _raw_group_commit(directory: Path, n: int) -> float:
    """The disk's group-commit rate: write n files, syncfs, rename the n, syncfs."""
    from taskq.spool.fsutil import syncfs

    (directory / "tmp").mkdir(parents=True)
    (directory / "new").mkdir()
    body = b'{"argv": ["true"]}\n' * 10
    t0 = time.perf_counter()
    for i in range(n):
        fd = os.open(directory / "tmp" / str(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, body)
        os.close(fd)
    syncfs(str(directory))
    for i in range(n):
        os.rename(directory / "tmp" / str(i), directory / "new" / str(i))
    syncfs(str(directory))
    return n / (time.perf_counter() - t0)


def _one_submit_against_click(sp: Spooled, n: int) -> tuple[float, float]:
    """Median wall seconds of one `taskq submit` and of `python -c 'import click'`, alternated."""
    ours, click = [], []
    for i in range(n):
        t0 = time.perf_counter()
        sp.run("submit", "--in", f"{7200 + i}s", "--", "true")
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import click"], check=True)
        click.append(time.perf_counter() - t0)
    return statistics.median(ours), statistics.median(click)


def _library_submits(root: Path, n: int) -> float:
    from taskq.client.submit import submit
    from taskq.spool.layout import Spool
    from taskq.spool.task import TaskBody, new_id

    spool = Spool(str(root))
    spool.init()
    t0 = time.perf_counter()
    for i in range(n):
        now = now_us()
        submit(
            spool,
            TaskBody(
                id=new_id(now),
                argv=["true"],
                run_at=now + round((3600 + i * 8.64) * 1e6),
                submitted_at=now,
            ),
        )
    return n / (time.perf_counter() - t0)


def _huey_schedules(tmp: Path, n: int) -> float:
    env = {**os.environ, "BENCH_HUEY_DB": str(tmp / "sched.db"), "PYTHONPATH": str(HERE)}
    code = (
        "import time, huey_app\n"
        f"t0 = time.perf_counter()\n"
        f"for i in range({n}): huey_app.stamp.schedule(('/dev/null', 0.0), delay=3600 + i * 8.64)\n"
        f"print({n} / (time.perf_counter() - t0))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return float(out.stdout)


# -- lateness -----------------------------------------------------------------


def bench_lateness(tmp: Path, quick: bool) -> None:
    print("lateness of isolated tasks (start as the task sees it - run_at):", flush=True)
    n = 15 if quick else 40
    ours = _taskq_lateness(Spooled(tmp / "late"), n, tmp / "late-stamps")
    theirs = _huey_lateness(tmp, n)
    # Compared by distance from run_at: huey starts some tasks early (negative).
    for label, p in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        a, b = pct([abs(x) for x in ours], p), pct([abs(x) for x in theirs], p)
        row(
            f"|start - run_at| {label}",
            ms(a),
            f"{ms(b)} huey consumer",
            f"{b / a:.0f}x closer",
            value=b / a,
        )
    early = [x for x in theirs if x < 0]
    row(
        "tasks started early",
        f"0 of {len(ours)}" if min(ours) >= 0 else "SOME (a bug)",
        f"{len(early)} of {len(theirs)} huey, by up to {ms(-min(early, default=0.0))}",
    )


def _taskq_lateness(sp: Spooled, n: int, stamps: Path) -> list[float]:
    proc = sp.daemon()
    try:
        base = time.time() + 1.0
        data = b"".join(
            json.dumps(
                {
                    "command": [
                        "sh",
                        "-c",
                        f'echo "{base + 0.2 * i:.6f} $(date +%s.%N)" >> {stamps}',
                    ],
                    "run_at": base + 0.2 * i,
                }
            ).encode()
            + b"\n"
            for i in range(n)
        )
        sp.run("submit", "--batch", "-", data=data)
        lines = wait_lines(stamps, n, 30 + 0.2 * n)
    finally:
        stop(proc)
    return [float(b) - float(a) for a, b in (line.split() for line in lines)]


def _huey_lateness(tmp: Path, n: int) -> list[float]:
    if (
        shutil.which("huey_consumer") is None
        and not (Path(sys.executable).parent / "huey_consumer").exists()
    ):
        raise SystemExit("huey is not installed: pip install '.[bench]'")
    env = {**os.environ, "BENCH_HUEY_DB": str(tmp / "late.db"), "PYTHONPATH": str(HERE)}
    stamps = tmp / "huey-stamps"
    consumer = subprocess.Popen(
        [str(Path(sys.executable).parent / "huey_consumer"), "huey_app.huey"],
        env=env,
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)
        base = time.time() + 1.0
        code = (
            "import datetime, huey_app\n"
            f"for i in range({n}):\n"
            f"    due = {base} + 0.2 * i\n"
            "    utc = datetime.timezone.utc\n"
            "    eta = datetime.datetime.fromtimestamp(due, utc).replace(tzinfo=None)\n"
            f"    huey_app.stamp.schedule(({str(stamps)!r}, due), eta=eta)\n"
        )
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
        lines = wait_lines(stamps, n, 30 + 0.2 * n)
    finally:
        consumer.terminate()
        consumer.wait(30)
    return [float(b) - float(a) for a, b in (line.split() for line in lines)]


# -- burst --------------------------------------------------------------------


def bench_burst(tmp: Path, quick: bool) -> None:
    n = 2000 if quick else 10_000
    print(f"burst: {n:,} tasks with one run_at, `true`, 16 workers:", flush=True)
    sp = Spooled(tmp / "burst")
    run_at = time.time() + 5 + n / 4000
    data = json.dumps({"command": ["true"], "run_at": run_at}).encode() + b"\n"
    sp.run("submit", "--batch", "-", data=data * n)
    proc = sp.daemon("--workers", "16")
    try:
        done = _wait_done(sp.root, n, 600)
    finally:
        stop(proc)
    starts = _start_times(sp.root)
    all_started = max(starts) - run_at
    lateness = [s - run_at for s in starts]
    raw = burst_floor.popen_rate(n, 16)
    floor = burst_floor.floor_rate(tmp / "floor", n, supervised=True)
    ours = n / all_started
    row(
        f"all {n:,} started after",
        f"{all_started:.2f} s ({ours:,.0f}/s)",
        f"{n / raw:.2f} s ({raw:,.0f}/s) Python Popen, 16 in flight",
        f"{ours / raw:.2f}x",
        value=ours / raw,
    )
    row(
        f"all {n:,} started after",
        f"{all_started:.2f} s ({ours:,.0f}/s)",
        f"{n / floor:.2f} s ({floor:,.0f}/s) the spool's file work alone (burst_floor.py)",
        f"{ours / floor:.2f}x",
        value=ours / floor,
    )
    row("burst lateness p50 / p99", f"{ms(pct(lateness, 0.5))} / {ms(pct(lateness, 0.99))}")
    row("all done after", f"{done - run_at:.2f} s")


def _wait_done(root: Path, n: int, timeout: float) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        count = (
            sum(len(os.listdir(d)) for d in (root / "done").iterdir())
            if (root / "done").exists()
            else 0
        )
        if count >= n:
            return time.time()
        time.sleep(0.05)
    raise RuntimeError("the burst did not finish")


def _start_times(root: Path) -> list[float]:
    from taskq.times.when import parse_when

    starts = []
    for journal in (root / "logs").glob("*/journal"):
        for line in journal.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "start":
                starts.append(parse_when(record["time"], 0) / 1e6)
    return starts


# -- scale --------------------------------------------------------------------


def bench_scale(tmp: Path, quick: bool, n: int) -> None:
    print(f"scale: {n:,} tasks pending in future buckets:", flush=True)
    empty = _scale_case(Spooled(tmp / "empty"), 0, tmp / "e-stamps")
    full = _scale_case(Spooled(tmp / "full"), n, tmp / "f-stamps")
    row("fill rate (--batch, group commit)", rate(n, full["fill"]))
    row(
        "daemon RSS after start",
        f"{full['rss']:.0f} MB",
        f"{empty['rss']:.0f} MB empty spool",
        f"{full['rss'] / empty['rss']:.2f}x",
        value=full["rss"] / empty["rss"],
    )
    row(
        "daemon CPU while idle (10 s)",
        f"{full['cpu'] * 100:.2f}%",
        f"{empty['cpu'] * 100:.2f}% empty",
        "",
    )
    row(
        "start-up to first dispatch",
        f"{full['first']:.3f} s",
        f"{empty['first']:.3f} s empty",
        f"{full['first'] / empty['first']:.2f}x",
        value=full["first"] / empty["first"],
    )
    row(
        "due-task lateness p50",
        ms(full["late"]),
        f"{ms(empty['late'])} empty",
        f"{full['late'] / empty['late']:.2f}x",
        value=full["late"] / empty["late"],
    )
    for key, what in (
        ("show", "taskq show ID"),
        ("cancel", "taskq cancel ID"),
        ("reschedule", "taskq reschedule ID"),
        ("ls10", "taskq ls --limit 10"),
        ("stats", "taskq stats (warm)"),
        ("stats_first", "taskq stats (first run)"),
        ("wait", "taskq wait of 1,000 ids, one poll"),
    ):
        cpu = f"{key}_cpu"
        row(
            what,
            f"{ms(full[key])} (CPU {ms(full[cpu])})",
            f"{ms(empty[key])} (CPU {ms(empty[cpu])}) empty",
            f"{full[key] / empty[key]:.2f}x (CPU {full[cpu] / empty[cpu]:.2f}x)",
        )
    row(
        f"taskq ls (warm), all {full['ls_lines'] - 1:,.0f} tasks",
        f"{full['ls_rate']:,.0f} lines/s ({full['ls_cpu_rate']:,.0f}/CPU-s), "
        f"peak RSS {full['ls_rss']:.0f} MB",
        f"{empty['ls_rss']:.0f} MB with {EXTRA:,} tasks",
        f"{full['ls_rss'] / empty['ls_rss']:.2f}x RSS",
    )
    row(
        "taskq ls, first run after the fill",
        f"{full['ls_first']:,.0f} lines/s",
        f"{empty['ls_first']:,.0f} lines/s with {EXTRA:,} tasks",
        "",
    )
    row(
        "taskq ls --no-command, all tasks",
        f"{full['names_rate']:,.0f} lines/s ({full['names_cpu_rate']:,.0f}/CPU-s), "
        f"peak RSS {full['names_rss']:.0f} MB",
        f"{empty['names_rss']:.0f} MB with {EXTRA:,} tasks",
        f"{full['names_rss'] / empty['names_rss']:.2f}x RSS",
    )


def _scale_case(sp: Spooled, n: int, stamps: Path) -> dict[str, float]:
    fill = _fill(sp, n)
    ops = _operator_figures(sp)
    due = time.time() - 1
    sp.run("submit", "--at", f"@{due:.6f}", "--", "sh", "-c", f"date +%s.%N >> {stamps}.first")
    t0 = time.time()
    proc = sp.daemon()
    try:
        first_line = wait_lines(Path(f"{stamps}.first"), 1, 30)
        first = float(first_line[0]) - t0
        time.sleep(2)
        rss = _rss_mb(proc.pid)
        cpu0 = _cpu_seconds(proc.pid)
        time.sleep(10)
        cpu = (_cpu_seconds(proc.pid) - cpu0) / 10
        base = time.time() + 1
        for i in range(10):
            at = base + 0.2 * i
            sp.run(
                "submit",
                "--at",
                f"@{at:.6f}",
                "--",
                "sh",
                "-c",
                f'echo "{at:.6f} $(date +%s.%N)" >> {stamps}',
            )
        lines = wait_lines(stamps, 10, 30)
    finally:
        stop(proc)
    late = statistics.median(float(b) - float(a) for a, b in (line.split() for line in lines))
    return {"fill": fill, "rss": rss, "cpu": cpu, "first": first, "late": late, **ops}


EXTRA = 1_100  # tasks the operator figures work on, in both spools


CPU: dict[str, float] = {}  # CPU seconds (user + system) of the last _median's runs


def _timed(sp: Spooled, *args: str) -> tuple[float, int, float, float]:
    """Run taskq once: wall seconds, lines of output, peak RSS in MB, CPU seconds."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*TASKQ, *args], env=sp.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    lines = sum(1 for _ in proc.stdout)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, lines, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _median(sp: Spooled, runs: list[tuple[str, ...]]) -> tuple[float, float]:
    """Median wall and CPU seconds of these runs."""
    results = [_timed(sp, *args) for args in runs]
    return statistics.median(r[0] for r in results), statistics.median(r[3] for r in results)


def _operator_figures(sp: Spooled) -> dict[str, float]:
    """The operator commands on this spool, with EXTRA more tasks to work on."""
    start = time.time() + 2 * 86400
    data = b"".join(
        json.dumps({"command": ["true"], "run_at": start + i}).encode() + b"\n"
        for i in range(EXTRA)
    )
    ids = sp.run("submit", "--batch", "-", data=data).decode().split()
    runs = {
        "show": [("show", ids[0])] * 5,
        "cancel": [("cancel", i) for i in ids[1:6]],
        "reschedule": [("reschedule", ids[6], "--in", f"{h}h") for h in range(1, 6)],
        "ls10": [("ls", "--limit", "10")] * 5,
        "stats_first": [("stats",)],
        "stats": [("stats",)] * 3,
        "wait": [("wait", "--timeout", "0s", *ids[100:1100])] * 3,
    }
    figures: dict[str, float] = {}
    for key, argvs in runs.items():
        figures[key], figures[f"{key}_cpu"] = _median(sp, argvs)
    wall, lines, rss, cpu = _timed(sp, "ls")  # bodies may have left the page cache
    figures.update(ls_first=lines / wall)
    wall, lines, rss, cpu = _timed(sp, "ls")
    figures.update(ls_rate=lines / wall, ls_cpu_rate=lines / cpu, ls_rss=rss, ls_lines=lines)
    wall, lines, rss, cpu = _timed(sp, "ls", "--no-command")
    figures.update(names_rate=lines / wall, names_cpu_rate=lines / cpu, names_rss=rss)
    return figures


def _fill(sp: Spooled, n: int) -> float:
    """Put n tasks into future buckets, spread over 30 days, with --batch."""
    t0 = time.perf_counter()
    chunk = 50_000
    start = time.time() + 86400
    for lo in range(0, n, chunk):
        data = b"".join(
            json.dumps({"command": ["true"], "run_at": start + (i * 30 * 86400 / n)}).encode()
            + b"\n"
            for i in range(lo, min(n, lo + chunk))
        )
        sp.run("submit", "--batch", "-", data=data)
    return time.perf_counter() - t0 if n else 1.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- main ---------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--scale", type=int, default=100_000, help="pending tasks for the scale case"
    )
    parser.add_argument("--only", nargs="*", choices=["submit", "lateness", "burst", "scale"])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each section, in turn")
    args = parser.parse_args()
    sections: dict[str, Callable[[Path], None]] = {
        "submit": lambda t: bench_submit(t, args.quick),
        "lateness": lambda t: bench_lateness(t, args.quick),
        "burst": lambda t: bench_burst(t, args.quick),
        "scale": lambda t: bench_scale(t, args.quick, args.scale),
    }
    for n in range(1, max(1, args.rounds) + 1):
        print(f"round {n}:", flush=True)
        ROUNDS.append([])
        with tempfile.TemporaryDirectory(prefix="taskq-bench-") as tmp:
            for name, section in sections.items():
                if args.only and name not in args.only:
                    continue
                directory = Path(tmp) / name
                directory.mkdir()
                section(directory)
    print()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"taskq benchmark, {os.cpu_count()} cores, {when}, {len(ROUNDS)} rounds")
    rows = summary()
    header = ("measure", "taskq", "reference (same machine, same run)", "ratio")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(4)]
    for r in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


if __name__ == "__main__":
    main()
