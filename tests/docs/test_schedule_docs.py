"""The schedule subcommands are documented like every command (see test_docs.py):
each has its section in taskq(1), each option its paragraph there, with its
default; each has --help."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner
from test_docs import _command_section, _documented_default, _long_options, _paragraph

from taskq.cli.main import cli
from taskq.cli.schedule import schedule

SUBCOMMANDS = sorted(schedule.commands)


def _options() -> list[tuple[str, str, click.Parameter]]:
    return [
        (name, opt, param)
        for name in SUBCOMMANDS
        for opt, param in _long_options(schedule.commands[name])
    ]


def test_the_subcommands() -> None:
    assert SUBCOMMANDS == [
        "add", "backfill", "ls", "next", "pause", "resume", "rm", "run", "show", "skip",
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "option", "param"), _options())
def test_option_is_documented_with_its_default(
    name: str, option: str, param: click.Parameter
) -> None:
    paragraph = _paragraph(_command_section(f"schedule {name}"), option)
    default = _documented_default(param)
    if default is not None:
        stated = re.compile(rf"default:?\s+(?:\.[BI]R? )?{re.escape(default)}(?![\w.])")
        assert stated.search(paragraph)


def test_next_documents_its_short_option() -> None:
    assert "(default: 5)" in _paragraph(_command_section("schedule next"), "-n")


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_runs(name: str) -> None:
    result = CliRunner().invoke(cli, ["schedule", name, "--help"])
    assert result.exit_code == 0, result.output
    assert schedule.commands[name].help
