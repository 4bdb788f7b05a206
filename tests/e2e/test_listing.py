"""taskq ls streams and filters by name; stats counts by name and caches unchanged directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import Taskq

from taskq.spool import listing
from taskq.spool.layout import Spool
from taskq.spool.states import State
from taskq.spool.task import bucket_of
from taskq.times.timespec import SECOND, format_iso

HOUR = 3600 * SECOND


def ndjson(out: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.decode().splitlines()]


@pytest.mark.slow
def test_ls_filters(tq: Taskq) -> None:
    base = (time.time_ns() // 1000 // HOUR + 2) * HOUR  # on the hour, in the future
    ids = {}
    for n, queue in ((0, "a"), (1, "b"), (2, "a"), (3, "b")):
        at = f"@{(base + n * HOUR) / SECOND}"
        ids[n] = tq.submit("--at", at, "--queue", queue, "--key", f"k{n}", "--", "echo", str(n))
    tq.run("cancel", ids[3])

    def listed(*args: str) -> list[str]:
        return [str(r["id"]) for r in ndjson(tq.run("ls", "--json", *args).stdout)]

    assert listed() == [ids[0], ids[1], ids[2], ids[3]]
    assert listed("--state", "pending", "--queue", "a") == [ids[0], ids[2]]
    assert listed("--before", format_iso(base + 2 * HOUR)) == [ids[0], ids[1]]
    assert listed("--after", format_iso(base + HOUR)) == [ids[1], ids[2], ids[3]]
    assert listed("--after", format_iso(base + HOUR), "--limit", "1") == [ids[1]]
    assert listed("--key", "k2") == [ids[2]] and listed("--key", "nope") == []
    assert listed("--key", "k3", "--state", "pending") == []
    [row] = ndjson(tq.run("ls", "--json", "--key", "k3").stdout)
    assert row == {
        "id": ids[3],
        "state": "cancelled",
        "run_at": format_iso(base + 3 * HOUR),
        "attempt": 1,
        "queue": "b",
        "command": ["echo", "3"],
    }
    text = tq.run("ls", "--queue", "b").stdout.decode().splitlines()
    assert text[0].split() == ["ID", "STATE", "RUN_AT", "TRY", "QUEUE", "COMMAND"]
    run_at = format_iso(base + 3 * HOUR)[:23] + "Z"
    assert text[2].split() == [ids[3], "cancelled", run_at, "1", "b", "echo", "3"]
    [bare] = ndjson(tq.run("ls", "--json", "--key", "k3", "--no-command").stdout)
    assert bare == {k: v for k, v in row.items() if k != "command"}
    names = tq.run("ls", "--no-command", "--queue", "b").stdout.decode().splitlines()
    assert names[0].split() == ["ID", "STATE", "RUN_AT", "TRY", "QUEUE"]
    assert names[2].split() == [ids[3], "cancelled", run_at, "1", "b"]
    bad = tq.run("ls", "--before", "soon", check=False)
    assert bad.returncode == 2 and bad.stderr.decode().startswith("taskq: --before: bad time")
    assert tq.run("ls", "--limit", "0", check=False).returncode == 2


@pytest.mark.slow
def test_ls_reads_argv_and_after_from_any_body(tq: Taskq) -> None:
    """ls decodes only argv and after from the bodies taskq writes, and whole any other body.

    The environment is most of a body, and it may hold names and values that
    look like those fields; a body an operator rewrote in another layout is
    decoded whole. The listing of more tasks than one output block is complete.
    """
    first = tq.submit("--in", "1h", "--", "true")
    tq.env.update(argv='x\n "argv": ["evil"]', after='\n "after": ["01M8QB40XKYWG371TPYF9E4853"]')
    tricky = tq.submit(
        "--in", "2h", "--after", first, "--env", "argv=1", "--", "printf", '\n "argv": []'
    )
    rewritten = tq.submit("--in", "3h", "--", "echo", "hand", "made")
    [path] = [p for p in (tq.spool / "pending").rglob(f"*_{rewritten}_*")]
    body = json.loads(path.read_text())
    body = {"env": {"argv": ["no"]}, **{k: v for k, v in body.items() if k != "env"}}
    path.write_text(json.dumps(body))  # compact, env first: not taskq's own layout
    line = json.dumps({"command": ["sleep", "1"], "run_at": "now + 4 hours"}) + "\n"
    tq.run("submit", "--batch", "-", input=(line * 600).encode())
    rows = {str(r["id"]): r for r in ndjson(tq.run("ls", "--json").stdout)}
    assert rows[tricky]["command"] == ["printf", '\n "argv": []']
    assert rows[tricky]["after"] == [first]
    assert rows[rewritten]["command"] == ["echo", "hand", "made"]
    assert rows[first]["command"] == ["true"] and len(rows) == 603
    text = tq.run("ls").stdout.decode().splitlines()
    assert len(text) == 604 and text[0].startswith("ID")


@pytest.mark.slow
def test_a_long_listing_is_the_same_in_order_from_its_workers(tq: Taskq) -> None:
    """Past lspool.HEAD buckets, worker processes render; lines, order and limits are kept.

    90 minute buckets of three tasks each, in two queues, every --limit up
    to past the end of the head and into the workers' chunks.
    """
    from taskq.cli import lspool

    base = (time.time_ns() // 1000 // HOUR + 2) * HOUR
    docs = [
        {
            "command": ["echo", str(n)],
            "run_at": f"@{(base + n * 20 * SECOND) / SECOND}",
            "queue": "a" if n % 3 else "b",
        }
        for n in range(270)
    ]
    ids = (
        tq.run("submit", "--batch", "-", input="".join(json.dumps(d) + "\n" for d in docs).encode())
        .stdout.decode()
        .split()
    )
    assert len({d["run_at"][:-3] for d in docs}) > 60 > lspool.HEAD + lspool.CHUNK
    rows = ndjson(tq.run("ls", "--json").stdout)
    assert [r["id"] for r in rows] == ids
    assert [r["command"] for r in rows] == [d["command"] for d in docs]
    text = tq.run("ls").stdout.decode().splitlines()
    assert text[0].startswith("ID") and [line.split()[0] for line in text[1:]] == ids
    for limit in (1, 47, 48, 49, 100, 269, 270, 271):
        listed = ndjson(tq.run("ls", "--json", "--limit", str(limit)).stdout)
        assert [r["id"] for r in listed] == ids[:limit]
    b = [i for i, d in zip(ids, docs, strict=True) if d["queue"] == "b"]
    assert [r["id"] for r in ndjson(tq.run("ls", "--json", "--queue", "b").stdout)] == b
    head = subprocess.run(
        f"{sys.executable} -m taskq ls | head -2",
        shell=True,
        capture_output=True,
        env={**os.environ, "TASKQ_SPOOL": str(tq.spool)},
        timeout=60,
    )
    assert head.stdout.decode().splitlines()[1].split()[0] == ids[0] and not head.stderr


@contextmanager
def reads() -> Iterator[list[str]]:
    """The directories listed and files opened meanwhile (Python's audit events)."""
    seen: list[str] = []
    active = [True]

    def hook(event: str, args: tuple[object, ...]) -> None:
        if active[0] and event in ("os.listdir", "open") and args and args[0] is not None:
            seen.append(os.fsdecode(args[0]) if isinstance(args[0], str | bytes) else "")

    sys.addaudithook(hook)
    try:
        yield seen
    finally:
        active[0] = False  # audit hooks cannot be removed


@pytest.mark.slow
def test_ls_reads_only_the_buckets_its_window_needs(tq: Taskq) -> None:
    now = time.time_ns() // 1000
    for hours in (1, 2, 30, 40):
        tq.submit("--at", f"@{(now + hours * HOUR) / SECOND}", "--", "true")
    spool = Spool(str(tq.spool))
    before = now + 3 * HOUR
    with reads() as seen:
        rows = list(listing.rows(spool, listing.Filter(states=(State.PENDING,), before=before)))
    assert len(rows) == 2
    listed = {os.path.basename(p) for p in seen if p.startswith(spool.pending)}
    assert listed == {"pending", bucket_of(now + HOUR), bucket_of(now + 2 * HOUR)}
    with reads() as seen:
        [row] = list(listing.rows(spool, listing.Filter(limit=1)))
    assert row.command == ["true"]
    assert not [p for p in seen if bucket_of(now + 2 * HOUR) in p]  # stopped after one


@pytest.mark.slow
def test_stats_counts_stay_true_through_the_cache(tq: Taskq) -> None:
    at = f"@{(time.time_ns() // 1000 + 2 * HOUR) / SECOND}"
    first = tq.submit("--at", at, "--queue", "a", "--", "true")
    bucket = tq.spool / "pending" / bucket_of(round(float(at[1:]) * SECOND))
    settled = os.stat(bucket).st_ctime + 2.5
    while time.time() < settled:  # a directory is cached once unchanged for 2 s
        time.sleep(0.1)

    def pending() -> dict[str, int]:
        doc = json.loads(tq.run("stats", "--json").stdout)
        return dict(doc["counts"]["pending"])

    assert pending() == {"a": 1}
    lines = (tq.spool / "run" / "counts.tsv").read_text().splitlines()
    assert [
        line.split("\t")[-1] for line in lines if line.startswith(f"pending/{bucket.name}\t")
    ] == ["a:1"]
    tq.submit("--at", at, "--queue", "b", "--", "true")  # the same bucket changes
    assert pending() == {"a": 1, "b": 1}
    tq.run("cancel", first)
    assert pending() == {"b": 1}
    (tq.spool / "run" / "counts.tsv").write_text(f"pending/{bucket.name}\tgarbage\n")
    assert pending() == {"b": 1}
