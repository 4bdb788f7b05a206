"""The completion scripts, run by the real shells: what TAB offers after what was typed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from taskq.cli.completions import script


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for shell in ("bash", "zsh", "fish"):
        path = tmp_path_factory.mktemp("completions") / f"taskq.{shell}"
        path.write_text(script(shell))
        out[shell] = path
    return out


def bash_offers(scripts: dict[str, Path], *words: str) -> list[str]:
    """What the bash function offers for the words typed so far (the last one: under the cursor)."""
    typed = " ".join(f"'{w}'" for w in words)
    program = (
        f"source {scripts['bash']}; COMP_WORDS=(taskq {typed}); COMP_CWORD={len(words)}; _taskq; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [w for w in done.stdout.splitlines() if w]


def test_bash_commands_subcommands_options_and_values(
    scripts: dict[str, Path], tmp_path: Path
) -> None:
    assert bash_offers(scripts, "su") == ["submit"]
    assert bash_offers(scripts, "--spool", "/x", "st") == ["stats", "status"]
    assert bash_offers(scripts, "schedule", "a") == ["add"]
    assert bash_offers(scripts, "schedule", "add", "--ca") == ["--catchup"]
    assert sorted(bash_offers(scripts, "ls", "--state", "ca")) == ["cancelled", "cancelling"]
    assert bash_offers(scripts, "ls", "--local", "--state", "w") == ["waiting"]
    assert bash_offers(scripts, "top", "--i") == ["--interval"]
    assert "--help" in bash_offers(scripts, "cancel", "-")
    (tmp_path / "jobs.ndjson").touch()
    assert bash_offers(scripts, "submit", "--batch", f"{tmp_path}/jo") == [
        f"{tmp_path}/jobs.ndjson"
    ]
    # The value of an option is not a command: `--queue ls` then TAB offers submit's options.
    assert "--key" in bash_offers(scripts, "submit", "--queue", "ls", "--k")
    assert bash_offers(scripts, "submit", "--", "-") == []  # after --: the command's own


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_from_the_same_tables(scripts: dict[str, Path]) -> None:
    def offers(line: str) -> list[str]:
        # No autoloaded completions: an installed taskq package's would replace these.
        program = f"set fish_complete_path; source {scripts['fish']}; complete -C {line!r}"
        done = subprocess.run(["fish", "-c", program], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return [w.split("\t")[0] for w in done.stdout.splitlines()]

    assert offers("taskq schedule a") == ["add"]
    assert offers("taskq ls --state pen") == ["pending"]
    assert "--interval" in offers("taskq top --")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses(scripts: dict[str, Path]) -> None:
    done = subprocess.run(["zsh", "-n", str(scripts["zsh"])], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert scripts["zsh"].read_text().startswith("#compdef taskq\n")
