"""The reference results without a clone: a compact copy packaged with dpsuite.

The repository's ``results/reference`` (every machine's runs, several MB with their CSVs) is
packaged as what `dpsuite compare` reads of it: each run's run.json and each comm-bench and
input-bench result, in one xz tarball of about 100 kB (``reference_results.tar.xz``). It is
unpacked once into the cache directory; ``DPSUITE_REFERENCE=DIR`` reads a results tree of your
choice instead (a clone's ``results/reference``, or a team's own reference machines).

After the reference results change, repack: ``nox -s reference_archive``.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

from dpsuite.errors import UserError
from dpsuite.results.store import (
    COMM_BENCH_CSV,
    COMM_BENCH_JSON,
    INPUT_BENCH_CSV,
    INPUT_BENCH_JSON,
)

ARCHIVE = Path(__file__).with_name("reference_results.tar.xz")
ENV = "DPSUITE_REFERENCE"
TOP = "reference"  # the folder the archive unpacks into (named so in comparisons)
PACKED_NAMES = ("run.json", COMM_BENCH_JSON, COMM_BENCH_CSV, INPUT_BENCH_JSON, INPUT_BENCH_CSV)


def packed_files(tree: Path) -> list[Path]:
    """The files of a results tree that the packaged copy holds, in a stable order."""
    return sorted(p for p in Path(tree).rglob("*") if p.name in PACKED_NAMES and p.is_file())


def pack(tree: str | Path, archive: Path = ARCHIVE) -> Path:
    """Write ``archive`` from the results tree ``tree``: the same bytes for the same files."""
    tree = Path(tree)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for path in packed_files(tree):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{TOP}/{path.relative_to(tree).as_posix()}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buffer.getvalue())
    return archive


def reference_dir(cache_dir: str | Path) -> Path:
    """The reference results tree to compare with: ``DPSUITE_REFERENCE``, or the packaged copy
    unpacked (once per version of it) under ``cache_dir``."""
    chosen = os.environ.get(ENV)
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_dir():
            raise UserError(f"{ENV}={chosen}: not a directory of results")
        return path
    if not ARCHIVE.is_file():
        raise UserError(
            f"this dpsuite has no packaged reference results ({ARCHIVE.name}); set {ENV} to a "
            "results directory (a clone's results/reference)"
        )
    digest = hashlib.sha256(ARCHIVE.read_bytes()).hexdigest()[:12]
    home = Path(cache_dir).expanduser() / f"reference-{digest}"
    if not (home / TOP).is_dir():
        unpack(home)
    return home / TOP


def unpack(home: Path) -> None:
    """Unpack the archive into ``home`` whole: into a scratch folder renamed at the end, so a
    concurrent or interrupted unpack never leaves half a tree."""
    scratch = home.with_name(f"{home.name}.{os.getpid()}.tmp")
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        with tarfile.open(ARCHIVE, mode="r:xz") as tar:
            tar.extractall(scratch, filter="data")
        os.replace(scratch, home)
    except OSError as exc:
        if not (home / TOP).is_dir():  # another process unpacked it first: fine
            raise UserError(f"cannot unpack the reference results into {home}: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
