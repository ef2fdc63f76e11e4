"""Errors that end a command with one clear line, never a traceback."""


class UserError(Exception):
    """Bad input: the CLI prints the message on one line and exits non-zero before any work."""
