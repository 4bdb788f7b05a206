"""Shell completion scripts for bash, zsh and fish, written out whole from taskq's own commands.

click's own completion runs `taskq` (a Python start, a tenth of a second
or more) on every TAB. These scripts are plain shell instead: every
command, subcommand, option and option value that taskq's click tree
knows is written into the script when it is made, at build time for the
Debian package (debian/rules) or once by hand:

    python3 -m taskq.cli.completions bash > ~/.local/share/bash-completion/completions/taskq

A script finds the command being typed by walking the words before the
cursor (skipping options and the values of options that take one), then
offers that command's subcommands, its options, or the values of the
option just typed (a choice, a file, a directory).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import click

from taskq.cli.main import cli

SHELLS = ("bash", "zsh", "fish")


@dataclass(frozen=True)
class Option:
    """One option of one command, as the scripts need it."""

    names: tuple[str, ...]  # --local and --utc, -h and --help
    takes_value: bool
    kind: str  # "file", "directory", "choice" or "" (a value typed by hand)
    choices: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class Command:
    """A command path ("" for taskq itself, "schedule add"), its subcommands and options."""

    path: str
    subcommands: tuple[tuple[str, str], ...]  # (name, short help)
    options: tuple[Option, ...]

    @property
    def key(self) -> str:
        """The path as the scripts spell it: "taskq", "taskq schedule add" (never empty)."""
        return f"taskq {self.path}".rstrip()

    def value_options(self) -> list[str]:
        return [n for o in self.options if o.takes_value for n in o.names]

    def flags(self) -> list[str]:
        return [n for o in self.options for n in o.names]


def _option(param: click.Option) -> Option:
    choices: tuple[str, ...] = ()
    kind = ""
    if isinstance(param.type, click.Choice):
        kind, choices = "choice", tuple(str(c) for c in param.type.choices)
    elif param.type.name in ("file", "directory"):
        kind = param.type.name
    first_line = (param.help or "").split(". ")[0].split("\n")[0]
    return Option(
        names=(*param.opts, *param.secondary_opts),
        takes_value=not param.is_flag and not param.count,
        kind=kind,
        choices=choices,
        help=first_line,
    )


def walk(
    cmd: click.Command, path: str = "", parent: click.Context | None = None
) -> Iterator[Command]:
    """Every command under cmd (cmd first), subcommands loaded as the lazy table says."""
    name = path.rsplit(" ", 1)[-1] or "taskq"
    ctx = click.Context(cmd, parent=parent, info_name=name, **cmd.context_settings)
    options = [_option(p) for p in cmd.get_params(ctx) if isinstance(p, click.Option)]
    subs: list[tuple[str, click.Command]] = []
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                subs.append((name, sub))
    yield Command(path, tuple((n, s.get_short_help_str(60)) for n, s in subs), tuple(options))
    for sub_name, sub in subs:
        yield from walk(sub, f"{path} {sub_name}".strip(), ctx)


def _words(items: list[str]) -> str:
    return " ".join(items)


def _sq(text: str) -> str:
    """text in single quotes, for any of the three shells."""
    return "'" + text.replace("'", "'\\''") + "'"


def _tables(commands: list[Command]) -> list[str]:
    """The shell tables bash's and zsh's scripts share: subcommands, flags, value options."""
    out = []
    for c in commands:
        key = _sq(c.key)
        out.append(f"_taskq_cmds[{key}]={_sq(_words([n for n, _ in c.subcommands]))}")
        out.append(f"_taskq_opts[{key}]={_sq(_words(c.flags()))}")
        out.append(f"_taskq_vals[{key}]={_sq(_words(c.value_options()))}")
    return out


def bash(commands: list[Command]) -> str:
    """The bash script: tables of words per command path, and one function that walks them."""
    out = [
        "# bash completion for taskq(1); made by python3 -m taskq.cli.completions bash",
        "declare -gA _taskq_cmds _taskq_opts _taskq_vals",
    ]
    out += _tables(commands)
    out.append("_taskq_value() {")
    out.append('    case "$1" in')
    for c in commands:
        for o in c.options:
            pattern = "|".join(_sq(f"{c.key}:{n}") for n in o.names)
            if o.kind == "choice":
                words = _sq(_words(list(o.choices)))
                out.append(f'    {pattern}) compgen -W {words} -- "$2" ;;')
            elif o.kind == "file":
                out.append(f'    {pattern}) compgen -f -- "$2" ;;')
            elif o.kind == "directory":
                out.append(f'    {pattern}) compgen -d -- "$2" ;;')
    out.append("    esac")
    out.append("}")
    out.append(_BASH_MAIN)
    return "\n".join(out) + "\n"


_BASH_MAIN = r"""_taskq() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local path=taskq i w skip=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if ((skip)); then skip=0; continue; fi
        [[ $w == -- ]] && return 0
        if [[ $w == -* ]]; then
            [[ " ${_taskq_vals[$path]} " == *" $w "* ]] && skip=1
            continue
        fi
        [[ " ${_taskq_cmds[$path]} " == *" $w "* ]] && path="$path $w"
    done
    if [[ " ${_taskq_vals[$path]} " == *" $prev "* ]]; then
        mapfile -t COMPREPLY < <(_taskq_value "$path:$prev" "$cur")
        return 0
    fi
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "${_taskq_opts[$path]}" -- "$cur")
    elif [[ -n ${_taskq_cmds[$path]} ]]; then
        mapfile -t COMPREPLY < <(compgen -W "${_taskq_cmds[$path]}" -- "$cur")
    fi
}
complete -o default -o bashdefault -F _taskq taskq"""


def zsh(commands: list[Command]) -> str:
    """The zsh script (a #compdef function): the same tables and walk as bash's."""
    out = [
        "#compdef taskq",
        "# zsh completion for taskq(1); made by python3 -m taskq.cli.completions zsh",
        "typeset -gA _taskq_cmds _taskq_opts _taskq_vals",
    ]
    out += _tables(commands)
    out.append("_taskq_value() {")
    out.append('    case "$1" in')
    for c in commands:
        for o in c.options:
            pattern = "|".join(_sq(f"{c.key}:{n}") for n in o.names)
            action = {"choice": f"compadd -- {_words(list(o.choices))}", "file": "_files"}
            line = action.get(o.kind, "_files -/" if o.kind == "directory" else "")
            if line:
                out.append(f"    {pattern}) {line} ;;")
    out.append("    esac")
    out.append("}")
    out.append(_ZSH_MAIN.rstrip())
    return "\n".join(out) + "\n"


# `path` is special in zsh (tied to PATH): the walk's path is cmdpath.
_ZSH_MAIN = r"""_taskq() {
    local cmdpath=taskq w prev=${words[CURRENT-1]}
    local -i i skip=0
    for ((i = 2; i < CURRENT; i++)); do
        w=${words[i]}
        if ((skip)); then skip=0; continue; fi
        [[ $w == -- ]] && { _files; return; }
        if [[ $w == -* ]]; then
            [[ " ${_taskq_vals[$cmdpath]} " == *" $w "* ]] && skip=1
            continue
        fi
        [[ " ${_taskq_cmds[$cmdpath]} " == *" $w "* ]] && cmdpath="$cmdpath $w"
    done
    if [[ " ${_taskq_vals[$cmdpath]} " == *" $prev "* ]]; then
        _taskq_value "$cmdpath:$prev"
        return
    fi
    if [[ $PREFIX == -* ]]; then
        compadd -- ${=_taskq_opts[$cmdpath]}
    elif [[ -n ${_taskq_cmds[$cmdpath]} ]]; then
        compadd -- ${=_taskq_cmds[$cmdpath]}
    else
        _files
    fi
}
_taskq "$@"
"""


def fish(commands: list[Command]) -> str:
    """The fish script: a path function over the same tables, then one complete line per word."""
    out = ["# fish completion for taskq(1); made by python3 -m taskq.cli.completions fish"]
    for table, words_of in (
        ("cmds", lambda c: [n for n, _ in c.subcommands]),
        ("vals", Command.value_options),
    ):
        out.append(f"function __taskq_{table} --argument-names path")
        out.append("    switch $path")
        for c in commands:
            out.append(f"        case {_sq(c.key)}")
            out.append(f"            echo {_sq(_words(words_of(c)))}")
        out.append("    end")
        out.append("end")
    out.append(_FISH_PATH)
    for c in commands:
        when = f"-n {_sq(f'test (__taskq_path) = {_sq(c.key)}')}"
        for name, help_text in c.subcommands:
            out.append(f"complete -c taskq -f {when} -a {_sq(name)} -d {_sq(help_text)}")
        for o in c.options:
            out.append(f"complete -c taskq {when} {_fish_option(o)}")
    return "\n".join(out) + "\n"


def _fish_option(o: Option) -> str:
    names = " ".join(f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}" for n in o.names)
    if not o.takes_value:
        how = "-f"
    elif o.kind == "choice":
        how = f"-x -a {_sq(_words(list(o.choices)))}"
    elif o.kind in ("file", "directory"):
        how = "-r -F"
    else:
        how = "-x"
    return f"{names} {how} -d {_sq(o.help)}"


_FISH_PATH = r"""function __taskq_path
    set -l words (commandline -opc)
    set -e words[1]
    set -l path taskq
    set -l skip 0
    for w in $words
        if test $skip = 1
            set skip 0
            continue
        end
        if string match -q -- '-*' $w
            contains -- $w (string split ' ' -- (__taskq_vals $path)); and set skip 1
            continue
        end
        contains -- $w (string split ' ' -- (__taskq_cmds $path)); and set path "$path $w"
    end
    echo $path
end"""


def script(shell: str) -> str:
    """The completion script for one of SHELLS."""
    commands = list(walk(cli))
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](commands)


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in SHELLS:
        sys.exit(f"usage: python3 -m taskq.cli.completions {'|'.join(SHELLS)}")
    sys.stdout.write(script(sys.argv[1]))


if __name__ == "__main__":
    main()
