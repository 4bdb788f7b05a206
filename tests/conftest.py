"""Shared fixtures: a tmp_path spool, the real taskq executable, real daemons."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from taskq.spool import byid, journal
from taskq.spool.layout import Spool

# The suite must pass on a loaded machine, where drawing examples and running one take
# what they take: no property fails for its speed (a test's own settings add to these).
settings.register_profile("loaded", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("loaded")

BIN = Path(sys.executable).parent / "taskq"
TASKQ = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "taskq"]


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll until predicate() is truthy; fail the test with `what` on timeout.

    Between polls it sleeps at least as long as the last poll took: a predicate
    that runs the CLI (a Python start-up, 0.1-0.3 s of CPU) would otherwise keep a
    core busy for the whole wait, and starve the daemon the test is waiting on.
    """
    deadline = time.monotonic() + timeout
    while True:
        began = time.monotonic()
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(min(max(0.02, now - began), 0.5))


@dataclass
class Taskq:
    """Runs the real taskq executable against one spool."""

    spool: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, *args: str, input: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        env = {**os.environ, "TASKQ_SPOOL": str(self.spool), **self.env}
        proc = subprocess.run(
            [*TASKQ, *args], input=input, capture_output=True, env=env, timeout=60
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"taskq {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}"
            )
        return proc

    def submit(self, *args: str, input: bytes | None = None) -> str:
        return self.run("submit", *args, input=input).stdout.decode().strip()

    def show(self, task_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("show", "--json", task_id).stdout)
        return doc

    def state(self, task_id: str) -> str:
        return str(self.show(task_id)["state"])

    def states(self) -> dict[str, str]:
        """Every task's state, from one `taskq ls --json` (not a `taskq show` a task)."""
        out = self.run("ls", "--json", "--no-command").stdout
        return {r["id"]: r["state"] for r in map(json.loads, out.splitlines())}

    def _not_yet(self, task_id: str, states: tuple[str, ...]) -> bool:
        """Whether the task is surely not in one of states yet: found, in another state."""
        try:
            return byid.locate(Spool(str(self.spool)), task_id).state not in states
        except Exception:  # (not found, a rename raced the look, ...): ask the CLI
            return False

    def wait_state(
        self, task_id: str, states: tuple[str, ...], timeout: float = 15.0
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            if self._not_yet(task_id, states):  # a look in-process, not a `taskq show` per poll
                return None
            doc = self.show(task_id)
            return doc if doc["state"] in states else None

        return wait_for(reached, timeout, f"task {task_id} to reach {states}")  # type: ignore[no-any-return]


class Daemon:
    """A real `taskq daemon` subprocess, its stderr in a file."""

    def __init__(self, tq: Taskq, log: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = log
        full_env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), **tq.env, **(env or {})}
        self._logf = open(log, "wb")  # noqa: SIM115 - closed in stop() or kill()
        argv = [*TASKQ, "daemon", *args]
        self.proc = subprocess.Popen(argv, stderr=self._logf, env=full_env)
        try:
            wait_for(
                lambda: b"started on" in log.read_bytes() or self.proc.poll() is not None,
                60,  # a busy machine can take this long to import and bind
                "the daemon to start",
            )
        except BaseException:  # no caller holds this Daemon yet to kill it: do it here
            self.kill()
            raise
        if self.proc.poll() is not None:
            self._logf.close()
            raise AssertionError(f"the daemon exited at once: {log.read_text()}")

    def text(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._logf.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._logf.close()


def events(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The journal records of `taskq show --json`'s attempts with this event name."""
    return [r for r in doc["attempts"] if r["event"] == name]


def journal_of(tq: Taskq, task_id: str) -> list[dict[str, Any]]:
    """A task's journal, as `taskq show --json` lists it under "attempts", read here: for
    a test that reads hundreds, where as many `taskq show` processes take minutes of CPU
    on two loaded cores."""
    return journal.read(Spool(str(tq.spool)).log_dir(task_id))


@pytest.fixture
def tq(tmp_path: Path) -> Taskq:
    return Taskq(tmp_path / "spool")


@pytest.fixture
def start_daemon(tq: Taskq, tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start(*args: str, host: str = "testhost", env: dict[str, str] | None = None) -> Daemon:
        log = tmp_path / f"daemon{len(started)}-{host}.log"
        d = Daemon(tq, log, "--host-id", host, *args, env=env)
        started.append(d)
        return d

    yield start
    kill_all(started)
    kill_left(tq.spool)


def kill_left(spool: Path) -> None:
    """SIGKILL what still runs for this spool once its daemons are gone, by pid: the keepers
    and supervisors that outlive a killed daemon by design, and the commands they run
    (each in a session of its own; one deaf to TERM would run on after the test)."""
    marks = {f"TASKQ_SPOOL={p}".encode() for p in (spool, spool.resolve())}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        if pid != os.getpid() and marks.intersection(env):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def kill_all(daemons: list[Daemon]) -> None:
    """Kill (SIGKILL) the daemons a test started that still run; close every log."""
    for d in daemons:
        if d.proc.poll() is None:
            d.kill()
        else:
            d._logf.close()  # one that stopped by itself was never stop()ped


@pytest.fixture
def stamps(tmp_path: Path) -> Path:
    """A file tasks append 'TASKQ_ID EPOCH' lines to, with real time from date."""
    return tmp_path / "stamps"


def stamp_cmd(stamps: Path, extra: str = "") -> list[str]:
    """A command that records its start: the task id and the epoch with nanoseconds."""
    return ["sh", "-c", f'echo "$TASKQ_ID $TASKQ_ATTEMPT $(date +%s.%N)" >> {stamps}{extra}']


def until(gate: Path) -> str:
    """A shell fragment that waits for the file `gate`: an attempt that runs until the
    test opens the gate, however slow the machine (never a fixed sleep)."""
    return f"; while [ ! -e {gate} ]; do sleep 0.05; done"


def read_stamps(stamps: Path) -> list[tuple[str, int, float]]:
    if not stamps.exists():
        return []
    rows = []
    for line in stamps.read_text().splitlines():
        task_id, attempt, when = line.split()
        rows.append((task_id, int(attempt), float(when)))
    return rows


def _runs_as_nobody(command: list[str]) -> bool:
    """Whether an unprivileged user (nobody) can run `command --version`."""
    probe = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command, "--version"]
    try:
        return subprocess.run(probe, capture_output=True, cwd="/", timeout=60).returncode == 0
    except OSError:
        return False


def _public_copy(top: Path) -> list[str] | None:
    """Copy taskq and its dependencies where anyone may read them; a launcher for it.

    The checkout (and its venv) may live in a private directory, such as
    root's 0700 home: throwaway users cannot reach it. The copy runs under an
    interpreter of the same version that they can reach, if there is one.
    """
    from importlib import metadata

    lib = top / "lib"
    todo, seen = ["taskq"], set()
    while todo:
        dist = metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f)))
            if src.suffix in (".py", ".so", ".typed") and src.is_file() and ".." not in f.parts:
                (lib / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, lib / f)
    import taskq  # an editable install lists no files: copy the package itself

    shutil.copytree(Path(taskq.__file__).parent, lib / "taskq", dirs_exist_ok=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (
        os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        f"/usr/bin/{version}",
    ):
        launcher = top / "taskq"
        launcher.write_text(
            f"#!{python}\nimport sys\nsys.path.insert(0, {str(lib)!r})\n"
            "from taskq.cli.main import main\nmain()\n"
        )
        for path in (top, *top.rglob("*")):
            path.chmod(0o755 if path.is_dir() or path == launcher else 0o644)
        if _runs_as_nobody([str(launcher)]):
            return [str(launcher)]
    return None


@pytest.fixture(scope="session")
def others_taskq() -> Iterator[list[str]]:
    """A taskq command that other (throwaway) users can run, wherever the checkout is.

    Needs root (to run the probe as nobody) and setpriv; skips naming the
    reason when no interpreter they can reach is found.
    """
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to run taskq as other users")
    if _runs_as_nobody(TASKQ):
        yield TASKQ
        return
    top = Path(tempfile.mkdtemp(prefix="taskq-public-"))
    try:
        top.chmod(0o755)
        command = _public_copy(top)
        if command is None:
            pytest.skip(f"no Python {sys.version_info[:2]} that other users can run was found")
        yield command
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _uses_a_bed(item: pytest.Item) -> bool:
    """Whether the test's module uses tests/substrates.py (the beds): as a plugin or by import."""
    module = getattr(item, "module", None)
    if module is None:
        return False
    if "substrates" in getattr(module, "pytest_plugins", ()):
        return True
    return any(
        getattr(value, "__module__", None) == "substrates" for value in vars(module).values()
    )


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker more than there are cores.

    Much of the suite waits, on run times, leases and minute boundaries, with
    its CPU idle; a third worker on two cores fills that, and on a machine
    already busy it keeps the suite's share of the CPU from halving.
    """
    return (os.cpu_count() or 1) + 1


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, every test of a shared-filesystem bed runs in one worker.

    A bed (GlusterFS, JuiceFS, CephFS) is session-scoped and uses machine-wide
    state (glusterd's /var/lib/glusterd, the /run/netns mount): two workers
    bringing up their own would collide and each would pay the set-up. Grouped,
    one worker brings each bed up once while the other runs the rest. The group
    goes first: the scheduler hands out work in collection order, and the
    longest unit taken last would leave the other worker idle at the end.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    beds = [item for item in items if _uses_a_bed(item)]
    for item in beds:
        item.add_marker(pytest.mark.xdist_group("beds"))
    grouped = set(beds)
    items[:] = beds + [item for item in items if item not in grouped]


def pytest_collection_finish(session: pytest.Session) -> None:
    """In a worker under --dist=loadgroup, stop at once if the grouping did not take.

    pytest-xdist groups by a suffix it writes into each node id; a pytest that
    keeps node ids elsewhere drops it silently (pytest-dev/pytest-xdist#1386),
    and the beds would then be brought up twice, by both workers, at once.
    """
    if not hasattr(session.config, "workerinput") or not session.config.getvalue("loadgroup"):
        return
    lost = [item.nodeid for item in session.items if _uses_a_bed(item) and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {lost[0]} with the other bed tests"
            f" (pytest {pytest.__version__}; see pyproject.toml's test extra)"
        )


def run_until_it_dies(tq: Taskq, log: Path, point: str) -> int:
    """Run a daemon on tq's spool that crashes at `point` (TASKQ_CRASH_AT); its stderr
    goes to `log`; the exit status (-9 for the crash point's SIGKILL)."""
    env = {**os.environ, "TASKQ_SPOOL": str(tq.spool), "TASKQ_CRASH_AT": point}
    with open(log, "wb") as err:
        proc = subprocess.run(
            [*TASKQ, "daemon", "--host-id", "testhost"], env=env, stderr=err, timeout=60
        )
    return proc.returncode
