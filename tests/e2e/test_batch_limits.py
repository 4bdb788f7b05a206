"""Batch submission with group commit, and backpressure from the spool's limits."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import TASKQ, Taskq

from taskq.spool.task import TaskBody


def pending(spool: Path) -> list[Path]:
    return sorted(spool.glob("pending/*/*"))


def ndjson(*docs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(d).encode() + b"\n" for d in docs)


@pytest.mark.slow
def test_batch_prints_ids_in_input_order(tq: Taskq, tmp_path: Path) -> None:
    data = ndjson(
        {"command": ["echo", "one"], "in": "2h"},
        {"command": ["echo", "two"], "run_at": "2030-01-01T00:00:00Z", "queue": "mail"},
        {"command": ["cat"], "payload": "hello\n", "env": {"A": "1"}, "max_attempts": 5},
        {"command": ["true"], "in": 30, "timeout": "1m", "expires": 60, "cwd": str(tmp_path)},
    )
    ids = tq.run("submit", "--batch", "-", "--queue", "dflt", input=data).stdout.split()
    assert len(ids) == 4 and len(pending(tq.spool)) == 4
    docs = [tq.show(i.decode()) for i in ids]
    assert [d["command"][-1] for d in docs] == ["one", "two", "cat", "true"]
    assert [d["queue"] for d in docs] == ["dflt", "mail", "dflt", "dflt"]
    assert docs[1]["run_at"] == "2030-01-01T00:00:00.000000Z"
    assert docs[2]["stdin_bytes"] == 6 and docs[2]["env"]["A"] == "1"
    assert docs[2]["max_attempts"] == 5 and docs[2]["env"]["PATH"]
    assert (
        docs[3]["timeout"] == 60.0
        and docs[3]["expires"] == 60.0
        and docs[3]["cwd"] == str(tmp_path)
    )


def test_batch_from_a_file_with_keys(tq: Taskq, tmp_path: Path) -> None:
    batch = tmp_path / "tasks.ndjson"
    batch.write_bytes(
        ndjson(
            {"command": ["true"], "key": "a"},
            {"command": ["false"], "key": "a"},
            {"command": ["true"], "key": "b"},
        )
    )
    first = tq.run("submit", "--batch", str(batch), "--json").stdout.decode().splitlines()
    docs = [json.loads(line) for line in first]
    assert docs[0]["id"] == docs[1]["id"] != docs[2]["id"]
    assert [d["created"] for d in docs] == [True, False, True]
    again = [
        json.loads(x) for x in tq.run("submit", "--batch", str(batch), "--json").stdout.splitlines()
    ]
    assert [d["id"] for d in again] == [d["id"] for d in docs]
    assert not any(d["created"] for d in again)
    assert len(pending(tq.spool)) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"command": "ls"}', "command must be a non-empty list"),
        (b'{"command": ["ls"], "colour": 1}', "unknown field 'colour'"),
        (b'{"command": ["ls"], "in": "soon"}', "bad duration"),
        (b'{"command": ["ls"], "run_at": "x", "in": 1}', "not both"),
        (b'{"command": ["ls"], "max_attempts": 0}', "max_attempts"),
        (b'{"command": ["ls"], "env": {"A-B": "1"}}', "bad env entry"),
        (b'{"command": ["ls"], "payload_base64": "%%%"}', "not base64"),
        (b'{"command": ["ls"], "queue": "a_b"}', "bad queue"),
        (b'{"command": ["ls"], "cwd": "relative"}', "not an absolute path"),
    ],
)
@pytest.mark.slow
def test_a_bad_line_rejects_the_whole_batch(tq: Taskq, line: bytes, message: str) -> None:
    data = ndjson({"command": ["true"]}) + b"\n" + line + b"\n"
    proc = tq.run("submit", "--batch", "-", input=data, check=False)
    assert proc.returncode == 2
    assert (
        proc.stderr.decode().startswith("taskq: batch line 3: ") and message in proc.stderr.decode()
    )
    assert proc.stdout == b"" and pending(tq.spool) == []


@pytest.mark.slow
def test_batch_and_command_do_not_mix(tq: Taskq) -> None:
    proc = tq.run("submit", "--batch", "-", "--", "true", input=b"", check=False)
    assert proc.returncode == 2 and b"not both" in proc.stderr
    proc = tq.run("submit", "--batch", "-", "--key", "k", input=b"", check=False)
    assert proc.returncode == 2 and b"--key does not go with --batch" in proc.stderr


@pytest.mark.skipif(
    shutil.which("strace") is None, reason="strace (Debian package strace) is missing"
)
@pytest.mark.slow
def test_batch_syncs_a_bounded_number_of_times(tq: Taskq, tmp_path: Path) -> None:
    tq.submit("--", "true")  # the spool exists: its creation's syncs do not count
    data = ndjson(*({"command": ["true"], "in": f"{i}s", "key": f"k{i % 50}"} for i in range(500)))
    trace = tmp_path / "trace"
    env = {"TASKQ_SPOOL": str(tq.spool), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            str(trace),
            "-e",
            "trace=fsync,fdatasync,syncfs",
            *TASKQ,
            "submit",
            "--batch",
            "-",
        ],
        input=data,
        env=env,
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr
    syncs = [line for line in trace.read_text().splitlines() if "sync" in line]
    assert 1 <= len(syncs) <= 5, syncs
    assert len(proc.stdout.split()) == 500 and len(pending(tq.spool)) == 51


def write_config(tq: Taskq, text: str) -> None:
    tq.spool.mkdir(parents=True, exist_ok=True)
    (tq.spool / "config.toml").write_text(text)


@pytest.mark.slow
def test_backlog_limit_refuses_with_75(tq: Taskq) -> None:
    write_config(tq, "[limits]\nmax_overdue = 3\n")
    for _ in range(3):
        tq.submit("--at", "2001-01-01T00:00:00Z", "--", "true")
    proc = tq.run("submit", "--in", "1h", "--", "true", check=False)
    assert proc.returncode == 75
    assert proc.stderr.decode() == (
        "taskq: spool is over its backlog limit: 3 tasks overdue, limits.max_overdue = 3; "
        "try again later\n"
    )
    batch = tq.run("submit", "--batch", "-", input=ndjson({"command": ["true"]}), check=False)
    assert batch.returncode == 75 and len(pending(tq.spool)) == 3


def test_free_space_limits_refuse_with_75(tq: Taskq) -> None:
    write_config(tq, '[limits]\nmin_free_bytes = "1000000T"\n')
    proc = tq.run("submit", "--", "true", check=False)
    assert proc.returncode == 75 and b"limits.min_free_bytes = " in proc.stderr
    write_config(tq, "[limits]\nmin_free_inodes = 999999999999\n")
    proc = tq.run("submit", "--", "true", check=False)
    assert proc.returncode == 75 and b"limits.min_free_inodes = 999999999999" in proc.stderr
    assert pending(tq.spool) == []
    write_config(tq, '[limits]\nmin_free_bytes = "1M"\nmin_free_inodes = 10\nmax_overdue = 100\n')
    tq.submit("--", "true")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[limits\n", "cannot read"),
        ("[limits]\nmax_overdue = -1\n", "whole number"),
        ("[limits]\nspeed = 1\n", "unknown setting limits.speed"),
        ('[limits]\nmin_free_bytes = "lots"\n', "min_free_bytes must be bytes"),
    ],
)
def test_bad_config_is_exit_78(tq: Taskq, text: str, message: str) -> None:
    write_config(tq, text)
    proc = tq.run("submit", "--", "true", check=False)
    assert proc.returncode == 78 and message in proc.stderr.decode()
    assert pending(tq.spool) == []


@pytest.mark.parametrize("data", [b"", b"\n  \n"])
def test_an_empty_batch_accepts_nothing_and_exits_0(tq: Taskq, data: bytes) -> None:
    proc = tq.run("submit", "--batch", "-", input=data, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert pending(tq.spool) == []


def test_batch_bodies_are_real_bodies(tq: Taskq) -> None:
    tq.run("submit", "--batch", "-", input=ndjson({"command": ["printf", "%s", "x y"]}))
    [path] = pending(tq.spool)
    assert TaskBody.from_json(path.read_bytes()).argv == ["printf", "%s", "x y"]
