"""Token files read memory-mapped (``dpsuite.workloads.token_file``): windows of context + 1
tokens, spread over the whole file, paged in as loader workers take them; a rank's peak memory
does not grow with the file (a sparse file several times larger than the rank trains)."""

from __future__ import annotations

import mmap
import pickle
from types import SimpleNamespace

import numpy as np
import pytest

from dpsuite.measure.memory_estimate import data_bytes
from dpsuite.workloads import get_workload
from dpsuite.workloads.token_file import (
    TokenWindows,
    advise_random_access,
    spread_windows,
    token_splits,
)
from tests.conftest import only_run, read_run

MiB = 2**20


def test_windows_are_spread_over_the_file_and_every_one_when_it_holds_no_more():
    assert spread_windows(30, 10) == range(0, 30, 3)
    assert spread_windows(30, 100) == range(30)
    assert list(spread_windows(7, 3)) == [0, 2, 4]


def test_a_window_is_read_from_the_mapped_file_as_int64_input_and_shifted_target(tmp_path):
    path = tmp_path / "train.bin"
    tokens = (np.arange(5 * 9) * 7 % 50000).astype(np.uint16)
    tokens.tofile(path)
    train, evaluate = token_splits(path, np.uint16, 8, range(5))
    assert (len(train), len(evaluate)) == (4, 1)
    x, y = train[2]
    assert x.tolist() == tokens[18:26].tolist() and y.tolist() == tokens[19:27].tolist()
    assert evaluate[0][0].tolist() == tokens[36:44].tolist()
    assert train._tokens is not None
    copy = pickle.loads(pickle.dumps(train))  # another process maps the file itself
    assert copy._tokens is None and copy[2][0].tolist() == x.tolist()
    assert isinstance(train, TokenWindows)


def test_the_mapping_is_advised_of_random_access(tmp_path):
    """Without the advice each window's page fault reads ahead megabytes around it."""
    advised: list[int] = []
    advise_random_access(SimpleNamespace(_mmap=SimpleNamespace(madvise=advised.append)))
    assert advised == [mmap.MADV_RANDOM]
    path = tmp_path / "train.bin"
    np.zeros(100, dtype=np.uint16).tofile(path)
    real = TokenWindows(path, np.uint16, 8, range(3)).tokens()
    assert hasattr(real._mmap, "madvise")  # the numpy memmap the advice reaches


def gpt2_run(dpsuite, out, path, loader_workers: int) -> dict:
    args = [
        "workload=gpt2",
        "workload.layers=1",
        "workload.width=32",
        "workload.heads=2",
        "workload.context=64",
        "workload.vocab_size=128",
        "workload.num_samples=4000",
        "workload.eval_batch=64",
        f"workload.token_path={path}",
        "workers=2",
        "batch.per_worker=8",
        f"data.loader_workers={loader_workers}",
        "train.max_steps=6",
        "train.eval_at_start=false",
        "timing.warmup_steps=1",
        "timing.calibration_steps=0",
        f"results_dir={out}",
    ]
    assert dpsuite("run", *args) == 0
    rec = read_run(only_run(out))
    assert rec["status"] == "complete" and rec["data_form"] == "datasets"
    return rec


@pytest.mark.multiproc
def test_a_rank_trains_on_a_file_many_times_its_memory_without_growing(dpsuite, tmp_path):
    small, large = tmp_path / "small.bin", tmp_path / "large.bin"
    for path, size in ((small, 64 * MiB), (large, 8 * 1024 * MiB)):
        with open(path, "wb") as f:
            np.random.default_rng(0).integers(0, 128, 4096, dtype=np.uint16).tofile(f)
            f.truncate(size)  # sparse: the rest reads as zeros and takes no disk
    w = get_workload("gpt2", token_path=str(large), context=64, num_samples=4000)
    assert not w.holds_data_in_memory() and data_bytes(w) == 0
    rss = {
        (name, workers): gpt2_run(dpsuite, tmp_path / f"{name}{workers}", path, workers)["metrics"][
            "peak_rss_mib"
        ]
        for name, path, workers in (("small", small, 2), ("large", large, 2), ("large", large, 0))
    }  # with 0 loader workers each rank reads the mapped file itself
    print("peak RSS per rank (MiB) by (file, loader workers):", rss)
    for workers in (2, 0):
        assert large.stat().st_size / MiB > 5 * rss["large", workers]  # several times the rank
        assert rss["large", workers] < rss["small", 2] * 1.25 + 64  # no growth with the file
