"""Commands the keeper runs without a shell: found, not found, unrunnable, in their group."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Daemon, Taskq, events

StartDaemon = Callable[..., Daemon]


@pytest.mark.slow
def test_commands_run_as_sh_would_run_them(
    tq: Taskq, start_daemon: StartDaemon, tmp_path: Path
) -> None:
    script = tmp_path / "no-hashbang"
    script.write_text('echo "pgid=$(ps -o pgid= -p $$ | tr -d " ") pid=$$"\n')
    script.chmod(stat.S_IRWXU)
    unrunnable = tmp_path / "not-executable"
    unrunnable.write_text("#!/bin/sh\ntrue\n")
    gone = tmp_path / "gone"
    gone.mkdir()
    start_daemon("--retry-delay", "0.1s")
    tasks = {
        "script": tq.submit("--", str(script)),
        "missing": tq.submit("--max-attempts", "1", "--", "no-such-command-anywhere"),
        "unrunnable": tq.submit("--max-attempts", "1", "--", str(unrunnable)),
        "by_path": tq.submit("--env", f"PATH={tmp_path}:/usr/bin:/bin", "--", "no-hashbang"),
        # Held an hour off until its directory is gone: a loaded machine's submits
        # can take longer than any lead given here.
        "no_dir": tq.submit("--in", "1h", "--max-attempts", "1", "--cwd", str(gone), "--", "true"),
    }
    os.rmdir(gone)  # gone by the time the task runs
    tq.run("reschedule", tasks["no_dir"], "--in", "0s")
    for name in ("script", "by_path"):
        doc = tq.wait_state(tasks[name], ("done",), timeout=30)
        out = tq.run("logs", tasks[name]).stdout.decode()
        pid = events(doc, "start")[0]["pid"]
        assert f"pgid={pid} pid={pid}" in out, out  # its own group, led by the command
    for name, code in (("missing", 127), ("unrunnable", 126), ("no_dir", 126)):
        doc = tq.wait_state(tasks[name], ("failed",), timeout=30)
        [failed] = events(doc, "spawn-failed")
        assert failed["error"] and not events(doc, "start"), doc
        assert tq.run("logs", tasks[name]).stdout.startswith(b"taskq: ")
        status = tq.spool / "logs" / tasks[name] / "1.status"
        assert status.read_text() == f"S\n{code}\n"
