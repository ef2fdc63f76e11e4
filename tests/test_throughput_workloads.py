"""cifar_resnet and tiny_gpt: models, data (synthetic and local), and 2-worker DDP runs."""

from dataclasses import fields

import numpy as np
import pytest
import torch

from dpsuite import results, workloads
from dpsuite.workloads.base import parameter_count
from dpsuite.workloads.cifar_resnet import RECORD_BYTES, TEST_FILE, TRAIN_FILES
from tests.conftest import only_run, read_params, read_run


def test_resnet18_has_about_11m_parameters_and_maps_images_to_classes():
    w = workloads.get_workload("cifar_resnet", num_samples=40)
    assert 11.0e6 < parameter_count(w.build_model()) < 11.3e6
    data = w.load_data()
    assert data.train_x.dtype == torch.uint8 and data.train_x.shape == (32, 3, 32, 32)
    assert data.num_eval == 8
    small = workloads.get_workload("cifar_resnet", num_samples=40, width=4)
    out = small.build_model()(data.train_x[:5])
    assert out.shape == (5, 10)


def test_synthetic_data_is_deterministic_per_seed():
    for name in ("cifar_resnet", "tiny_gpt"):
        a = workloads.get_workload(name, num_samples=50, data_seed=1).load_data()
        b = workloads.get_workload(name, num_samples=50, data_seed=1).load_data()
        c = workloads.get_workload(name, num_samples=50, data_seed=2).load_data()
        assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
        assert not torch.equal(a.train_x, c.train_x)


def write_cifar_bin(directory, records_per_file: int = 3) -> None:
    """Files in the real CIFAR-10 binary format (label byte + 3072 pixel bytes per record)."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, name in enumerate([*TRAIN_FILES, TEST_FILE]):
        recs = rng.integers(0, 256, size=(records_per_file, RECORD_BYTES), dtype=np.uint8)
        recs[:, 0] = (np.arange(records_per_file) + i) % 10
        recs.tofile(directory / name)


def test_cifar_binary_batches_are_read_without_pickle(tmp_path):
    write_cifar_bin(tmp_path / "cifar-10-batches-bin")
    w = workloads.get_workload("cifar_resnet", data_root=str(tmp_path))  # the parent works too
    data = w.load_data()
    assert data.train_x.shape == (15, 3, 32, 32) and data.eval_x.shape == (3, 3, 32, 32)
    assert data.train_y[:3].tolist() == [0, 1, 2] and data.eval_y.tolist() == [5, 6, 7]
    raw = np.fromfile(tmp_path / "cifar-10-batches-bin" / TEST_FILE, dtype=np.uint8)
    assert data.eval_x[0].flatten().tolist() == raw[1:RECORD_BYTES].tolist()


def test_cifar_python_version_is_refused(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(ValueError, match="binary version"):
        workloads.get_workload("cifar_resnet", data_root=str(tmp_path))


def test_tiny_gpt_predicts_every_next_token_and_reads_text(tmp_path):
    w = workloads.get_workload("tiny_gpt", num_samples=20, context=8, width=16, heads=2)
    data = w.load_data()
    assert data.train_x.shape == (16, 8) and torch.equal(data.train_x[:, 1:], data.train_y[:, :-1])
    out = w.build_model()(data.train_x[:3])
    assert out.shape == (3, 8, 256) and w.loss(out, data.train_y[:3]).ndim == 0
    assert w.correct(out, data.train_y[:3])[1] == 24
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"hello world, " * 50)
    reader = workloads.get_workload("tiny_gpt", text_path=str(text), context=8)
    t = reader.load_data()  # memory-mapped: Datasets of (input, target) windows
    assert len(t.train) + len(t.eval) == len(b"hello world, " * 50) // 9
    assert not reader.holds_data_in_memory()
    x, y = t.train[0]
    assert x.tolist() == list(b"hello wo") and y.tolist() == list(b"ello wor")


def small(name: str) -> list[str]:
    """The overrides that make a built-in workload small enough for a test (its config's)."""
    config = workloads.CONFIGS[name]
    return [f"workload={name}", *(f"workload.{k}={v}" for k, v in config.small.items())]


def test_every_built_in_workload_states_its_small_configuration():
    """A default-sized model would take the contract test minutes: each built-in's config says
    how to make it small (its own `small`, not the base's empty one)."""
    for name, config in workloads.CONFIGS.items():
        assert config.small is not workloads.WorkloadConfig.small, name
        assert set(config.small) <= {f.name for f in fields(config)}, name


@pytest.mark.multiproc
@pytest.mark.parametrize("name", list(workloads.CONFIGS))
def test_two_workers_train_a_few_steps(dpsuite, tmp_path, name):
    """The registry's contract: every workload builds, and two DDP workers train it."""
    if name == "torchvision":
        pytest.importorskip("torchvision", reason="torchvision models need dpsuite[vision]")
    args = [*small(name), "workers=2", "batch.per_worker=8", "train.max_steps=12"]
    assert dpsuite("run", *args, f"results_dir={tmp_path}", "timing.calibration_steps=3") == 0
    rec = read_run(only_run(tmp_path))
    m = rec["metrics"]
    assert rec["status"] == "complete" and m["steps"] == 12
    # Communication is sampled (every timing.comm_every-th step): each sample fits in its own
    # step, while the median over the samples may exceed the median step (one sample here).
    steps = results.load_steps(only_run(tmp_path))
    sampled = steps[steps["comm_s"].notna()]
    assert len(sampled) >= 1 and (sampled["comm_s"] <= sampled["step_time_s"]).all()
    assert 0 < m["comm_time_s"] <= steps["step_time_s"].max()
    assert m["exposed_comm_s"] is not None
    assert np.isfinite(m["final_train_loss"]) and m["final_eval_acc"] is not None


@pytest.mark.multiproc
def test_calibration_leaves_batchnorm_training_unchanged(dpsuite, tmp_path):
    """BatchNorm buffers and momentum included: calibrating must not move the trajectory."""
    args = [*small("cifar_resnet"), "workers=2", "batch.per_worker=8", "train.max_steps=8"]
    args += ["train.save_params=true", "precision=fp64", "train.eval_at_start=false"]
    params = {}
    for steps in (0, 4):
        out = tmp_path / f"cal{steps}"
        assert dpsuite("run", *args, f"timing.calibration_steps={steps}", f"results_dir={out}") == 0
        params[steps] = read_params(only_run(out))
        assert read_run(only_run(out))["metrics"]["calibration_steps"] == steps
    assert params[0].keys() == params[4].keys()
    assert any("running_mean" in k for k in params[0])
    for k in params[0]:
        assert np.array_equal(params[0][k], params[4][k]), k
