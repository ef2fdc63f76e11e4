"""argparse as the non-Hydra commands use it: a usage error is one line, like every bad input."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from dpsuite.errors import UserError


class ArgParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one `dpsuite: error: ...` line."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        if _introspecting:
            raise ParserBuilt(self)
        return super().parse_args(args, namespace)

    def error(self, message: str):
        command = self.prog.removeprefix("dpsuite").strip()
        where = f"{command}: " if command else ""
        raise UserError(f"{where}{message} (see {self.prog} --help)")


def finite(text: str) -> float:
    """An argparse type: a finite number (nan and inf are typos, not values)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


class ParserBuilt(Exception):
    """Raised by `ArgParser.parse_args` under `parser_of`: the command's parser, unused."""

    def __init__(self, parser: ArgParser):
        super().__init__(parser.prog)
        self.parser = parser


_introspecting = False


def parser_of(handler: Callable[[list[str]], int]) -> ArgParser | None:
    """The parser an argparse command builds, taken before it parses anything (completion
    reads its options from it); None for a command without one."""
    global _introspecting
    _introspecting = True
    try:
        handler([])
    except ParserBuilt as built:
        return built.parser
    finally:
        _introspecting = False
    return None
