"""An ImageFolder tree read lazily (``dpsuite.workloads.image_folder``): listed once, each image
decoded and augmented (seeded per epoch and sample) when taken; trained through ``dpsuite run``
with 0, 1 and 2 loader workers, the wait for data measured; and the torchvision workload still
refusing cleanly where torchvision cannot be imported."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from dpsuite import workloads
from dpsuite.workloads.configs.vision import torchvision_problem
from dpsuite.workloads.image_folder import (
    CROP_RATIO,
    ImageFiles,
    ImageList,
    crop_box,
    split_image_folder,
)
from tests.conftest import only_run, read_params, read_run, run_subprocess
from tests.image_workloads import write_jpeg_folder

CNN = "workload=tests.image_workloads:SmallCNN"


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("images"), classes=3, per_class=20)


def test_the_tree_is_listed_in_imagefolder_order_without_decoding(jpegs):
    (jpegs / "class_1" / "notes.txt").write_text("not an image")
    images = ImageList(jpegs)
    assert images.classes == ["class_0", "class_1", "class_2"] and len(images) == 60
    assert images.labels.tolist() == [0] * 20 + [1] * 20 + [2] * 20
    assert images.paths[21].decode() == "class_1/001.jpg"


def test_samples_are_uint8_crops_seeded_by_epoch_and_index(jpegs):
    train, evaluate = split_image_folder(ImageList(jpegs), size=16, limit=60, seed=3)
    assert (len(train), len(evaluate)) == (48, 12)
    x, label = train[5]
    assert x.dtype == torch.uint8 and x.shape == (3, 16, 16) and 0 <= label < 3
    assert torch.equal(train[5][0], x)  # the same epoch and sample: the same crop
    again = pickle.loads(pickle.dumps(train))  # as another rank would build it
    assert torch.equal(again[5][0], x)
    train.set_epoch(1)
    assert not torch.equal(train[5][0], x)  # a new epoch: a new crop
    e1, e2 = evaluate[0][0], evaluate[0][0]
    assert e1.shape == (3, 16, 16) and torch.equal(e1, e2)
    reds = torch.stack([evaluate[i][0] for i in range(12) if evaluate[i][1] == 0])
    assert float(reds[:, 0].float().mean()) > 150  # class 0 is red, kept through the decode


def test_crop_boxes_stay_inside_the_image_and_fall_back_to_a_centre_crop():
    rng = np.random.default_rng(0)
    for _ in range(200):
        left, top, w, h = crop_box(37, 23, rng)
        assert left >= 0 and left + w <= 37 and top >= 0 and top + h <= 23 and w > 0 and h > 0
    left, top, w, h = crop_box(400, 10, np.random.default_rng(1))  # too wide for any try?
    assert left + w <= 400 and h <= 10 and w / h <= CROP_RATIO[1] + 0.2


def test_loader_workers_share_the_epoch_set_after_they_started(jpegs):
    train, _ = split_image_folder(ImageList(jpegs), size=16, limit=60, seed=3)
    loader = torch.utils.data.DataLoader(
        train, batch_size=4, num_workers=1, persistent_workers=True,
        multiprocessing_context="fork",
    )  # fmt: skip
    first = next(iter(loader))[0]
    train.set_epoch(1)
    second = next(iter(loader))[0]
    train.set_epoch(0)
    assert torch.equal(next(iter(loader))[0], first) and not torch.equal(second, first)


def cnn_run(dpsuite, out, images, *overrides: str) -> tuple[dict, dict[str, np.ndarray]]:
    args = [
        CNN,
        f"workload.data_root={images}",
        "precision=fp64",
        "train.save_params=true",
        "train.max_steps=12",
        "timing.warmup_steps=2",
        "timing.calibration_steps=0",
        "seed=5",
    ]
    assert dpsuite("run", *args, f"results_dir={out}", *overrides) == 0
    run = only_run(out)
    return read_run(run), read_params(run)


@pytest.mark.multiproc
def test_jpegs_train_with_0_1_and_2_loader_workers_alike(dpsuite, tmp_path, jpegs):
    """The same samples, crops and flips whoever decodes them: 1 or 2 loader workers, and 2 DDP
    ranks of half the batch, train exactly like one process reading its own samples."""
    runs = {
        "1 rank, 0 loader workers": ["workers=1", "batch.per_worker=8", "data.loader_workers=0"],
        "1 rank, 1 loader worker": ["workers=1", "batch.per_worker=8", "data.loader_workers=1"],
        "2 ranks, 2 loader workers": ["workers=2", "batch.per_worker=4", "data.loader_workers=2"],
    }
    results = {
        name: cnn_run(dpsuite, tmp_path / str(i), jpegs, *args)
        for i, (name, args) in enumerate(runs.items())
    }
    (base_rec, base), *others = results.values()
    for rec, _ in results.values():
        m = rec["metrics"]
        assert rec["status"] == "complete" and rec["data_form"] == "datasets"
        assert m["steps"] == 12 and 0.0 <= m["data_wait_share"] <= 1.0 and m["first_batch_s"] > 0
    for key in base:
        assert np.array_equal(base[key], others[0][1][key])  # loader workers change nothing
        assert float(np.max(np.abs(base[key] - others[1][1][key]))) <= 1e-10
    for name, (rec, _) in results.items():
        m = rec["metrics"]
        print(f"{name}: data_wait_share {m['data_wait_share']:.3f}, step {m['step_time_s']:.4f} s")


@pytest.mark.skipif(torchvision_problem() is None, reason="torchvision can be imported here")
def test_torchvision_on_an_image_folder_refuses_in_one_line_without_torchvision(jpegs):
    done = run_subprocess("run", "workload=torchvision", f"workload.data_root={jpegs}", "--dry-run")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "workload=torchvision needs the torchvision that matches torch" in last
    with pytest.raises(ValueError, match="needs the torchvision"):
        workloads.get_workload("torchvision", data_root=str(jpegs))


def test_a_lazy_image_workload_holds_no_data_in_the_memory_estimate(jpegs):
    from dpsuite.measure.memory_estimate import data_bytes
    from tests.image_workloads import SmallCNN, SmallCNNConfig

    w = SmallCNN(SmallCNNConfig(data_root=str(jpegs)))
    assert w.num_train() == 48 and data_bytes(w) == 0
    held = workloads.get_workload("mnist1d_mlp")
    assert held.holds_data_in_memory() and data_bytes(held) > 0


def test_imagefiles_is_a_map_style_dataset(jpegs):
    images = ImageList(jpegs)
    files = ImageFiles(images, np.arange(3), size=8, augment=False, seed=0)
    assert len(files) == 3 and files[2][0].shape == (3, 8, 8)
