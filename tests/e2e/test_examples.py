"""Every script in examples/ runs, against a temporary spool and a real daemon."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import Daemon, Taskq, wait_for

StartDaemon = Callable[..., Daemon]
RunExample = Callable[..., subprocess.CompletedProcess[bytes]]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def run_example(tq: Taskq, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    def run(
        name: str, *args: str, env: dict[str, str] | None = None, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        full = {
            **os.environ,
            "TASKQ_SPOOL": str(tq.spool),
            "HOME": str(tmp_path),
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            **(env or {}),
        }
        proc = subprocess.run(
            ["sh", str(EXAMPLES / name), *args],
            env=full,
            input=input,
            capture_output=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        return proc

    return run


@pytest.mark.slow
def test_schedule_health(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    out = tmp_path / "ran"
    command = ("sh", "-c", f'echo "$TASKQ_SCHEDULED_AT $TASKQ_ID" >> {out}')
    printed = run_example("schedule-health.sh", *command).stdout.decode()
    assert "report: running" in printed and "health:" in printed
    doc = json.loads(tq.run("schedule", "show", "--json", "report").stdout)
    assert doc["cron"] == ["0 9 * * 1-5", "0 11 * * 0,6"] and doc["skip_before"]
    assert doc["overlap"] == "replace" and doc["pause_after_failures"] == 3
    backfilled = [o for o in doc["occurrences"] if o.get("kind") == "backfilled"]
    assert 5 <= len(backfilled) <= 7  # one a day: the last seven days, less holidays
    start_daemon()
    wanted = len(backfilled) + 1  # and the manual run
    wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= wanted, 60, "runs")
    run_example("schedule-health.sh", *command)  # again: one more manual run, no slot again
    wait_for(lambda: len(out.read_text().splitlines()) >= wanted + 1, 60, "the second manual run")
    slots = [line.split()[0] for line in out.read_text().splitlines()]
    assert len(slots) == len(set(slots)) == wanted + 1


@pytest.mark.slow
def test_debounce(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    out = tmp_path / "ran"
    command = ("sh", "-c", f'echo "$TASKQ_ID $(date +%s.%N)" >> {out}')
    start_daemon()

    def request() -> str:
        return (
            run_example("debounce.sh", "docs", "20s", *command, env={"PRIORITY": "5"})
            .stdout.decode()
            .strip()
        )

    burst = [request() for _ in range(3)]  # well within the window, on a loaded machine too
    assert [tq.state(t) for t in burst[:-1]] == ["cancelled", "cancelled"]
    last = tq.show(burst[-1])
    assert last["priority"] == 5
    wait_for(out.exists, 90, "the burst's one run")  # (a file's stat a poll, not a `taskq show`)
    tq.wait_state(burst[-1], ("done",), 60)
    ran = [line.split() for line in out.read_text().splitlines()]
    assert [r[0] for r in ran] == [burst[-1]]  # the burst ran once: its last request
    assert float(ran[0][1]) >= _epoch(str(last["run_at"]))  # DELAY after the last, not before
    after = request()  # the key's window is over: a new request is a new run
    assert after != burst[-1]
    wait_for(lambda: len(out.read_text().splitlines()) > 1, 90, "the new request's run")
    tq.wait_state(after, ("done",), 60)
    assert [line.split()[0] for line in out.read_text().splitlines()] == [burst[-1], after]


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_every_example_is_tested() -> None:
    tested = {
        "maintenance-window.sh",
        "once.sh",
        "remind.sh",
        "fanout.sh",
        "backup-at-night.sh",
        "delete-later.sh",
        "retry-webhook.sh",
        "from-crontab.sh",
        "from-systemd-timer.sh",
        "fenced-append.sh",
        "pipeline.sh",
        "notify-chat.sh",
        "schedule-health.sh",
        "debounce.sh",
    }
    assert {p.name for p in EXAMPLES.glob("*.sh")} == tested


@pytest.mark.slow
def test_maintenance_window(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    (tmp_path / "maintenance.sh").write_text('#!/bin/sh\necho "maintenance for $1"\n')
    (tmp_path / "maintenance.sh").chmod(0o755)
    env = {"MAINT_DIR": str(tmp_path)}
    first = run_example("maintenance-window.sh", "03:00", env=env).stdout.strip().decode()
    again = run_example("maintenance-window.sh", "03:00", env=env).stdout.strip().decode()
    assert first == again
    doc = tq.show(first)
    tomorrow = subprocess.run(
        ["date", "-u", "-d", "tomorrow", "+%Y-%m-%d"], capture_output=True, text=True
    ).stdout.strip()
    assert doc["run_at"] == f"{tomorrow}T03:00:00.000000Z" and doc["queue"] == "maintenance"
    tq.run("reschedule", first, "--in", "0s")
    start_daemon()
    tq.wait_state(first, ("done",))
    assert tq.run("logs", first).stdout.decode() == f"maintenance for {tomorrow}\n"


@pytest.mark.slow
def test_once_skips_a_repeat_after_success(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    script = (
        f'sh {EXAMPLES / "once.sh"} sh -c "echo charged >> {ledger}"; '
        '[ "$TASKQ_ATTEMPT" -ge 2 ]'
    )  # attempt 1 fails after the charge
    env = {"ONCE_DIR": str(tmp_path / "once")}
    task_id = tq.submit(*(f"--env={k}={v}" for k, v in env.items()), "--", "sh", "-c", script)
    start_daemon("--retry-delay", "0.1s")
    doc = tq.wait_state(task_id, ("done",))
    assert [r["attempt"] for r in doc["attempts"] if r["event"] == "start"] == [1, 2]
    assert ledger.read_text() == "charged\n"
    assert "already succeeded (attempt 1); skipping" in tq.run("logs", task_id).stdout.decode()


@pytest.mark.slow
def test_remind(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    start_daemon()
    reminders = tmp_path / "reminders"
    task_id = run_example("remind.sh", "0.3s", "tea", "is", "ready").stdout.decode().strip()
    tq.wait_state(task_id, ("done",))
    assert reminders.read_text().endswith("): tea is ready\n")
    at_id = run_example("remind.sh", "now", "now then").stdout.decode().strip()
    tq.wait_state(at_id, ("done",))
    assert reminders.read_text().endswith("): now then\n")


@pytest.mark.slow
def test_fanout_and_wait(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    start_daemon("--workers", "3")
    files = []
    for i in range(6):
        f = tmp_path / f'data "{i}".txt'
        f.write_text(f"line {i}\n" * 1000)
        files.append(f)
    out = run_example("fanout.sh", *(f.name for f in files)).stdout.decode()
    assert out.startswith("submitted 6 task(s); waiting\n") and out.count(" done\n") == 6
    for f in files:
        assert gzip.decompress(Path(f"{f}.gz").read_bytes()) == f.read_bytes()


@pytest.mark.slow
def test_backup_at_night(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    (src / "file").write_text("precious\n")
    first = run_example("backup-at-night.sh", str(src), str(dest)).stdout.decode().strip()
    assert run_example("backup-at-night.sh", str(src), str(dest)).stdout.decode().strip() == first
    assert tq.show(first)["run_at"].endswith("T02:00:00.000000Z")
    tq.run("reschedule", first, "--in", "0s")
    start_daemon()
    tq.wait_state(first, ("done",))
    [archive] = dest.glob("backup-*.tar.gz")
    with tarfile.open(archive) as tar:
        assert tar.extractfile("./file").read() == b"precious\n"  # type: ignore[union-attr]


@pytest.mark.slow
def test_delete_later(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    start_daemon()
    victim = tmp_path / "shared.pdf"
    victim.write_text("x")
    task_id = json.loads(run_example("delete-later.sh", "0.3s", "shared.pdf").stdout)["id"]
    tq.wait_state(task_id, ("done",))
    assert not victim.exists()


class Hook(http.server.BaseHTTPRequestHandler):
    calls: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.calls.append((self.headers["Idempotency-Key"], self.headers["X-Attempt"], body))
        self.send_response(500 if len(Hook.calls) == 1 else 204)  # fail once, then accept
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    Hook.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_retry_webhook(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, webhook: str
) -> None:
    if subprocess.run(["sh", "-c", "command -v curl"], capture_output=True).returncode:
        pytest.skip("curl is missing")
    start_daemon("--retry-delay", "0.1s")
    payload = b'{"event": "paid", "amount": 42}'
    task_id = run_example("retry-webhook.sh", webhook, input=payload).stdout.decode().strip()
    tq.wait_state(task_id, ("done",))
    assert Hook.calls == [(task_id, "1", payload), (task_id, "2", payload)]
    assert "delivered: HTTP 204" in tq.run("logs", task_id).stdout.decode()


@pytest.mark.slow
def test_from_crontab(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    out = tmp_path / "ran"
    line = f'30 2 * * *   echo "ran for $TASKQ_SCHEDULED_AT" >> {out}'
    run_example("from-crontab.sh", "nightly", line, "--tz", "Europe/Berlin")
    doc = json.loads(tq.run("schedule", "show", "--json", "nightly").stdout)
    assert doc["cron"] == "30 2 * * *" and doc["tz"] == "Europe/Berlin"
    assert doc["task"]["argv"] == ["sh", "-c", f'echo "ran for $TASKQ_SCHEDULED_AT" >> {out}']
    assert doc["task"]["cwd"] == str(tmp_path)  # cron's: the home directory
    run_example("from-crontab.sh", "hourly", f"@hourly date >> {out}")
    hourly = json.loads(tq.run("schedule", "show", "--json", "hourly").stdout)
    assert hourly["cron"] == "0 * * * *" and hourly["task"]["argv"][2] == f"date >> {out}"
    task = doc["occurrences"][0]["task"]
    tq.run("reschedule", task, "--in", "0s")
    start_daemon()
    tq.wait_state(task, ("done",))
    assert out.read_text() == f"ran for {doc['occurrences'][0]['slot']}\n"


@pytest.mark.slow
def test_from_systemd_timer(tq: Taskq, run_example: RunExample) -> None:
    run_example("from-systemd-timer.sh", "true")
    doc = json.loads(tq.run("schedule", "show", "--json", "report").stdout)
    assert (doc["cron"], doc["tz"], doc["catchup"], doc["overlap"]) == (
        "30 7 * * 1-5",
        "America/New_York",
        "latest",
        "skip",
    )
    assert doc["jitter"] == 120 and doc["task"]["timeout"] == 900
    assert doc["task"]["argv"] == ["true"]
    slot = doc["occurrences"][0]["slot"]
    assert slot.endswith(("T11:30:00.000000Z", "T12:30:00.000000Z"))  # 07:30 EDT or EST


@pytest.mark.slow
def test_fenced_append_refuses_a_superseded_attempt(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    ledger, example = tmp_path / "ledger", str(EXAMPLES / "fenced-append.sh")
    script = f'sh {example} {ledger} "attempt $TASKQ_ATTEMPT"; [ "$TASKQ_ATTEMPT" -ge 2 ]'
    task_id = tq.submit("--", "sh", "-c", script)  # attempt 1 writes, then fails
    start_daemon("--retry-delay", "0")
    tq.wait_state(task_id, ("done",))
    assert ledger.read_text() == "attempt 1\nattempt 2\n"
    fences = [int(line.split()[1]) for line in Path(f"{ledger}.fences").read_text().splitlines()]
    assert fences[0] < fences[1]
    # Attempt 1's write arriving late, as from a daemon paused past its lease: refused.
    env = {**os.environ, "TASKQ_ID": task_id, "TASKQ_FENCE": str(fences[0])}
    late = subprocess.run(["sh", example, str(ledger), "late"], env=env, capture_output=True)
    assert late.returncode == 4
    assert b"refused: token" in late.stderr
    assert ledger.read_text() == "attempt 1\nattempt 2\n"


@pytest.mark.slow
def test_pipeline(
    tq: Taskq, start_daemon: StartDaemon, run_example: RunExample, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ids = run_example("pipeline.sh", str(work)).stdout.decode().split()
    assert len(ids) == 4 and tq.state(ids[1]) == "waiting"
    start_daemon()
    tq.run("wait", "--timeout", "60s", *ids)
    assert (work / "published.txt").read_text().splitlines()[1] == "Hello, Pipeline"
    assert not (work / "raw.txt").exists()  # the cleanup ran last
    starts = [tq.show(i)["attempts"][0]["time"] for i in ids]
    assert starts == sorted(starts)


class Chat(http.server.BaseHTTPRequestHandler):
    posts: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        Chat.posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_notify_chat(tq: Taskq, start_daemon: StartDaemon) -> None:
    if subprocess.run(["sh", "-c", "command -v curl"], capture_output=True).returncode:
        pytest.skip("curl is missing")
    server = http.server.HTTPServer(("127.0.0.1", 0), Chat)
    Chat.posts = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hooks/XYZ"
        tq.spool.mkdir(parents=True)
        hook = json.dumps(["sh", str(EXAMPLES / "notify-chat.sh"), url])
        (tq.spool / "config.toml").write_text(f'[notify]\ncommand = {hook}\non = ["failed"]\n')
        start_daemon()
        ok = tq.submit("--", "true")
        bad = tq.submit("--max-attempts", "1", "--", "sh", "-c", "exit 3")
        tq.run("wait", ok, bad, check=False)
        told = [r for r in tq.show(bad)["attempts"] if r["event"] == "told"]
        deadline = time.monotonic() + 30
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
            told = [r for r in tq.show(bad)["attempts"] if r["event"] == "told"]
        assert told[0]["hook"] == "exit 0"
        (post,) = Chat.posts
        first = post["text"].splitlines()[0]
        assert (
            first
            == f"taskq: {bad} failed (exit status 3) on testhost after 1 attempt(s): sh -c 'exit 3'"
        )
    finally:
        server.shutdown()
        server.server_close()
