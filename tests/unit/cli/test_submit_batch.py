"""`taskq submit --batch` in this process: no cyclic collector while it runs, as before after."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from taskq.cli.main import cli
from taskq.client import batch
from taskq.errors import BadInput


def test_a_batch_runs_without_the_cyclic_collector_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "batch.ndjson"
    lines.write_text('{"command": ["true"], "in": 3600}\n' * 3)
    seen: list[bool] = []
    parse = batch.parse

    def watched(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return parse(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(batch, "parse", watched)
    monkeypatch.setenv("TASKQ_SPOOL", str(tmp_path / "spool"))
    assert gc.isenabled()
    cli.main(["submit", "--batch", str(lines)], standalone_mode=False)
    assert seen == [False] and gc.isenabled()
    assert len(capsys.readouterr().out.split()) == 3
    with pytest.raises(BadInput, match="batch line 1"):  # a refused batch restores it too
        lines.write_text('{"command": []}\n')
        cli.main(["submit", "--batch", str(lines)], standalone_mode=False)
    assert gc.isenabled()
