"""torchvision classification models: any arch by name, random or ImageFolder images, and a real
2-worker DDP step. Skipped where torchvision cannot be imported (it is the optional extra
`dpsuite[vision]`); `nox -s models` installs a matching torch/torchvision pair and runs them."""

import pytest
import torch

from dpsuite import workloads
from dpsuite.workloads.configs.vision import torchvision_problem
from tests.conftest import only_run, read_run, run_subprocess

pytestmark = pytest.mark.skipif(
    torchvision_problem() is not None, reason=str(torchvision_problem())
)

TINY = dict(arch="resnet18", image_size=32, num_classes=10, num_samples=40)


def test_any_arch_maps_uint8_images_to_its_classes():
    w = workloads.get_workload("torchvision", **TINY)
    data = w.load_data()
    assert data.train_x.dtype == torch.uint8 and data.train_x.shape == (32, 3, 32, 32)
    assert w.synthetic_data and w.label() == "torchvision-resnet18"
    assert w.build_model()(data.train_x[:2]).shape == (2, 10)
    vit = workloads.get_workload("torchvision", **{**TINY, "arch": "vit_b_16"})
    assert vit.build_model().eval()(data.train_x[:1]).shape == (1, 10)


def test_image_folder_is_read_lazily_cropped_and_split(tmp_path):
    from PIL import Image

    for label, color in (("cat", (250, 0, 0)), ("dog", (0, 0, 250))):
        (tmp_path / label).mkdir()
        for i in range(5):
            Image.new("RGB", (48, 40), color).save(tmp_path / label / f"{i}.png")
    w = workloads.get_workload("torchvision", **{**TINY, "data_root": str(tmp_path)})
    data = w.load_data()  # Datasets, each image decoded and cropped when taken
    assert not w.synthetic_data and w.num_train() == len(data.train) == 8
    assert not w.holds_data_in_memory() and len(data.eval) == 2
    samples = [data.train[i] for i in range(8)]
    assert all(x.dtype == torch.uint8 and x.shape == (3, 32, 32) for x, _ in samples)
    reds = [x[0] for x, label in samples if label == 0]  # class 0 (cat) is red
    assert reds and all(bool((r > 200).all()) for r in reds)


def test_an_unknown_arch_is_one_line_with_a_guess():
    done = run_subprocess("run", "workload=torchvision", "workload.arch=resnet5", "--dry-run")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "did you mean resnet50?" in last


@pytest.mark.multiproc
def test_two_workers_train_resnet18_at_32px(dpsuite, tmp_path):
    args = ["workload=torchvision", *(f"workload.{k}={v}" for k, v in TINY.items())]
    args += ["workers=2", "batch.per_worker=4", "train.epochs=2", "train.max_steps=6"]
    args += ["timing.warmup_steps=2"]
    assert dpsuite("run", *args, f"results_dir={tmp_path}", "timing.calibration_steps=2") == 0
    rec = read_run(only_run(tmp_path))
    assert rec["status"] == "complete" and rec["metrics"]["steps"] == 6
    assert rec["workload"] == "torchvision-resnet18" and rec["synthetic_data"] is True
    assert rec["metrics"]["flops_per_sample"] > 0 and rec["metrics"]["samples_per_s"] > 0
