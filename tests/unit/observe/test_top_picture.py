"""observe.top and cli.top's lines on a spool holding what no daemon would write.

Every file `taskq top` reads is input: junk names, bodies that are not
JSON, journals with impossible values and daemons' records with fields of
the wrong type must neither stop a redraw nor reach the terminal raw.
"""

from __future__ import annotations

import json
from pathlib import Path

from taskq.cli.top import lines
from taskq.observe.top import gather, histogram
from taskq.spool.layout import Spool
from taskq.spool.states import Phase
from taskq.spool.task import ClaimName, TaskName
from taskq.times.timespec import SECOND

NOW = 1_800_000_000 * SECOND
ID = "01M8RM0TDQZDF7PK8251KRPM6X"


def test_hostile_files_are_skipped_or_shown_escaped(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    spool.init()
    name = TaskName(NOW - SECOND, ID, 1, "qa")
    claim = ClaimName(name, Phase.STARTED, NOW + 60 * SECOND, 4242, "host")
    Path(spool.claimed, str(claim)).write_bytes(b"\xff not json")
    Path(spool.claimed, "junk_name").write_text("{}")
    log = Path(spool.log_dir(ID))
    log.mkdir(parents=True)
    (log / "journal").write_text(
        '[1]\n{"event": "start", "attempt": 1, "time": ["no"]}\nnot json\n'
    )
    done_day = Path(spool.done, "20270115")
    done_day.mkdir()
    other = "01M8RM0TKHFHY0TS3QSRGZ3PBW"
    Path(done_day, str(TaskName(NOW - 5 * SECOND, other, 1, "qa"))).write_text("{")
    Path(spool.log_dir(other)).mkdir()
    Path(spool.log_dir(other), "journal").write_text(
        '{"event": "start", "lateness": NaN}\n{"event": "start", "lateness": 0.002}\n'
    )
    # A record is its daemon's only if it is one (rundir.read_record): fields
    # of the wrong type make it no record at all; a name is anyone's text.
    Path(spool.run, "evil\x1b[2J.status").write_text(json.dumps({"owner": "evil\x1b[2J"}))
    refused = {"owner": "worse_1", "dispatching": "yes", "uncertainty": "big", "busy": [1]}
    Path(spool.run, "worse_1.status").write_text(json.dumps(refused))

    picture = gather(spool, NOW, "here", frozenset())
    assert [t.id for t in picture.running] == [ID]
    assert picture.running[0].command is None and picture.running[0].started is None
    assert sum(picture.lateness) == 1  # NaN left out
    assert picture.lateness_tasks == 1
    text = "\n".join(line for _, line, _ in lines(picture))
    assert "\x1b" not in text and "evil\\x1b[2J" in text
    assert "LATENESS of the last 1 done tasks' starts (1)" in text
    assert "DAEMONS 1" in text and "worse" not in text
    assert "NOT running (stale record)" in text  # no lock held: dead, whatever it says
    assert "clock uncertainty ?s" in text  # none recorded


def test_histogram_bars() -> None:
    assert histogram([0.0005, 0.002, 0.002, 5.0, 3600.0, float("inf")]) == [1, 2, 0, 0, 1, 0, 1]
