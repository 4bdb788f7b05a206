"""A member's task due now, from submit to start: a shared spool's drop against a private spool.

    sudo python bench/shared_latency.py [-n N] [--interval SECONDS]

Needs root (it makes a throwaway user and group, removed at the end) and
setpriv. Two spools side by side, each with its own root daemon: a private
one (root submits into pending/), and one `taskq init --shared` made, where
the throwaway member submits through drop/. N tasks each, `true`, due at
once, submitted one after another, alternating spools. For each task:

  exit->start   the daemon's journalled start minus the instant the submit
                command returned (its id printed): what the submitter waits
  lateness      the journalled lateness: start minus run_at, run_at being
                submit's own "now" (so it includes submit's own time)
  submit        how long the submit command took, start to exit (a
                member's includes its two syncfs)
  filed->start  (shared spool only) the journalled start minus the
                journalled `filed` record the pickup wrote: the daemon's
                part after it took the drop file in

exit->start is negative where the task started before the submit command
had finished exiting (the interpreter's teardown).

Prints p50, p99 and max of both, per spool. The taskq run is the one of
this interpreter (`python -m taskq`); use a non-editable install.

    sudo python bench/shared_latency.py --batch N [-n RUNS]

instead submits one `submit --batch` of N lines (`true`, in an hour) to
each spool, RUNS times, and prints how long the command took and, for
the member's, how long from its exit until the daemon had filed every
line (drop/ and pickup/ empty): the pickup's part of a member's batch.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

TASKQ = [sys.executable, "-m", "taskq"]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]


class Spool:
    def __init__(self, root: Path, user: str | None) -> None:
        self.root = root
        self.user = user
        self.env = {**os.environ, "TASKQ_SPOOL": str(root), "HOME": "/"}
        self.samples: dict[str, list[float]] = {"exit->start": [], "lateness": [], "submit": []}

    def as_submitter(self, *args: str) -> list[str]:
        if self.user is None:
            return [*TASKQ, *args]
        pw = pwd.getpwnam(self.user)
        who = [f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups"]
        return ["setpriv", *who, *TASKQ, *args]

    def submit(self) -> tuple[str, float]:
        argv = self.as_submitter("submit", "--cwd", "/", "--", "true")
        began = time.time()
        out = subprocess.run(argv, env=self.env, check=True, capture_output=True, cwd="/")
        returned = time.time()
        self.samples["submit"].append(returned - began)
        return out.stdout.decode().strip(), returned

    def batch(self, lines: int) -> tuple[float, float]:
        """One submit --batch of `lines` lines: (its wall time, its end until all are filed)."""
        argv = self.as_submitter("submit", "--cwd", "/", "--in", "1h", "--batch", "-")
        data = b'{"command": ["true"]}\n' * lines
        began = time.time()
        subprocess.run(argv, env=self.env, input=data, check=True, capture_output=True, cwd="/")
        returned = time.time()
        while any(
            os.listdir(self.root / d) for d in ("drop", "pickup") if (self.root / d).exists()
        ):
            time.sleep(0.005)
        return returned - began, time.time() - returned

    def start_of(self, task_id: str, timeout: float = 30) -> dict[str, dict[str, object]]:
        deadline = time.time() + timeout
        while True:
            proc = subprocess.run(
                [*TASKQ, "show", "--json", task_id], env=self.env, capture_output=True
            )
            if proc.returncode == 0:
                records = json.loads(proc.stdout)["attempts"]
                if any(r["event"] == "start" for r in records):
                    return {r["event"]: r for r in reversed(records)}
            if time.time() > deadline:
                raise RuntimeError(f"{task_id} did not start in {timeout}s")
            time.sleep(0.05)

    def daemon(self, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            proc = subprocess.Popen([*TASKQ, "daemon"], env=self.env, stderr=out)
        deadline = time.time() + 30
        while b"started on" not in log.read_bytes():
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the daemon did not start: {log.read_text()}")
            time.sleep(0.02)
        return proc


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=50, help="tasks per spool")
    parser.add_argument("--interval", type=float, default=0.2, help="pause between submits")
    parser.add_argument("--batch", type=int, help="lines of one submit --batch, instead")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: it makes a throwaway user")
    tag = uuid.uuid4().hex[:6]
    group, user = f"tqb{tag}", f"tqb{tag}"
    top = Path(tempfile.mkdtemp(prefix="taskq-latency-"))
    top.chmod(0o755)
    subprocess.run(["groupadd", group + "g"], check=True)
    subprocess.run(["useradd", "--no-create-home", "-G", group + "g", user], check=True)
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        private, shared = Spool(top / "private", None), Spool(top / "shared", user)
        subprocess.run([*TASKQ, "init", str(private.root)], check=True, capture_output=True)
        subprocess.run(
            [*TASKQ, "init", "--shared", group + "g", str(shared.root)],
            check=True,
            capture_output=True,
        )
        daemons = [private.daemon(top / "private.log"), shared.daemon(top / "shared.log")]
        if args.batch:
            for _ in range(args.n):
                for name, spool in (("private spool, root", private), ("shared, member", shared)):
                    took, filed = spool.batch(args.batch)
                    print(
                        f"{name:22} --batch of {args.batch}: submit {took:6.2f} s"
                        f"  then filed in {filed:6.2f} s"
                    )
            return
        for _ in range(args.n):
            for spool in (private, shared):
                task_id, returned = spool.submit()
                records = spool.start_of(task_id)
                start = records["start"]
                if "filed" in records:
                    filed = _epoch(str(records["filed"]["time"]))
                    spool.samples.setdefault("filed->start", []).append(
                        _epoch(str(start["time"])) - filed
                    )
                spool.samples["exit->start"].append(_epoch(str(start["time"])) - returned)
                spool.samples["lateness"].append(float(str(start["lateness"])))
                time.sleep(args.interval)
        for name, spool in (("private spool, root", private), ("shared spool, member", shared)):
            for what, xs in spool.samples.items():
                print(
                    f"{name:22} {what:12} p50 {statistics.median(xs) * 1e3:7.1f} ms"
                    f"  p99 {pct(xs, 0.99) * 1e3:7.1f} ms  max {max(xs) * 1e3:7.1f} ms"
                    f"  (n={len(xs)})"
                )
    finally:
        for proc in daemons:
            proc.terminate()
            proc.wait(30)
        subprocess.run(["userdel", user], check=False)
        subprocess.run(["groupdel", group + "g"], check=False)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
