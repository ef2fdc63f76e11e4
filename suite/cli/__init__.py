"""The `dpsuite` command line: parse a command and hand it to the layer below."""

from dpsuite.cli.main import main

__all__ = ["main"]
