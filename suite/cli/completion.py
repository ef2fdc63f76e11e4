"""Shell completion for `dpsuite`: commands, options, sweep presets and config keys.

The shell script is Hydra's (`eval "$(dpsuite -sc install=bash)"`, zsh through bashcompinit);
it asks `dpsuite -sc query=bash` for the words that fit the line being typed (COMP_LINE). The
config keys, groups and their options come from Hydra's own completion over dpsuite's config;
the commands and options of the other commands from their parsers.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Mapping
from typing import Any

from dpsuite.errors import UserError

ACTIONS = ("install=bash", "uninstall=bash", "query=bash")
# The Hydra commands' own flags (their KEY=VALUE words are completed by Hydra).
HYDRA_COMMAND_OPTIONS = {
    "run": ["-m", "--multirun", "--help", "--dry-run", "--cfg", "--resolve"],
    "sweep": ["--help", "--dry-run"],
    "demo": ["--help", "--dry-run"],
}
TOP_OPTIONS = ["-h", "--help", "-V", "--version", "-sc", "--shell-completion"]


def respond(action: str, commands: Mapping[str, Any]) -> str:
    """What `dpsuite -sc ACTION` prints; ``commands`` is the CLI's command table (name ->
    command with its ``handler``), passed in so that this module stays below the CLI's."""
    if action not in ACTIONS:
        raise UserError(f"-sc {action}: choose one of {', '.join(ACTIONS)} (zsh: bashcompinit)")
    if action == "query=bash":
        line = os.environ.get("COMP_LINE", "")
        point = int(os.environ.get("COMP_POINT", len(line)))
        return " ".join(candidates(line[:point], commands))
    from dpsuite.conf.hydra_internals import bash_completion

    plugin = bash_completion()  # install and uninstall print a script; they need no config
    program, sys.argv[0] = sys.argv[0], "dpsuite"  # Hydra names the command after argv[0]
    try:
        with contextlib.redirect_stdout(io.StringIO()) as script:
            plugin.install() if action == "install=bash" else plugin.uninstall()
    finally:
        sys.argv[0] = program
    return script.getvalue().rstrip("\n")


def candidates(line: str, commands: Mapping[str, Any]) -> list[str]:
    """The words that can complete the last word of a `dpsuite ...` command line."""
    words = line.split()
    current = "" if not words or line[-1].isspace() else words.pop()
    words = _after_program(words)
    if not words:
        choices = TOP_OPTIONS if current.startswith("-") else list(commands)
    elif words[0] in HYDRA_COMMAND_OPTIONS:
        choices = _hydra_command(words[0], words[1:], current)
    else:
        choices = _argparse_command(commands, words[0], words[1:], current)
    return [c for c in choices if c.startswith(current)]


def _after_program(words: list[str]) -> list[str]:
    """The words after `dpsuite` (or after `python -m dpsuite`)."""
    if words and "python" in os.path.basename(words[0]) and words[1:3] == ["-m", "dpsuite"]:
        return words[3:]
    return words[1:]


def _hydra_command(command: str, rest: list[str], current: str) -> list[str]:
    if current.startswith("-"):
        return HYDRA_COMMAND_OPTIONS[command]
    overrides = [w for w in rest if not w.startswith("-")]
    if command == "sweep":
        if not overrides:
            from dpsuite.conf.compose import preset_names

            return preset_names()
        overrides = overrides[1:]  # the preset's name
    return config_words(overrides, current)


def config_words(overrides: list[str], current: str) -> list[str]:
    """Hydra's completion of ``current`` after ``overrides``: keys, groups and their options."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from dpsuite.conf import compose, schema
    from dpsuite.conf.hydra_internals import bash_completion

    schema.register(listed=True)  # every workload, installed plugins included
    with initialize_config_module(config_module=compose.CONFIG_MODULE, version_base=None):
        plugin = bash_completion(GlobalHydra.instance().config_loader())
        try:
            return plugin._query(config_name="config", line=" ".join([*overrides, current]))
        except Exception:  # a half-typed override Hydra cannot parse: nothing to offer
            return []


def _argparse_command(
    commands: Mapping[str, Any], command: str, rest: list[str], current: str
) -> list[str]:
    from dpsuite.cli.args import parser_of

    if command not in commands:
        return []
    parser = parser_of(commands[command].handler)
    if parser is None:
        return []
    by_flag = {flag: a for a in parser._actions for flag in a.option_strings}
    previous = by_flag.get(rest[-1]) if rest else None
    if previous is not None and previous.nargs != 0:
        return [str(c) for c in previous.choices or []]  # none: the shell offers file names
    if current.startswith("-"):
        return list(by_flag)
    given = [w for w in rest if not w.startswith("-")]
    positionals = [a for a in parser._actions if not a.option_strings]
    if len(given) < len(positionals) and positionals[len(given)].choices:
        return [str(c) for c in positionals[len(given)].choices]
    return []
