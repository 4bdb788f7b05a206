"""Schedules asked for by hand and their health, through three real daemons and a kill -9.

schedule run, overlap replace, schedule skip, --every-after, several --cron
with exclusions, backfill and --pause-after-failures: each shown across
three daemons sharing the spool, one of them killed with SIGKILL while the
schedule runs. Every check is on what the tasks recorded (their slot and
start) and what the journals say: no slot twice, none early, nothing lost.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import TASKQ, Daemon, Taskq, kill_all, until, wait_for
from test_schedule import epoch, history, runs, show, slot_cmd

pytestmark = pytest.mark.slow  # real daemons, seconds each

LEASE = ("--lease", "3s", "--rescan", "1s", "--workers", "4", "--kill-grace", "1s")
StartDaemon = Callable[..., Daemon]


def three(start_daemon: StartDaemon, env: dict[str, str] | None = None) -> list[Daemon]:
    return [start_daemon(*LEASE, host=f"h{i}", env=env) for i in range(3)]


def kill_one(
    tq: Taskq, daemons: list[Daemon], start_daemon: StartDaemon, env: dict[str, str] | None = None
) -> None:
    """SIGKILL a daemon and start it again under its host id.

    The daemon killed runs no attempt at that moment: one killed with its
    attempt would have that attempt taken over and run again by another
    host once its lease runs out, the documented duplicate of a crash
    (taskq-daemon(8) BUGS), which is no second occurrence of a slot.
    """
    busy = _busy_hosts(tq)
    i = next(i for i in range(len(daemons)) if f"h{i}" not in busy)
    daemons[i].kill()
    daemons[i] = start_daemon(*LEASE, host=f"h{i}", env=env)


def _busy_hosts(tq: Taskq) -> set[str]:
    states = ("--state", "running", "--state", "claimed", "--state", "cancelling")
    out = tq.run("ls", *states, "--json").stdout.decode().splitlines()
    hosts = set()
    for task in (json.loads(line)["id"] for line in out if line.strip()):
        owner = tq.show(task).get("owner")  # the claim's: "PID HOST" or the like
        hosts.update(str(owner).replace("_", " ").split())
    return hosts


def once_never_early(stamps: Path) -> list[tuple[float, float, str]]:
    recorded = runs(stamps)
    slots = [r[0] for r in recorded]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {recorded}"
    assert len({r[2] for r in recorded}) == len(recorded), "a task ran twice"
    assert all(start >= slot for slot, start, _ in recorded), "a run started early"
    return recorded


def ends_cmd(stamps: Path, ends: Path) -> list[str]:
    """Record the start; run until TERM, then record the end (slot and time)."""
    line = '"$TASKQ_SCHEDULED_AT $(date +%s.%N) $TASKQ_ID $TASKQ_SCHEDULE"'
    end = f'echo "$TASKQ_SCHEDULED_AT $(date +%s.%N)" >> {ends}'
    script = f"echo {line} >> {stamps}; trap '{end}; exit 0' TERM; while :; do sleep 0.1; done"
    return ["sh", "-c", script]


def ended(ends: Path) -> dict[float, float]:
    if not ends.exists():
        return {}
    return {epoch(s): float(t) for s, t in (line.split() for line in ends.read_text().splitlines())}


def test_schedule_run_is_one_manual_occurrence_that_honours_overlap(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps, gate = tmp_path / "stamps", tmp_path / "gate"
    tq.run("schedule", "add", "m", "--cron", "@yearly", "--", *slot_cmd(stamps, until(gate)))
    daemons = three(start_daemon)
    first = json.loads(tq.run("schedule", "run", "m", "--json").stdout)
    wait_for(lambda: runs(stamps), 60, "the manual run to start")
    kill_one(tq, daemons, start_daemon)
    refused = tq.run("schedule", "run", "m", check=False)
    assert refused.returncode == 4 and b"give --force" in refused.stderr
    forced = json.loads(tq.run("schedule", "run", "m", "--force", "--json").stdout)
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "the forced run beside it")
    gate.touch()
    for doc in (first, forced):
        assert tq.wait_state(doc["task"], ("done",), 60)
    recorded = once_never_early(stamps)
    assert [(r[2], r[0]) for r in recorded] == [
        (first["task"], epoch(first["slot"])),
        (forced["task"], epoch(forced["slot"])),
    ]
    manual = [o for o in show(tq, "m")["occurrences"] if o.get("kind") == "manual"]
    assert [(o["task"], o["outcome"]) for o in manual] == [
        (first["task"], "done"),
        (forced["task"], "done"),
    ]
    kill_all(daemons)


def test_overlap_replace_stops_the_running_one_then_runs(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps, ends = tmp_path / "stamps", tmp_path / "ends"
    tq.run("schedule", "add", "r", "--every", "2s", "--overlap", "replace",
           "--", *ends_cmd(stamps, ends))  # fmt: skip
    daemons = three(start_daemon)
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "two runs")
    kill_one(tq, daemons, start_daemon)
    seen = len(runs(stamps))
    wait_for(lambda: len(runs(stamps)) >= seen + 2, 60, "two runs after the kill")
    tq.run("schedule", "pause", "r")
    kill_all(daemons)
    recorded = once_never_early(stamps)
    stopped = ended(ends)  # those whose TERM trap ran (a KILL after the grace leaves none)
    journal = history(tq, "r")
    late = {epoch(e["slot"]) for e in journal if e["event"] == "replacing" and e.get("claimed")}
    for (slot, _, before), (nxt, start, _) in itertools.pairwise(recorded):
        end = _end_record(tq, before)  # the daemon's record of the attempt's end
        if nxt in late:  # claimed before a late pass could hold it: it stops the old one at once
            assert end <= start + 1.0 + 1.0, f"the run of {slot} outlived its grace"
            continue
        assert end <= start, f"the run of {slot} ended after the one replacing it started"
        assert slot not in stopped or stopped[slot] <= start
    assert stopped, "no run was stopped by TERM"
    decided = {epoch(e["slot"]) for e in journal if e.get("slot") and e["event"] != "made"}
    made = {epoch(e["slot"]) for e in journal if e["event"] == "made"}
    slot_of = {e["task"]: epoch(e["slot"]) for e in journal if e["event"] == "made"}
    # A held occurrence passed over for a newer one is journalled by its task, not its slot.
    decided |= {
        slot_of[e["task"]] for e in journal if e["event"] == "skipped" and e.get("task") in slot_of
    }
    ran = {r[0] for r in recorded}
    assert {s for s in made if recorded[0][0] <= s <= recorded[-1][0]} <= ran | decided
    assert [e for e in journal if e["event"] == "replacing"]


def test_skip_passes_over_the_next_slots_until_resume(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "s", "--every", "1s", "--overlap", "allow",
           "--", *slot_cmd(stamps))  # fmt: skip
    daemons = three(start_daemon)
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "two runs")
    doc = json.loads(tq.run("schedule", "skip", "s", "-n", "3", "--json").stdout)
    skipped = {epoch(s) for s in doc["skipped"]}
    assert len(skipped) >= 2
    kill_one(tq, daemons, start_daemon)
    wait_for(lambda: any(r[0] > max(skipped) + 1 for r in runs(stamps)), 60, "runs after the skip")
    far = json.loads(tq.run("schedule", "skip", "s", "--until", "now + 1 hour", "--json").stdout)
    assert show(tq, "s")["skip_before"] == far["skip_before"]
    held = time.time()
    wait_for(lambda: time.time() > held + 3, 30, "three slots skipped")
    resumed = time.time()
    tq.run("schedule", "resume", "s")
    assert show(tq, "s")["skip_before"] is None
    wait_for(lambda: any(r[0] > resumed for r in runs(stamps)), 60, "runs after resume")
    kill_all(daemons)
    recorded = once_never_early(stamps)
    assert not skipped & {r[0] for r in recorded}
    assert [r for r in recorded if held + 1.5 < r[0] < resumed] == []
    journal = [e for e in history(tq, "s") if e.get("why") == "skip" and e.get("slot")]
    assert skipped <= {epoch(e["slot"]) for e in journal}


def test_every_after_counts_from_the_end_of_the_previous_run(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "e", "--every-after", "1s", "--", *slot_cmd(stamps, "; sleep 0.3"))
    daemons = three(start_daemon)
    wait_for(lambda: len(runs(stamps)) >= 3, 60, "three runs")
    kill_one(tq, daemons, start_daemon)
    seen = len(runs(stamps))
    wait_for(lambda: len(runs(stamps)) >= seen + 3, 60, "three runs after the kill")
    tq.run("schedule", "pause", "e")
    kill_all(daemons)
    recorded = once_never_early(stamps)
    for (_, _, before), (slot, _, _) in itertools.pairwise(recorded):
        end = _end_record(tq, before)
        assert slot == end + 1.0, f"slot {slot} is not 1s after the end {end} of {before}"


def _end_record(tq: Taskq, task: str) -> float:
    lines = (tq.spool / "logs" / task / "journal").read_text().splitlines()
    return epoch([r for r in map(json.loads, lines) if r["event"] == "end"][-1]["time"])


def test_backfill_of_several_crons_runs_each_slot_once_however_often_asked(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    tq.run("schedule", "add", "b", "--cron", "*/2 * * * *", "--cron", "*/3 * * * *",
           "--except-cron", "*/5 * * * *", "--tz", "UTC",
           "--", *slot_cmd(stamps, "; sleep 0.2"))  # fmt: skip
    hi = int(time.time()) // 60 * 60 - 60
    lo = hi - 20 * 60
    expected = [m * 60 for m in range(lo // 60, hi // 60 + 1)
                if (m % 2 == 0 or m % 3 == 0) and m % 5 != 0]  # fmt: skip
    span = ("--from", _iso(lo), "--to", _iso(hi))
    daemons = three(start_daemon)
    env = {"TASKQ_SPOOL": str(tq.spool), "PATH": "/usr/bin:/bin"}
    askers = [
        subprocess.Popen(
            [*TASKQ, "schedule", "backfill", "b", *span, "--json"], stdout=subprocess.PIPE, env=env
        )
        for _ in range(3)
    ]
    answers = [json.loads(a.communicate(timeout=60)[0]) for a in askers]
    wait_for(lambda: runs(stamps), 60, "the first backfilled run")
    kill_one(tq, daemons, start_daemon)
    wait_for(
        lambda: len([r for r in runs(stamps) if r[0] <= hi]) >= len(expected),
        90,
        "every slot backfilled",
    )
    again = json.loads(tq.run("schedule", "backfill", "b", *span, "--json").stdout)
    kill_all(daemons)
    recorded = [r for r in once_never_early(stamps) if r[0] <= hi]  # not its live slots since
    assert [r[0] for r in recorded] == expected
    tasks = [[o["task"] for o in a["occurrences"]] for a in [*answers, again]]
    assert all(t == tasks[0] for t in tasks)  # every asker got the same task per slot
    assert sum(o["created"] for a in answers for o in a["occurrences"]) == len(expected)
    assert not any(o["created"] for o in again["occurrences"])
    starts = [r[1] for r in recorded]
    assert starts == sorted(starts)  # --overlap queue: oldest first, one after another


def _iso(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_pause_after_failures_pauses_tells_and_counts(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps, told = tmp_path / "stamps", tmp_path / "told"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ncat >> {told}\n")
    hook.chmod(0o755)
    tq.spool.mkdir(parents=True, exist_ok=True)
    (tq.spool / "config.toml").write_text(f'[notify]\ncommand = ["{hook}"]\n')
    mailbox, bin_dir = tmp_path / "mailbox", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sendmail").write_text(f"#!/bin/sh\ncat >> {mailbox}\n")
    (bin_dir / "sendmail").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    tq.run("schedule", "add", "f", "--every", "1s", "--overlap", "allow", "--max-attempts", "1",
           "--pause-after-failures", "3", "--env", "MAILTO=ops@example.org",
           "--", *slot_cmd(stamps, "; exit 1"))  # fmt: skip
    metrics = tmp_path / "metrics.prom"
    daemons = three(start_daemon, env)
    wait_for(lambda: runs(stamps), 60, "the first failure")
    kill_one(tq, daemons, start_daemon, env)
    daemons.append(start_daemon(*LEASE, "--metrics-file", str(metrics), host="m", env=env))
    wait_for(lambda: show(tq, "f")["state"] == "paused (failures)", 60, "the pause")
    paused = next(e for e in history(tq, "f") if e["event"] == "paused")
    assert paused["why"] == "failures" and paused["failures"] >= 3
    wait_for(lambda: told.exists() and "schedule-paused" in told.read_text(), 60, "the hook")
    subject = "Subject: taskq: schedule f paused after"
    wait_for(lambda: mailbox.exists() and subject in mailbox.read_text(), 60, "the mail")
    assert "To: ops@example.org" in mailbox.read_text()
    events = [json.loads(line) for line in told.read_text().splitlines()]
    assert next(e for e in events if e["event"] == "schedule-paused")["schedule"] == "f"

    def series() -> str:
        text = metrics.read_text() if metrics.exists() else ""
        return text if "taskq_schedule_paused{" in text and "1.0" in _line(text, "paused") else ""

    text = wait_for(series, 60, "the schedule's metrics")
    assert "taskq_build_info{" in text
    assert float(_line(text, "failures_in_a_row").split()[-1]) >= 3
    pause_at = epoch(paused["time"])
    once_never_early(stamps)
    assert all(slot <= pause_at + 1.5 for slot, _, _ in runs(stamps))  # made ahead at most
    resumed = time.time()
    tq.run("schedule", "resume", "f")
    wait_for(lambda: any(r[0] > resumed for r in runs(stamps)), 60, "runs after resume")
    assert show(tq, "f")["health"]["failures_in_a_row"] < 3 or show(tq, "f")["state"] != "active"
    kill_all(daemons)


def _line(text: str, name: str) -> str:
    found = [x for x in text.splitlines() if x.startswith(f"taskq_schedule_{name}{{")]
    return found[0] if found else ""


def test_several_crons_fire_each_shared_minute_once(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    stamps = tmp_path / "stamps"
    began = time.time()  # `schedule next` below runs later: a minute may turn in between
    tq.run("schedule", "add", "u", "--cron", "* * * * *", "--cron", "*/1 * * * *",
           "--cron", "*/2 * * * *", "--tz", "UTC", "--overlap", "allow",
           "--", *slot_cmd(stamps))  # fmt: skip
    first = json.loads(tq.run("schedule", "next", "u", "-n", "2", "--json").stdout)
    wanted = [epoch(d["slot"]) for d in first]
    daemons = three(start_daemon)
    wait_for(lambda: runs(stamps), 90, "the first minute's run")
    kill_one(tq, daemons, start_daemon)
    wait_for(lambda: {r[0] for r in runs(stamps)} >= set(wanted), 150, "two minutes' runs")
    kill_all(daemons)
    recorded = once_never_early(stamps)
    minutes = list(range(math.ceil(began / 60) * 60, int(wanted[-1]) + 1, 60))
    assert [r[0] for r in recorded if r[0] <= wanted[-1]] == minutes  # each minute once


def test_a_queued_occurrence_released_early_waits_for_its_slot(
    tq: Taskq, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    """The one before it ends just before its slot: the queued one still starts at its slot."""
    stamps, gate = tmp_path / "stamps", tmp_path / "gate"
    tq.run("schedule", "add", "q", "--every", "4s", "--overlap", "queue",
           "--", *slot_cmd(stamps, until(gate)))  # fmt: skip
    start_daemon("--workers", "4")
    wait_for(lambda: runs(stamps), 60, "the first run")
    queued = wait_for(
        lambda: [e for e in history(tq, "q") if e["event"] == "queued"], 60, "a queued slot"
    )
    gate.touch()  # the running one ends now, before the queued slot (a second away)
    wait_for(lambda: len(runs(stamps)) >= 2, 60, "the queued run")
    second = runs(stamps)[1]
    assert second[0] == epoch(queued[0]["slot"]) and second[1] >= second[0]
