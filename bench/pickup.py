"""What the pickup costs per drop file: a daemon's passes over a drop of N submissions.

    python bench/pickup.py [-n N] [--dir DIR]

In-process, on a real spool in DIR (default: a temporary directory): N
submissions are put in drop/ (this user's own, ids bound to this uid, as a
member's would be), then the pickup is run pass after pass, as the daemon
runs it, until drop/ is empty. Prints the wall time and CPU time per file
filed, the number of passes (each bounded by pickup.PASS_BUDGET), and, for
comparison, what a private spool's submit_one and submit_batch of the same
bodies cost per task (the pickup files each one as submit_one does, so the
difference from it is the drop's own part: the claim, the whole read, the
binding check, the journal's first record, the removal).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from taskq.client.submit import submit, submit_batch
from taskq.daemon.commit import GroupCommit
from taskq.daemon.crew import Crew
from taskq.daemon.pickup import Pickup
from taskq.daemon.poison import PoisonGuard
from taskq.daemon.policy import Backoff
from taskq.daemon.settle import Settler
from taskq.spool import drop
from taskq.spool import runas as security
from taskq.spool.layout import DROP_DIRS, Spool
from taskq.spool.task import TaskBody, new_id
from taskq.spool.transitions import DaemonId
from taskq.times.clock import Clock
from taskq.times.timespec import HOUR, MS, SECOND


def _spool(root: str) -> Spool:
    spool = Spool(root)
    spool.init()
    for sub in DROP_DIRS:
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    return spool


def _pickup(spool: Spool) -> Pickup:
    clock = Clock(1 * MS, 2 * SECOND)
    clock.set_offset(0)
    commit = GroupCommit(clock.mono)
    settler = Settler(spool, commit, Backoff(), lambda name: None)
    poison = PoisonGuard(spool, "bench", os.getpid(), clock.now)
    daemon = DaemonId("bench", os.getpid())
    crew = Crew(spool, daemon, clock, 10 * SECOND, commit, settler, poison)
    return Pickup(crew, security.UserRules(), HOUR)


def drop_files(spool: Spool, n: int) -> None:
    now = time.time_ns() // 1000
    for _ in range(n):
        task_id, nonce = drop.member_id(os.geteuid(), now)
        body = TaskBody(id=task_id, argv=["true"], run_at=now + HOUR, submitted_at=now, cwd="/")
        with open(f"{spool.drop}/{task_id}.task", "wb") as f:
            f.write(drop.encode_submission(nonce, body))


def take_all(spool: Spool) -> tuple[float, float, int, int]:
    """Run passes until drop/ is empty: wall s, CPU s, passes, files filed."""
    pickup = _pickup(spool)
    wall, cpu = time.perf_counter(), time.process_time()
    passes = filed = 0
    while True:
        took = pickup.run(time.time_ns() // 1000)
        passes += 1
        filed += took.filed
        if not took.more and not os.listdir(spool.drop):
            break
    return time.perf_counter() - wall, time.process_time() - cpu, passes, filed


def submit_all(spool: Spool, n: int, batch: bool) -> tuple[float, float]:
    now = time.time_ns() // 1000
    bodies = [
        TaskBody(id=new_id(now), argv=["true"], run_at=now + HOUR, submitted_at=now, cwd="/")
        for _ in range(n)
    ]
    wall, cpu = time.perf_counter(), time.process_time()
    if batch:
        submit_batch(spool, bodies)
    else:
        for body in bodies:
            submit(spool, body)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=500, help="drop files")
    parser.add_argument("--dir", help="where to make the spools (default: a temporary one)")
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="taskq-pickup-", dir=args.dir)
    try:
        shared = _spool(os.path.join(top, "shared"))
        drop_files(shared, args.n)
        wall, cpu, passes, filed = take_all(shared)
        assert filed == args.n, (filed, args.n)
        n = args.n
        print(
            f"pickup        {wall / n * 1e3:6.2f} ms wall  {cpu / n * 1e3:6.2f} ms CPU per file"
            f"  ({n} files, {passes} passes)"
        )
        for batch, what in ((False, "submit_one"), (True, "submit_batch")):
            private = _spool(os.path.join(top, what))
            s_wall, s_cpu = submit_all(private, n, batch)
            print(
                f"{what:13} {s_wall / n * 1e3:6.2f} ms wall  {s_cpu / n * 1e3:6.2f} ms CPU per task"
            )
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
