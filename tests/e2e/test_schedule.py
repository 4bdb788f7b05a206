"""taskq schedule end to end: real daemons, real files, real signals.

Each occurrence's command records its nominal slot (TASKQ_SCHEDULED_AT) and
its real start time, so every assertion is about what ran and when, read
from what the tasks wrote, never from how long the test waited.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, kill_all, until, wait_for

SOAK_SLOTS = int(os.environ.get("TASKQ_SOAK_SCHEDULE", "20"))


def slot_cmd(stamps: Path, extra: str = "") -> list[str]:
    """Record 'SLOT START_EPOCH TASK_ID SCHEDULE' at the start of each run."""
    line = '"$TASKQ_SCHEDULED_AT $(date +%s.%N) $TASKQ_ID $TASKQ_SCHEDULE"'
    return ["sh", "-c", f"echo {line} >> {stamps}{extra}"]


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def runs(stamps: Path) -> list[tuple[float, float, str]]:
    """(slot, start, task id) of every run recorded, by slot."""
    if not stamps.exists():
        return []
    out = []
    for line in stamps.read_text().splitlines():
        slot, start, task, _ = line.split()
        out.append((epoch(slot), float(start), task))
    return sorted(out)


def history(tq: Taskq, name: str) -> list[dict[str, Any]]:
    path = tq.spool / "schedules" / name / "journal"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def show(tq: Taskq, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(tq.run("schedule", "show", "--json", name).stdout)
    return doc


# -- the command ----------------------------------------------------------------


@pytest.mark.slow
def test_add_makes_the_first_occurrence_as_an_ordinary_task(tq: Taskq, tmp_path: Path) -> None:
    out = tq.run("schedule", "add", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin",
                 "--queue", "ops", "--env", "A=1", "--json", "--", "echo", "hi")  # fmt: skip
    doc = json.loads(out.stdout)
    assert doc["name"] == "nightly" and doc["replaced"] is False
    task = tq.show(doc["task"])
    assert task["state"] == "pending"
    body = task.get("request", task)
    text = json.dumps(body)
    assert f"nightly@{doc['next']}" in text
    assert '"TASKQ_SCHEDULE": "nightly"' in text and doc["next"] in text
    assert '"A": "1"' in text and '"ops"' in text
    listed = json.loads(tq.run("schedule", "ls", "--json").stdout)
    assert [r["name"] for r in listed] == ["nightly"] and listed[0]["tz"] == "Europe/Berlin"
    written = json.loads((tq.spool / "schedules" / "nightly" / "schedule.json").read_text())
    assert written["cron"] == "30 2 * * *" and written["catchup"] == "latest"


@pytest.mark.slow
def test_bad_input_and_an_existing_name_change_nothing(tq: Taskq) -> None:
    tq.run("schedule", "add", "a", "--every", "1h", "--", "true")
    before = (tq.spool / "schedules" / "a" / "schedule.json").read_bytes()
    cases = [
        (["a", "--every", "2h"], 4, "exists; give --replace"),
        (["b", "--cron", "61 * * * *"], 2, "bad minute field"),
        (["b", "--every", "1h", "--tz", "Nowhere/Land"], 2, "not an IANA time zone"),
        (["b", "--every", "1h", "--catchup", "most"], 2, "bad --catchup"),
        (["b", "--every", "1h", "--cron", "@daily"], 2, "give --cron EXPR, --every DURATION or"),
        (["b", "--every-after", "1h", "--every", "1h"], 2, "or --every-after DURATION"),
        (["b", "--every-after", "1h", "--catchup", "all"], 2, "--catchup is latest"),
        (["b", "--cron", "@daily", "--except", "2026-13-01"], 2, "bad --except"),
        (["b", "--cron", "@daily", "--except-cron", "* 25 * * *"], 2, "bad hour field"),
        (["b", "--every", "1h", "--pause-after-failures", "0"], 2, "pause-after-failures"),
        (["b/c", "--every", "1h"], 2, "bad schedule name"),
    ]
    for args, status, message in cases:
        proc = tq.run("schedule", "add", *args, "--", "true", check=False)
        assert proc.returncode == status, proc.stderr
        assert message in proc.stderr.decode() and proc.stderr.decode().count("\n") == 1
    assert (tq.spool / "schedules" / "a" / "schedule.json").read_bytes() == before
    assert not (tq.spool / "schedules" / "b").exists()
    assert tq.run("schedule", "show", "nope", check=False).returncode == 3
    tq.run("schedule", "add", "a", "--every", "2h", "--replace", "--", "true")
    assert json.loads(tq.run("schedule", "ls", "--json").stdout)[0]["when"] == "every 2h00m"


@pytest.mark.slow
def test_rm_cancels_the_waiting_occurrence_and_frees_its_key(tq: Taskq) -> None:
    add = ("schedule", "add", "a", "--cron", "@yearly", "--json", "--", "true")
    doc = json.loads(tq.run(*add).stdout)
    removed = json.loads(tq.run("schedule", "rm", "a", "--json").stdout)
    assert removed["cancelled"] == [doc["task"]]
    assert tq.state(doc["task"]) == "cancelled"
    assert json.loads(tq.run("schedule", "ls", "--json").stdout) == []
    again = json.loads(tq.run(*add).stdout)  # the same slot: its key was freed
    assert (
        again["next"] == doc["next"]
        and again["task"] != doc["task"]
        and tq.state(again["task"]) == "pending"
    )


# -- running -----------------------------------------------------------------


@pytest.mark.slow
def test_next_equals_what_then_fires(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "s", "--every", "1s", "--catchup", "all", "--overlap", "allow",
           "--", *slot_cmd(stamps))  # fmt: skip
    listed = json.loads(tq.run("schedule", "next", "s", "-n", "5", "--json").stdout)
    predicted = [epoch(d["slot"]) for d in listed]
    start_daemon("--workers", "4")
    wait_for(lambda: {r[0] for r in runs(stamps)} >= set(predicted), 60, "the 5 slots to run")
    fired = [r for r in runs(stamps) if predicted[0] <= r[0] <= predicted[-1]]
    assert [r[0] for r in fired] == predicted  # each once, those and no other
    assert all(start >= slot for slot, start, _ in fired)  # never early


@pytest.mark.slow
def test_overlap_skip_records_each_skipped_slot(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps, gate = tmp_path / "stamps", tmp_path / "gate"
    tq.run("schedule", "add", "slow", "--every", "1s", "--", *slot_cmd(stamps, until(gate)))
    start_daemon("--workers", "4")
    wait_for(lambda: runs(stamps), 60, "the first run")

    def skipped() -> list[dict[str, Any]]:
        return [e for e in history(tq, "slow") if e.get("why") == "overlap"]

    wait_for(lambda: len(skipped()) >= 3, 60, "three slots skipped")
    opened = time.time()
    gate.touch()
    assert len(runs(stamps)) == 1  # nothing started while the first ran
    wait_for(lambda: [r for r in runs(stamps) if r[1] > opened], 60, "a run after the gate")
    first = runs(stamps)[0][0]
    during = {epoch(e["slot"]) for e in skipped()}
    assert all(first < s < opened + 1 for s in sorted(during)[:3])
    assert not during & {r[0] for r in runs(stamps)}
    shown = [o for o in show(tq, "slow")["occurrences"] if o.get("why") == "overlap"]
    assert len(shown) >= 3 and all(o["outcome"] == "skipped" for o in shown)


@pytest.mark.slow
def test_overlap_queue_starts_one_when_the_previous_ends(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps, gate = tmp_path / "stamps", tmp_path / "gate"
    tq.run("schedule", "add", "q", "--every", "1s", "--overlap", "queue",
           "--", *slot_cmd(stamps, until(gate)))  # fmt: skip
    start_daemon("--workers", "4")
    wait_for(lambda: runs(stamps), 60, "the first run")

    def events() -> list[dict[str, Any]]:
        return history(tq, "q")

    wait_for(lambda: [e for e in events() if e.get("why") == "overlap"], 60, "a skipped slot")
    queued = [e for e in events() if e["event"] == "queued"]
    assert len(queued) == 1
    assert len(runs(stamps)) == 1
    opened = time.time()
    gate.touch()
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "the queued run")
    first, second = runs(stamps)[:2]
    assert second[0] == epoch(queued[0]["slot"])  # the queued slot, with its own slot
    assert second[1] >= opened  # started after the previous one was let go
    assert second[0] == first[0] + 1


@pytest.mark.slow
def test_overlap_allow_runs_both(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps, gate = tmp_path / "stamps", tmp_path / "gate"
    tq.run("schedule", "add", "a", "--every", "1s", "--overlap", "allow",
           "--", *slot_cmd(stamps, until(gate)))  # fmt: skip
    start_daemon("--workers", "8")
    wait_for(lambda: len(runs(stamps)) >= 3, 60, "three runs at once")
    gate.touch()
    slots = [r[0] for r in runs(stamps)]
    assert slots == sorted(set(slots)) and slots[1] == slots[0] + 1


# -- catch-up after downtime ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["skip", "latest", "all", "all:2"])
def test_catch_up_after_every_daemon_was_down(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon], policy: str
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "c", "--every", "1s", "--catchup", policy, "--overlap", "allow",
           "--", *slot_cmd(stamps))  # fmt: skip
    first = start_daemon("--workers", "1")  # one at a time: the order of starts is the order
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "two runs")
    assert first.stop() == 0
    last = max(r[0] for r in runs(stamps))
    wait_for(lambda: time.time() > last + 5, 30, "five slots to pass with no daemon")
    restarted = time.time()
    start_daemon("--workers", "1", host="second")
    wait_for(lambda: any(r[0] > restarted + 2 for r in runs(stamps)), 60, "runs after the restart")
    decided = [e for e in history(tq, "c") if e["event"] in ("skipped", "caught-up")]
    decided_at = min(epoch(e["time"]) for e in decided if epoch(e["time"]) >= restarted)
    missed = [s for s in range(int(last) + 1, int(decided_at) + 1)]
    keep = {"skip": 0, "latest": 1, "all": len(missed), "all:2": 2}[policy]
    assert len(missed) >= 5

    def caught_up() -> list[float]:
        return [r[0] for r in runs(stamps) if last < r[0] <= decided_at]

    # On a loaded machine a live slot may start before the last caught-up
    # one has: wait for as many as are owed, then judge which ran.
    wait_for(lambda: len(caught_up()) >= keep, 60, f"{keep} caught-up runs")
    ran = caught_up()
    assert ran == missed[len(missed) - keep :]  # the latest `keep`, each once
    slots = [r[0] for r in runs(stamps)]
    assert len(slots) == len(set(slots))
    assert all(start >= slot for slot, start, _ in runs(stamps))
    if keep > 1:  # oldest first
        starts = [r[1] for r in runs(stamps) if r[0] in ran]
        assert starts == sorted(starts)


@pytest.mark.slow
def test_a_paused_schedule_runs_nothing_and_catches_nothing_up(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "p", "--every", "1s", "--catchup", "all", "--overlap", "allow",
           "--", *slot_cmd(stamps))  # fmt: skip
    start_daemon("--workers", "4")
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "two runs")
    tq.run("schedule", "pause", "p")
    paused = time.time()
    # The occurrence waiting at the pause is cancelled at its slot (unless it
    # was within a quarter interval of it: then it runs); nothing else is made.
    wait_for(lambda: time.time() > paused + 4, 30, "four slots paused")
    resumed = time.time()
    tq.run("schedule", "resume", "p")
    wait_for(lambda: any(r[0] > resumed + 1 for r in runs(stamps)), 60, "runs after resume")
    during = [r for r in runs(stamps) if paused + 1.5 < r[0] < resumed]
    assert during == []


# -- many daemons ---------------------------------------------------------------


@pytest.mark.slow
def test_three_daemons_with_kill_9_run_each_slot_once_never_early(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "soak", "--every", "1s", "--catchup", "all", "--overlap", "allow",
           "--", *slot_cmd(stamps))  # fmt: skip
    lease = ("--lease", "3s", "--rescan", "1s", "--workers", "4")
    daemons = [start_daemon(*lease, host=f"h{i}") for i in range(3)]
    first = time.time()
    rng = random.Random(12)
    kills = 0
    try:
        while time.time() < first + SOAK_SLOTS:
            time.sleep(rng.uniform(2, 6))  # when to kill: any time, by design
            i = rng.randrange(3)
            daemons[i].kill()  # SIGKILL
            kills += 1
            daemons[i] = start_daemon(*lease, host=f"h{i}-{kills}")
        tq.run("schedule", "pause", "soak")
        end = time.time()
        wait_for(lambda: {int(r[0]) for r in runs(stamps)} >= _slots(first, end), 90, "every slot")
    finally:
        kill_all(daemons)
    recorded = [r for r in runs(stamps) if int(first) + 1 <= r[0] <= end - 1]
    slots = [r[0] for r in recorded]
    late = sorted(start - slot for slot, start, _ in recorded)
    recorded_by_daemon = sorted(_daemon_lateness(tq, [task for _, _, task in recorded]))
    report = {
        "slots": len(set(slots)),
        "executions": len(slots),
        "duplicates": len(slots) - len(set(slots)),
        "early": sum(1 for x in late if x < 0),
        "kills": kills,
        "lateness_p50_ms": round(statistics.median(late) * 1000, 1),
        "lateness_p99_ms": round(_p99(late) * 1000, 1),
        "daemon_lateness_p50_ms": round(statistics.median(recorded_by_daemon) * 1000, 2),
        "daemon_lateness_p99_ms": round(_p99(recorded_by_daemon) * 1000, 2),
    }
    print(f"schedule soak: {json.dumps(report)}")
    (tmp_path / "report.json").write_text(json.dumps(report))
    if os.environ.get("TASKQ_SOAK_REPORT"):
        Path(os.environ["TASKQ_SOAK_REPORT"]).write_text(json.dumps(report))
    assert report["duplicates"] == 0 and report["early"] == 0
    assert set(slots) == _slots(first, end)


def _daemon_lateness(tq: Taskq, tasks: list[str]) -> list[float]:
    """Each run's lateness as its daemon journalled it (start - run_at, before the spawn)."""
    out = []
    for task in tasks:
        for line in (tq.spool / "logs" / task / "journal").read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == "start":
                out.append(float(record["lateness"]))
    return out


def _p99(values: list[float]) -> float:
    return values[max(0, int(len(values) * 0.99) - 1)]


def _slots(first: float, end: float) -> set[int]:
    return set(range(int(first) + 1, int(end)))


@pytest.mark.slow
def test_a_bad_schedule_file_is_quarantined_and_the_daemon_carries_on(
    tq: Taskq, tmp_path: Path, start_daemon: Callable[..., Daemon]
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "good", "--every", "1s", "--", *slot_cmd(stamps))
    bad = tq.spool / "schedules" / "bad"
    bad.mkdir()
    (bad / "schedule.json").write_text('{"version": 1, "name": "bad", "cron": "61 * * * *"}\n')
    daemon = start_daemon()
    wait_for(lambda: list((tq.spool / "corrupt").glob("*schedule.json.reason")), 60, "quarantine")
    reason = next((tq.spool / "corrupt").glob("*schedule.json.reason")).read_text()
    assert "bad minute field" in reason or "bad schedule" in reason
    seen = len(runs(stamps))
    wait_for(lambda: len(runs(stamps)) > seen + 1, 60, "the good schedule to go on")
    assert daemon.proc.poll() is None
    assert [r["name"] for r in json.loads(tq.run("schedule", "ls", "--json").stdout)] == ["good"]
