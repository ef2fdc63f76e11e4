"""The reference results reachable from an installed dpsuite: the packaged copy holds what
`dpsuite compare` reads of results/reference, and `dpsuite compare --reference MINE` compares
a tree with it without a clone."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd
import pytest

from dpsuite.results import reference

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def test_the_packaged_copy_is_the_reference_results_byte_for_byte():
    with tarfile.open(reference.ARCHIVE, mode="r:xz") as tar:
        packed = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    expected = {
        f"{reference.TOP}/{p.relative_to(REFERENCE).as_posix()}": p.read_bytes()
        for p in reference.packed_files(REFERENCE)
    }
    assert sum(name.endswith("/run.json") for name in expected) > 100
    assert packed.keys() == expected.keys(), "results/reference changed: nox -s reference_archive"
    assert all(packed[name] == expected[name] for name in expected)
    assert reference.ARCHIVE.stat().st_size < 200_000  # compact: run.json and benchmarks only


def my_tree(root: Path) -> Path:
    """A copy of one reference machine's scaling runs (its run.json files only)."""
    for run_json in sorted((REFERENCE / "epyc-2core-cpu" / "scaling").glob("*/run.json")):
        target = root / run_json.parent.name / "run.json"
        target.parent.mkdir(parents=True)
        target.write_bytes(run_json.read_bytes())
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DPSUITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(reference.ENV, raising=False)
    return tmp_path / "cache"


def test_compare_reference_unpacks_the_packaged_copy_once_and_compares(dpsuite, tmp_path, cache):
    mine = my_tree(tmp_path / "mine")
    out = tmp_path / "cmp"
    assert dpsuite("compare", "--reference", str(mine), "--out", str(out)) == 0
    [unpacked] = cache.glob("reference-*/reference")
    assert (unpacked / "epyc-2core-cpu").is_dir()
    ratios = pd.read_csv(out / "ratios.csv")
    assert len(ratios) and set(ratios["A"]) == {f"epyc-2core-cpu in {unpacked}"}
    assert list(ratios["ratio_B_over_A"]) == pytest.approx([1.0] * len(ratios))  # same runs
    stamp = unpacked.stat().st_mtime_ns
    assert dpsuite("compare", "--reference", str(mine), "--out", str(out)) == 0
    assert unpacked.stat().st_mtime_ns == stamp  # read again, not unpacked again


def test_the_environment_names_another_reference_tree(dpsuite, tmp_path, cache, monkeypatch):
    mine = my_tree(tmp_path / "mine")
    theirs = my_tree(tmp_path / "theirs")
    monkeypatch.setenv(reference.ENV, str(theirs))
    assert dpsuite("compare", "--reference", str(mine), "--out", str(tmp_path / "cmp")) == 0
    assert not cache.exists()
    ratios = pd.read_csv(tmp_path / "cmp" / "ratios.csv")
    assert set(ratios["A"]) == {f"epyc-2core-cpu in {theirs}"}


def test_a_missing_reference_tree_is_one_line(dpsuite, tmp_path, cache, monkeypatch, capsys):
    monkeypatch.setenv(reference.ENV, str(tmp_path / "nowhere"))
    assert dpsuite("compare", "--reference", str(tmp_path)) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("dpsuite: error: DPSUITE_REFERENCE=") and "not a directory" in line
