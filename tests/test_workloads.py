import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from dpsuite import workloads
from dpsuite.engine.batch_sources import index_batches, worker_index_batches
from dpsuite.workloads.mnist_1d import cache_path, generation_args, load_or_generate


def test_generation_leaves_global_rng_alone(tmp_path):
    random.seed(7)
    np.random.seed(7)
    expect_py, expect_np = random.random(), np.random.rand()
    random.seed(7)
    np.random.seed(7)
    load_or_generate(tmp_path, 500, 42)
    assert random.random() == expect_py and np.random.rand() == expect_np


def test_cache_is_keyed_by_arguments_and_reused(tmp_path):
    a = load_or_generate(tmp_path, 500, 1)
    path = cache_path(tmp_path, generation_args(500, 1))
    assert path.exists()
    mtime = path.stat().st_mtime_ns
    b = load_or_generate(tmp_path, 500, 1)
    assert path.stat().st_mtime_ns == mtime
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = load_or_generate(tmp_path, 500, 2)
    assert not np.array_equal(a["x"], c["x"])
    assert a["x"].shape == (400, 40) and a["x_test"].shape == (100, 40)


@pytest.mark.parametrize("name", ["mnist1d_mlp", "mnist1d_cnn"])
def test_models_map_signals_to_ten_classes(name, tmp_path):
    w = workloads.get_workload(name, cache_dir=tmp_path, num_samples=500)
    data = w.load_data()
    out = w.build_model()(data.train_x[:8])
    assert out.shape == (8, 10)
    assert w.loss(out, data.train_y[:8]).ndim == 0
    correct, n = w.correct(out, data.train_y[:8])
    assert n == 8 and 0 <= int(correct) <= 8


@pytest.mark.parametrize("name", list(workloads.CONFIGS))
def test_every_config_names_its_workload_class(name):
    """The one list: each built-in config's `class_path` is a usable Workload class whose
    `Config` is that config, under the config's name."""
    config = workloads.CONFIGS[name]
    cls = workloads.plugins.import_target(config.class_path)
    assert workloads.plugins.problem(cls) is None
    assert cls.Config is config and cls.name == config.name == name
    assert workloads.lookup(name) is cls


def test_lookup_imports_only_the_chosen_workload():
    """A run imports its own workload's module, not every built-in's (nor torchvision's)."""
    check = (
        "import sys; from dpsuite.workloads import lookup; lookup('mnist1d_mlp'); "
        "print(','.join(m for m in sys.modules if m.startswith('dpsuite.workloads.')))"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.strip().split(","))
    assert "dpsuite.workloads.mnist_1d" in loaded
    others = {c.class_path.partition(":")[0] for c in workloads.CONFIGS.values()}
    assert loaded & others == {"dpsuite.workloads.mnist_1d"}


def test_unknown_workload():
    with pytest.raises(KeyError, match="unknown workload"):
        workloads.get_workload("nope")


@pytest.mark.parametrize("n,world,b", [(1000, 2, 16), (1003, 4, 8), (777, 3, 5)])
def test_shards_union_is_the_one_worker_batch(n, world, b):
    one = index_batches(n, 1, 0, world * b, seed=5, epoch=2)
    many = worker_index_batches(n, world, b, seed=5, epoch=2)
    assert len(one) == len(many) == n // (world * b)
    for big, parts in zip(one, many, strict=True):
        assert torch.equal(torch.sort(big).values, torch.sort(torch.cat(parts)).values)
    # a new epoch is a new shuffle
    assert not torch.equal(one[0], index_batches(n, 1, 0, world * b, seed=5, epoch=3)[0])


# ---- a damaged or unwritable data cache -----------------------------------------------------


def _damage(path, how: str) -> None:
    if how == "garbage":
        path.write_bytes(b"not an npz file")
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif how == "directory":
        path.unlink()
        path.mkdir()
    else:  # a readable npz whose arrays are wrong
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        if how == "wrong_keys":
            arrays["features"] = arrays.pop("x")
        elif how == "nan":
            arrays["x"][3, 5] = np.nan
        elif how == "labels":
            arrays["y"][0] = 10
        elif how == "shape":
            arrays["x"] = arrays["x"][:, :20]
        np.savez(path, **arrays)


@pytest.mark.parametrize(
    "how", ["garbage", "truncated", "directory", "wrong_keys", "nan", "labels", "shape"]
)
def test_a_damaged_cache_file_is_named_and_generated_again(tmp_path, how):
    fresh = load_or_generate(tmp_path, 500, 3)
    path = cache_path(tmp_path, generation_args(500, 3))
    _damage(path, how)
    with pytest.warns(UserWarning, match=f"data cache {path} is damaged"):
        again = load_or_generate(tmp_path, 500, 3)
    assert all(np.array_equal(fresh[k], again[k]) for k in fresh)
    if how != "directory":  # a directory in its place is left alone (the data stays in memory)
        with np.load(path, allow_pickle=False) as f:
            assert np.array_equal(f["x"], fresh["x"]), "the cache file is sound again"


def test_an_unwritable_cache_keeps_the_data_in_memory(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory should be")
    with pytest.warns(UserWarning, match="cannot write the data cache"):
        arrays = load_or_generate(blocked / "cache", 500, 3)
    assert arrays["x"].shape == (400, 40)


def test_the_generator_arguments_are_the_installed_mnist1d_defaults():
    """dpsuite writes mnist1d's default arguments out (importing mnist1d costs every run's start
    ~0.9 s); they must stay the package's, or the data and its cache key would drift."""
    from mnist1d.data import get_dataset_args

    defaults = get_dataset_args(as_dict=True)
    defaults.pop("url")
    assert generation_args(500, 3) == {**defaults, "num_samples": 500, "seed": 3}


def test_checking_an_mnist1d_config_does_not_import_mnist1d():
    probe = (
        "import sys; from dpsuite.workloads.configs.mnist_1d import MNIST1DMLPConfig; "
        "MNIST1DMLPConfig(num_samples=500).check(); print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('mnist1d', 'matplotlib')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
