"""Argument parsing for the commands that are not Hydra's (report, compare, comm-bench, ...)."""

from __future__ import annotations

import argparse

from suite.errors import UserError


class ArgParser(argparse.ArgumentParser):
    """argparse for the non-Hydra commands; a usage error is one line, like every bad input."""

    def error(self, message: str):
        command = self.prog.removeprefix("dpsuite ")
        raise UserError(f"{command}: {message} (see {self.prog} --help)")
