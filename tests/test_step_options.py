"""Step options (channels_last, torch.compile, the optimizer's kernels) change the speed, not
the training; and MFU against a known GPU's datasheet peak."""

import numpy as np
import pytest

from dpsuite.measure.flops import known_peak_tflops, utilization
from tests.conftest import only_run, read_params, read_run

TINY_RESNET = ["workload=cifar_resnet", "workload.width=4", "workload.num_samples=200"]


def test_known_gpus_have_datasheet_peaks_and_cpus_none():
    assert known_peak_tflops("NVIDIA H200", "bf16") == 989.0
    assert known_peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert known_peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert known_peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 Tensor Cores
    assert known_peak_tflops(None, "fp32") is None and known_peak_tflops("Mystery", "bf16") is None
    got = utilization(1e9, 1000.0, 1, 989.0)
    assert got["peak_tflops"] == 989.0 and got["mfu"] == pytest.approx(1e12 / 989e12)


@pytest.mark.multiproc
def test_channels_last_and_foreach_train_the_same_model(dpsuite, tmp_path):
    args = [*TINY_RESNET, "workers=2", "batch.per_worker=8", "train.max_steps=4"]
    # fp64: in fp32 the two memory orders round differently, and BatchNorm on 4 channels
    # amplifies that to ~1e-2 in one step; in fp64 they agree to ~1e-14.
    args += ["train.save_params=true", "timing.calibration_steps=0", "precision=fp64"]
    options = {
        "plain": [],
        "tuned": ["step.channels_last=true", "optimizer.implementation=foreach"],
    }
    params = {}
    for name, extra in options.items():
        out = tmp_path / name
        assert dpsuite("run", *args, *extra, f"results_dir={out}") == 0
        params[name] = read_params(only_run(out))
    rec = read_run(only_run(tmp_path / "tuned"))
    assert rec["config"]["step"] == {"channels_last": True, "compile": False}
    assert rec["config"]["optimizer"]["implementation"] == "foreach"
    assert rec["metrics"]["peak_tflops"] is None  # a CPU, and none given
    assert only_run(tmp_path / "tuned").name != only_run(tmp_path / "plain").name
    for key, value in params["plain"].items():
        np.testing.assert_allclose(params["tuned"][key], value, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
@pytest.mark.multiproc
def test_compiled_model_trains_under_ddp(dpsuite, tmp_path):
    args = ["workload=tiny_gpt", "workload.num_samples=200", "workload.width=32"]
    args += ["workload.context=16", "workload.depth=1", "workers=2", "train.max_steps=4"]
    args += ["step.compile=true", "optimizer.implementation=fused"]
    assert dpsuite("run", *args, f"results_dir={tmp_path}") == 0
    rec = read_run(only_run(tmp_path))
    assert rec["status"] == "complete" and rec["config"]["step"]["compile"] is True
    assert np.isfinite(rec["metrics"]["final_train_loss"])
