"""The documentation is part of the interface, so it is tested like code.

Every man page renders without a warning; every command and option of the
CLI is documented in taskq(1) (each in its own command's section, with its
default), every daemon option in taskq-daemon(8); every --help works; every
exit status is in the table; the examples are valid sh.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from taskq import __version__, errors
from taskq.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
MAN = ROOT / "man"
PAGES = sorted(p.name for p in MAN.glob("taskq*.[1-8]"))
EXAMPLES = sorted((ROOT / "examples").glob("*.sh"))
_CTX = click.Context(cli)
COMMANDS = cli.list_commands(_CTX)  # with `schedule`, which the group imports when asked


def _command(name: str) -> click.Command:
    command = cli.get_command(_CTX, name)
    assert command is not None
    return command


def _source(page: str) -> str:
    """A page's roff source with escaped hyphens ("\\-") made plain."""
    return (MAN / page).read_text().replace("\\-", "-")


def _section(text: str, heading: str) -> str:
    """The lines from the .SH/.SS line matching heading to the next heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(heading, line))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith((".SH", ".SS"))),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _command_section(name: str) -> str:
    return _section(_source("taskq.1"), rf'\.SS "taskq {re.escape(name)}[ "]')


def _paragraph(section: str, option: str) -> str:
    """The tagged paragraph (.TP, then a bold tag naming option) of option."""
    lines = section.splitlines()
    for i in range(1, len(lines)):
        tag = lines[i]
        if lines[i - 1].startswith(".TP") and tag.startswith(".B") and _mentions(tag, option):
            body = []
            for line in lines[i + 1 :]:
                if re.match(r"\.(TP|PP|SH|SS)\b", line):
                    break
                body.append(line)
            return "\n".join(body)
    raise AssertionError(f"{option} has no tagged paragraph of its own")


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def _long_options(command: click.Command) -> list[tuple[str, click.Parameter]]:
    return [
        (opt, param)
        for param in command.params
        for opt in [*param.opts, *param.secondary_opts]
        if opt.startswith("--")
    ]


def _all_options() -> list[tuple[str, str]]:
    return [(name, opt) for name in COMMANDS for opt, _ in _long_options(_command(name))]


def _param(command: str, option: str) -> click.Parameter:
    return dict(_long_options(_command(command)))[option]


def _documented_default(param: click.Parameter) -> str | None:
    """The default a page must state, or None for flags and unset defaults."""
    default = param.default
    if getattr(param, "is_flag", False) or isinstance(default, bool):
        return None
    return str(default) if isinstance(default, str | int | float) else None


def _options_with_defaults() -> list[tuple[str, str]]:
    return [(name, opt) for name, opt in _all_options() if _documented_default(_param(name, opt))]


# -- rendering ---------------------------------------------------------------


def test_all_pages_exist() -> None:
    assert PAGES == ["taskq-daemon.8", "taskq-spool.5", "taskq.1"]


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
@pytest.mark.parametrize("page", PAGES)
def test_page_renders_without_warnings(page: str) -> None:
    done = subprocess.run(
        ["groff", "-man", "-ww", "-z", str(MAN / page)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stderr == ""
    assert done.returncode == 0


@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_blank_lines(page: str) -> None:
    # A blank line in roff is an unstyled paragraph break; .PP says it properly.
    lines = (MAN / page).read_text().splitlines()
    assert [n for n, line in enumerate(lines, 1) if not line.strip()] == []


@pytest.mark.parametrize("page", PAGES)
def test_references_to_taskq_pages_resolve(page: str) -> None:
    refs = re.findall(r"^\.BR (taskq[\w-]*) \((\d)\)", _source(page), re.M)
    assert refs
    for name, section in refs:
        assert (MAN / f"{name}.{section}").exists(), f"{name}({section})"


# -- taskq(1) names every command and option ---------------------------------


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_a_section_in_taskq_1(name: str) -> None:
    assert _command_section(name)


@pytest.mark.parametrize(("name", "option"), _all_options())
def test_option_is_documented_under_its_command(name: str, option: str) -> None:
    _paragraph(_command_section(name), option)


@pytest.mark.parametrize(("name", "option"), _options_with_defaults())
def test_option_default_is_documented_in_taskq_1(name: str, option: str) -> None:
    default = re.escape(str(_documented_default(_param(name, option))))
    # "(default 8)", or "(default:" then ".BR default )." on the next line.
    stated = re.compile(rf"default:?\s+(?:\.[BI]R? )?{default}(?![\w.])")
    assert stated.search(_paragraph(_command_section(name), option))


def test_global_options_are_documented() -> None:
    section = _section(_source("taskq.1"), r"\.SH GLOBAL OPTIONS")
    options = [opt for opt, _ in _long_options(cli)]
    assert "--spool" in options and "--version" in options
    for option in [*options, "--help"]:
        _paragraph(section, option)
    assert _mentions(section, "-V") and _mentions(section, "-h")


def test_synopsis_names_every_command() -> None:
    synopsis = _section(_source("taskq.1"), r"\.SH SYNOPSIS")
    for name in COMMANDS:
        assert re.search(rf"^\.B {name}$", synopsis, re.M), name


def test_every_task_state_is_documented() -> None:
    # The states of ls --state, in taskq(1)'s list of states and under ls.
    from taskq.spool.states import STATES

    text = _source("taskq.1")
    described = _section(text, r"\.SH DESCRIPTION")
    listed = _paragraph(_command_section("ls"), "--state")
    for state in STATES:
        assert re.search(rf"^\.TP\n\.B {state}$", described, re.M), state
        assert re.search(rf"^\.BR? {state}\b", listed, re.M), state


# -- taskq-daemon(8) names every daemon option with its default --------------


@pytest.mark.parametrize("option", [opt for opt, _ in _long_options(_command("daemon"))])
def test_daemon_option_is_in_taskq_daemon_8(option: str) -> None:
    text = _source("taskq-daemon.8")
    assert _mentions(_section(text, r"\.SH SYNOPSIS"), option)
    paragraph = _paragraph(_section(text, r"\.SH OPTIONS"), option)
    default = _documented_default(_param("daemon", option))
    if default is not None:
        assert f"Default: {default}." in paragraph


# -- exit statuses -----------------------------------------------------------


def test_exit_status_table_is_complete() -> None:
    table = _section(_source("taskq.1"), r"\.SH EXIT STATUS")
    documented = {int(n) for n in re.findall(r"^\.B (\d+)$", table, re.M)}
    defined = {v for k, v in vars(errors).items() if k.startswith("EX_")}
    assert documented == defined


# -- --help ------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], *([name] for name in COMMANDS)])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_runs(args: list[str], flag: str) -> None:
    result = CliRunner().invoke(cli, [*args, flag])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_text(name: str) -> None:
    assert _command(name).help


def test_version() -> None:
    result = CliRunner().invoke(cli, ["-V"])
    assert result.exit_code == 0
    assert __version__ in result.output


# -- examples ----------------------------------------------------------------


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid_sh(script: Path) -> None:
    done = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert script.read_text().startswith("#!/bin/sh\n# ")
