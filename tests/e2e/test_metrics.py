"""Prometheus metrics: the daemon's textfile and HTTP endpoint, checked against `taskq stats`
and, where Debian's prometheus package provides it, against promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, until, wait_for
from prometheus_client.parser import text_string_to_metric_families

from taskq.errors import EX_USAGE
from taskq.spool.states import STATES
from taskq.times.when import parse_when

StartDaemon = Callable[..., Daemon]
ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian package prometheus) is missing"
)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample as {(name, sorted labels without host and spool): value}."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(
                sorted((k, v) for k, v in s.labels.items() if k not in ("host", "spool"))
            )
            out[(s.name, labels)] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def fresh(path: Path, since: float) -> Samples | None:
    """The file's samples if its count was taken after `since`, with the loop's state in."""
    if not path.exists():
        return None
    samples = parse(path.read_text())
    counted = samples.get(("taskq_spool_counted_timestamp_seconds", ()), 0.0)
    return samples if counted > since and ("taskq_workers_busy", ()) in samples else None


@pytest.mark.slow
def test_metrics_match_stats_and_pass_promtool(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    gate, prom = tmp_path / "gate", tmp_path / "taskq.prom"
    daemon = start_daemon(
        "--workers", "1", "--metrics-file", str(prom), "--metrics-listen", "127.0.0.1:0"
    )
    ok = tq.submit("--", "true")
    bad = tq.submit("--max-attempts", "1", "--", "false")
    tq.wait_state(ok, ("done",))
    tq.wait_state(bad, ("failed",))
    tq.run("cancel", tq.submit("--in", "1h", "--", "true"))
    for _ in range(2):
        tq.submit("--queue", "later", "--in", "1h", "--", "true")
    blocker = tq.submit("--queue", "slow", "--", "sh", "-c", f"true {until(gate)}")
    tq.wait_state(blocker, ("running",))
    # The one worker is busy: these stay overdue in pending/ until the gate opens.
    behind = [tq.submit("--", "true") for _ in range(3)]
    settled = time.time()

    samples = wait_for(lambda: fresh(prom, settled), 30, "a count after the spool settled")
    _as_stats_counts(samples, json.loads(tq.run("stats", "--json").stdout))
    _as_the_loop_knows(samples, tq, blocker)
    _served_alike(samples, daemon)
    if PROMTOOL is not None:
        lint = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=prom.read_bytes(), capture_output=True
        )
        assert lint.returncode == 0, lint.stdout + lint.stderr
    assert prom.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if ".taskq.prom." in p.name] == []

    gate.touch()
    for task_id in behind:
        tq.wait_state(task_id, ("done",))
    assert daemon.stop() == 0
    last_words = parse(prom.read_text())
    assert value(last_words, "taskq_dispatching") == 0, "a stopped daemon says so"
    assert value(last_words, "taskq_attempts_total", outcome="succeeded") == 5


QUEUES = ("default", "later", "slow")


def _as_stats_counts(samples: Samples, report: dict[str, Any]) -> None:
    """Counts and the overdue backlog, as `taskq stats --json` reports them."""
    for state in STATES:
        for queue in QUEUES:
            expected = report["counts"][state].get(queue, 0)
            assert value(samples, "taskq_tasks", state=state, queue=queue) == expected
    assert value(samples, "taskq_overdue_tasks", queue="default") == 3
    assert report["overdue"]["default"]["count"] == 3
    counted = value(samples, "taskq_spool_counted_timestamp_seconds")
    oldest = parse_when(report["overdue"]["default"]["oldest_run_at"], 0) / 1e6
    age = value(samples, "taskq_oldest_overdue_age_seconds", queue="default")
    assert age == pytest.approx(counted - oldest, abs=1e-5)
    assert value(samples, "taskq_overdue_tasks", queue="later") == 0
    assert value(samples, "taskq_oldest_overdue_age_seconds", queue="later") == 0


def _as_the_loop_knows(samples: Samples, tq: Taskq, blocker: str) -> None:
    """Attempts, lateness, workers, dispatching, the clock and the last start."""
    assert value(samples, "taskq_attempts_total", outcome="succeeded") == 1
    assert value(samples, "taskq_attempts_total", outcome="failed") == 1
    assert value(samples, "taskq_lateness_seconds_count") == 3
    assert value(samples, "taskq_workers_busy") == 1
    assert value(samples, "taskq_workers") == 1
    assert value(samples, "taskq_dispatching") == 1
    assert 0 < value(samples, "taskq_clock_uncertainty_seconds") < 2
    started = next(r for r in tq.show(blocker)["attempts"] if r["event"] == "start")
    last = value(samples, "taskq_last_dispatch_timestamp_seconds")
    assert last == pytest.approx(parse_when(started["time"], 0) / 1e6, abs=1e-5)


def _served_alike(samples: Samples, daemon: Daemon) -> None:
    """The same counts over HTTP (the spool has not changed since)."""
    port = re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", daemon.text())
    assert port is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics", timeout=30) as response:
        served = parse(response.read().decode())
    for queue in QUEUES:
        for state in STATES:
            key = ("taskq_tasks", (("queue", queue), ("state", state)))
            assert served[key] == samples[key]


@needs_promtool
def test_example_alert_rules_are_valid() -> None:
    rules = ROOT / "examples" / "prometheus-alerts.yml"
    done = subprocess.run([str(PROMTOOL), "check", "rules", str(rules)], capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics-file", "/nonexistent/taskq.prom"], "no directory /nonexistent"),
        (["--metrics-listen", "9464"], "bad --metrics-listen '9464': expected ADDRESS:PORT"),
        (["--metrics-listen", "127.0.0.1:99999"], "bad --metrics-listen"),
    ],
)
@pytest.mark.slow
def test_bad_metrics_options_are_refused(tq: Taskq, args: list[str], message: str) -> None:
    out = tq.run("daemon", *args, check=False)
    assert out.returncode == EX_USAGE
    [line] = out.stderr.decode().splitlines()[:1]
    assert message in line
    assert not tq.spool.exists(), "nothing changed"


@pytest.mark.slow
def test_a_taken_port_stops_the_daemon_with_a_message(tq: Taskq) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = tq.run("daemon", "--metrics-listen", f"127.0.0.1:{port}", check=False)
    assert out.returncode != 0
    assert f"cannot serve metrics on 127.0.0.1:{port}" in out.stderr.decode()
    assert list((tq.spool / "run").iterdir()) == [], "the daemon left nothing in run/"


@pytest.mark.slow
def test_the_counting_child_answers_as_stats_and_comes_back(tq: Taskq) -> None:
    """The count runs in a child at a lower priority, and a dead child is replaced."""
    from taskq.observe import stats
    from taskq.observe.counting import NICE, Counter
    from taskq.spool.layout import Spool

    for queue in ("a", "b", "b"):
        tq.submit("--queue", queue, "--in", "1h", "--", "true")
    spool, now = Spool(str(tq.spool)), time.time_ns() // 1000
    counter = Counter(spool.root, "here")
    try:
        assert counter.count(now) == stats.collect(spool, now, "here")
        child = counter._proc
        assert child is not None
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(19, ours + NICE)
        child.kill()
        child.wait()
        with pytest.raises(OSError, match="the counting process ended"):
            counter.count(now)
        assert counter.count(now)["counts"]["pending"] == {"a": 1, "b": 2}
    finally:
        counter.close()


GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$spool": ".*", "$host": ".*",
                "$queue": ".*"}  # fmt: skip


def _dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target and variable of the example dashboard."""
    doc = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
    queries = [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        m = re.fullmatch(r"label_values\((.*), (\w+)\)", str(var.get("definition", "")))
        if m:
            queries.append((f"variable {var['name']}", m[1]))
    return queries


def _grafana_free(expr: str) -> str:
    for name, value in sorted(GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


@pytest.mark.slow
def test_dashboard_queries_use_exported_names_and_pass_promtool(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    prom = tmp_path / "taskq.prom"
    start_daemon("--metrics-file", str(prom))
    tq.wait_state(tq.submit("--", "true"), ("done",))
    ended = time.time()
    samples = wait_for(lambda: fresh(prom, ended), 30, "a count taken after the task ended")
    names = {name for name, _ in samples}
    labels = {k for family in text_string_to_metric_families(prom.read_text())
              for s in family.samples for k in s.labels}  # fmt: skip
    queries = _dashboard_queries()
    assert len(queries) >= 15
    rules = []
    for n, (title, expr) in enumerate(queries):
        expr = _grafana_free(expr)
        for used in re.findall(r"\btaskq_\w+", expr):
            assert used in names, f"{title}: {used} is not exported"
        grouped = re.findall(r"\bby \(([^)]*)\)", expr)
        matched = re.findall(r"(\w+)=~?\"", expr)
        for label in [*matched, *(x.strip() for g in grouped for x in g.split(","))]:
            assert label in labels, f"{title}: no exported series has the label {label}"
        rules.append(f"      - record: dashboard:query_{n}\n        expr: {json.dumps(expr)}\n")
    if PROMTOOL is None:
        pytest.skip("promtool (Debian package prometheus) is missing: names checked only")
    path = tmp_path / "dashboard-rules.yml"
    path.write_text("groups:\n  - name: dashboard\n    rules:\n" + "".join(rules))
    done = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
