"""Output directories a command shares with the user: it writes and removes only its own files.

A report, a comparison or an export goes into a directory that may hold the user's files too
(``throughput_paper_fig3.png``). Every file the command writes is written atomically (a hidden
temporary file renamed into place: a full disk or an I/O error leaves the previous file, never a
0-byte or torn one, and ends the command with one line), and the directory keeps a manifest of
what the command wrote (``.dpsuite-files.json``). Regenerating removes only the files the
previous manifest lists and this run did not write again (a plot that no longer applies);
nothing is ever removed by its name's shape.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from dpsuite.errors import UserError
from dpsuite.results.store import replace_atomically

MANIFEST = ".dpsuite-files.json"

_open: dict[Path, set[str]] = {}  # output directory -> names written into it by this command


class OutputWriteError(UserError):
    """An output file cannot be written (disk full, I/O error, no permission)."""

    def __init__(self, path: Path, exc: OSError) -> None:
        self.reason = exc.strerror or str(exc)
        super().__init__(f"cannot write {path}: {self.reason}")


def begin(out: Path) -> Path:
    """Create ``out`` (checking it can be written) and start recording what goes into it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise OutputWriteError(out, exc) from None
    _open[out.resolve()] = set()
    return out


def write(path: Path, data: bytes | str) -> None:
    """Write ``path`` atomically and record it in its directory's manifest (when begun)."""
    try:
        replace_atomically(path, data.encode() if isinstance(data, str) else data)
    except OSError as exc:
        raise OutputWriteError(path, exc) from None
    record(path)


def record(path: Path) -> None:
    """Note a file written by other means (already atomically) as this command's."""
    names = _open.get(path.parent.resolve())
    if names is not None:
        names.add(path.name)


def previous(out: Path) -> set[str]:
    """The names the last completed command wrote into ``out`` (its manifest)."""
    try:
        files = json.loads((out / MANIFEST).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {f for f in files if isinstance(f, str) and "/" not in f and not f.startswith(".")}


def finish(out: Path) -> None:
    """Remove what the previous run wrote and this one did not; write the new manifest."""
    names = _open.pop(out.resolve(), set())
    for stale in sorted(previous(out) - names):
        try:
            (out / stale).unlink(missing_ok=True)
        except OSError as exc:
            raise OutputWriteError(out / stale, exc) from None
    text = json.dumps({"written_by": "dpsuite", "files": sorted(names)}, indent=1) + "\n"
    write(out / MANIFEST, text)
