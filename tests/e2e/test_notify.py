"""Being told: --mail through a stub sendmail and the [notify] hook, through real daemons."""

from __future__ import annotations

import email
import email.policy
import getpass
import json
import os
import subprocess
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from conftest import Daemon, Taskq, until, wait_for

from taskq.notify import mail
from taskq.spool.task import TaskBody

StartDaemon = Callable[..., Daemon]
SEP = "----- end of message -----"


@pytest.fixture
def stubs(tmp_path: Path) -> Path:
    """A directory with a stub sendmail that appends each message to a mailbox file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sendmail = bin_dir / "sendmail"
    sendmail.write_text(
        f'#!/bin/sh\n{{ echo "ARGS: $*"; cat; echo "{SEP}"; }} >> {tmp_path / "mailbox"}\n'
    )
    sendmail.chmod(0o755)
    return bin_dir


def _daemon_env(stubs: Path) -> dict[str, str]:
    return {"PATH": f"{stubs}:{os.environ['PATH']}"}


def _hook(tmp_path: Path, body: str) -> Path:
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\n{body}\n")
    hook.chmod(0o755)
    return hook


def _config(tq: Taskq, text: str) -> None:
    tq.spool.mkdir(parents=True, exist_ok=True)
    (tq.spool / "config.toml").write_text(text)


def _mails(tmp_path: Path) -> list[tuple[str, EmailMessage]]:
    box = tmp_path / "mailbox"
    if not box.exists():
        return []
    out = []
    for chunk in box.read_text().split(f"{SEP}\n")[:-1]:
        args, _, raw = chunk.partition("\n")
        msg = email.message_from_string(raw, policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        out.append((args, msg))
    return out


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _told(tq: Taskq, task_id: str) -> list[dict[str, Any]]:
    return [r for r in tq.show(task_id)["attempts"] if r["event"] == "told"]


@pytest.mark.slow
def test_mail_and_hook_once_per_outcome_with_retries(
    tq: Taskq, start_daemon: StartDaemon, stubs: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    hook = _hook(tmp_path, f"cat >> {events}")
    _config(tq, f'[notify]\ncommand = ["{hook}"]\n')
    fails = tq.submit(
        "--max-attempts", "3", "--env", "MAILTO=ops@example.org", "--",
        "sh", "-c", "echo boom; echo details >&2; exit 7",
    )  # fmt: skip
    fine = tq.submit("--mail", "always", "--", "echo", "fine")
    quiet = tq.submit("--max-attempts", "2", "--", "false")  # no mail: no MAILTO, no --mail
    daemon = start_daemon("--retry-delay", "100ms", env=_daemon_env(stubs))
    tq.run("wait", "--timeout", "60s", fails, fine, quiet, check=False)
    for task_id in (fails, fine, quiet):
        wait_for(lambda t=task_id: _told(tq, t), 30, f"{task_id} told")  # type: ignore[misc]
    assert daemon.stop() == 0  # nothing more can be told now
    by_id = {e["id"]: e for e in _events(events)}
    assert len(_events(events)) == 3 and set(by_id) == {fails, fine, quiet}
    failed = by_id[fails]
    assert (failed["state"], failed["exit_status"], failed["attempts"]) == ("failed", 7, 3)
    assert failed["host"] == "testhost" and failed["reason"] == "attempts exhausted"
    assert isinstance(failed["lateness"], float) and isinstance(failed["duration"], float)
    assert Path(failed["output"]).read_text() == "boom\ndetails\n"
    assert Path(failed["journal"]).exists() and failed["queue"] == "default"
    assert by_id[fine]["state"] == "done" and by_id[quiet]["attempts"] == 2
    mails = _mails(tmp_path)
    assert len(mails) == 2
    (args, to_ops), (_, to_me) = sorted(mails, key=lambda m: str(m[1]["To"]) == getpass.getuser())
    assert args == "ARGS: -t"
    assert to_ops["To"] == "ops@example.org" and to_ops["Auto-Submitted"] == "auto-generated"
    assert f"{fails} failed (exit status 7)" in str(to_ops["Subject"])
    text = to_ops.get_content()
    assert "exit status: 7" in text and "attempts:    3" in text and "boom\ndetails" in text
    assert to_me["To"] == getpass.getuser() and f"{fine} done" in str(to_me["Subject"])
    assert [len(_told(tq, t)) for t in (fails, fine, quiet)] == [1, 1, 1]
    assert "mail" not in _told(tq, quiet)[0] and _told(tq, fails)[0]["hook"] == "exit 0"


@pytest.mark.slow
def test_a_hanging_hook_never_delays_dispatch(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    gate, events = tmp_path / "gate", tmp_path / "events.jsonl"
    hook = _hook(tmp_path, f"cat >> {events}{until(gate)}")
    _config(tq, f'[notify]\ncommand = ["{hook}"]\ntimeout = "10m"\n')
    start_daemon()
    first = tq.submit("--", "true")
    wait_for(lambda: len(_events(events)) == 1, 30, "the hook to hang on the first event")
    later = tq.submit("--", "true")  # started and ended while the hook hangs
    tq.wait_state(later, ("done",))
    assert [e["id"] for e in _events(events)] == [first]
    gate.touch()
    wait_for(lambda: len(_events(events)) == 2, 30, "the second event after the gate")
    assert _events(events)[1]["id"] == later


@pytest.mark.slow
def test_a_hook_that_hangs_past_its_timeout_or_fails_is_logged(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    # The first event hangs (killed at the timeout), later ones fail with a message.
    hook = _hook(
        tmp_path,
        f"cat >> {events}\n"
        f"if [ ! -e {tmp_path}/hung ]; then touch {tmp_path}/hung; sleep 600; fi\n"
        "echo 'chat is down' >&2; exit 3",
    )
    _config(tq, f'[notify]\ncommand = ["{hook}"]\ntimeout = "1s"\non = ["done"]\n')
    daemon = start_daemon()
    first = tq.submit("--", "true")
    second = tq.submit("--", "true")
    not_told = tq.submit("--max-attempts", "1", "--", "false")  # on = ["done"] only
    wait_for(lambda: _told(tq, first) and _told(tq, second), 60, "both told")
    assert _told(tq, first)[0]["hook"] == "timed out after 1.000s (killed)"
    # Its whole session was killed: no process of the hook is left.
    left = subprocess.run(["pgrep", "-f", str(hook)], capture_output=True, text=True)
    assert left.stdout == ""
    assert _told(tq, second)[0]["hook"] == "exit 3: chat is down"
    log = daemon.text()
    assert f"notify hook for {first}: timed out after 1.000s (killed)" in log
    assert f"notify hook for {second}: exit 3: chat is down" in log
    tq.wait_state(not_told, ("failed",))
    assert {e["id"] for e in _events(events)} == {first, second}


@pytest.mark.slow
def test_a_dependency_cancel_is_told_and_mailed_as_a_failure(
    tq: Taskq, start_daemon: StartDaemon, stubs: Path, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    _config(tq, f'[notify]\ncommand = ["{_hook(tmp_path, f"cat >> {events}")}"]\n')
    first = tq.submit("--max-attempts", "1", "--", "false")
    second = tq.submit("--after", first, "--mail", "failure", "--", "true")
    start_daemon(env=_daemon_env(stubs))
    wait_for(lambda: _told(tq, second), 30, "the dependent told")
    (event,) = [e for e in _events(events) if e["id"] == second]
    assert event["state"] == "cancelled" and event["reason"] == f"dependency {first} failed"
    assert event["attempts"] == 0
    ((_, msg),) = _mails(tmp_path)
    assert f"{second} cancelled (dependency {first} failed)" in str(msg["Subject"])


@pytest.mark.slow
def test_a_bad_notify_table_stops_the_daemon_with_status_78(tq: Taskq) -> None:
    _config(tq, '[notify]\ncommand = "not a list"\n')
    proc = tq.run("daemon", check=False)
    assert proc.returncode == 78
    assert b"notify.command must be a non-empty list of strings" in proc.stderr


@pytest.mark.parametrize(
    ("mode", "env", "state", "reason", "expected"),
    [
        (None, {}, "failed", None, None),
        (None, {"MAILTO": "a@b"}, "failed", None, "a@b"),
        (None, {"MAILTO": "a@b"}, "done", None, None),
        (None, {"MAILTO": ""}, "failed", None, None),
        ("always", {}, "done", None, "me"),
        ("failure", {}, "cancelled", None, None),
        ("failure", {}, "cancelled", "dependency X failed", "me"),
        ("never", {"MAILTO": "a@b"}, "failed", None, None),
    ],
)
def test_who_gets_mail(
    mode: str | None, env: dict[str, str], state: str, reason: str | None, expected: str | None
) -> None:
    body = TaskBody(id="0" * 26, argv=["true"], run_at=0, submitted_at=0, env=env, mail=mode)
    got = mail.recipient(body, state, reason, os.getuid)
    assert got == (getpass.getuser() if expected == "me" else expected)
