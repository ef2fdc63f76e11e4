"""Errors that end a command with one clear line, never a traceback."""

from __future__ import annotations

import difflib
import os
import signal
from collections.abc import Iterable, Mapping


class UserError(Exception):
    """Bad input: the CLI prints the message on one line and exits non-zero before any work."""


def did_you_mean(
    word: str, choices: Iterable[str], prefix: str = "", known: Mapping[str, str] | None = None
) -> str:
    """' (did you mean X?)' naming the choice closest to ``word``, else ''.

    ``prefix`` goes before X (a key's parent section); ``known`` maps a word to its choice
    however far apart the two are spelled (a name from another library).
    """
    if known and word in known:
        return f" (did you mean {prefix}{known[word]}?)"
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


class ResultsWriteError(UserError):
    """Results cannot be written (disk full, file too large, no permission): the command stops.

    A sweep that cannot write its results stops rather than fail every remaining run.
    """

    def __init__(self, path: str | os.PathLike, exc: OSError) -> None:
        self.path = str(path)
        self.reason = exc.strerror or str(exc)
        super().__init__(f"cannot write results to {self.path}: {self.reason}")


class CommandAborted(BaseException):
    """Carries an error out of a Hydra job to the CLI.

    Hydra's job loop catches every Exception and goes on with the next job; like Ctrl-C, this
    one ends the whole command (the remaining runs of a sweep are not started).
    """

    def __init__(self, error: UserError) -> None:
        self.error = error
        super().__init__(str(error))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into an exception so that workers are stopped and results
    marked; ``signum`` is the signal's number."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = int(signum)


def raise_terminated(signum, frame) -> None:
    """A SIGTERM (or SIGHUP) handler: stop like Ctrl-C does, but say it was a termination."""
    raise Terminated(signum)
